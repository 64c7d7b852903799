#include "dns_wire.hpp"

#include <cctype>

namespace pyjail::dns {

namespace {

std::uint16_t u16(std::string_view m, std::size_t at) {
    return static_cast<std::uint16_t>((static_cast<unsigned char>(m[at]) << 8) |
                                      static_cast<unsigned char>(m[at + 1]));
}

void put16(std::string& out, unsigned v) {
    out += static_cast<char>((v >> 8) & 0xff);
    out += static_cast<char>(v & 0xff);
}

void put32(std::string& out, std::uint32_t v) {
    put16(out, v >> 16);
    put16(out, v & 0xffff);
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool same_name(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

// Reads a name at `pos`, following compression pointers when `allow_pointers` (each must
// point strictly before the label that holds it: no loops). `pos` moves past the name as it
// is written where it starts. The text gets at most kMaxName + 1 characters; a longer name
// is an error. Labels may hold any byte: `plain` says whether all were letters, digits, '-'
// or '_'.
bool read_name(std::string_view m, std::size_t& pos, bool allow_pointers, std::string& text, bool& plain) {
    text.clear();
    plain = true;
    std::size_t at = pos;
    bool jumped = false;
    int pointers = 0;
    std::size_t wire = 0;
    while (true) {
        if (at >= m.size()) return false;
        auto len = static_cast<unsigned char>(m[at]);
        if ((len & 0xc0) == 0xc0) {
            if (!allow_pointers || at + 1 >= m.size() || ++pointers > kMaxPointers) return false;
            std::size_t target = static_cast<std::size_t>(u16(m, at) & 0x3fff);
            if (target >= at) return false;
            if (!jumped) pos = at + 2;
            jumped = true;
            at = target;
            continue;
        }
        if ((len & 0xc0) != 0) return false;  // the reserved label types
        if (len == 0) {
            if (!jumped) pos = at + 1;
            return true;
        }
        wire += len + 1u;
        if (at + 1 + len > m.size() || wire > kMaxName + 1) return false;
        if (!text.empty()) text += '.';
        for (std::size_t i = 0; i < len; ++i) {
            char c = lower(m[at + 1 + i]);
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) plain = false;
            text += c;
        }
        at += 1 + len;
    }
}

}  // namespace

bool is_plain_name(std::string_view name) {
    if (name.empty() || name.size() > kMaxName) return false;
    std::size_t label = 0;
    for (char c : name) {
        if (c == '.') {
            if (label == 0) return false;
            label = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
        if (++label > 63) return false;
    }
    return label != 0;
}

std::optional<Query> parse_query(std::string_view m, std::optional<std::uint16_t>* header_id) {
    if (header_id) header_id->reset();
    if (m.size() < 12 || m.size() > kMaxUdpMessage) return std::nullopt;
    Query q;
    q.id = u16(m, 0);
    std::uint16_t flags = u16(m, 2);
    // A response sent to us is never answered: two jails' resolvers could not ping-pong.
    if ((flags & 0x8000) != 0) return std::nullopt;
    if (header_id) *header_id = q.id;
    if (((flags >> 11) & 0xf) != 0) return std::nullopt;  // only standard queries
    q.recursion_desired = (flags & 0x0100) != 0;
    if (u16(m, 4) != 1 || u16(m, 6) != 0 || u16(m, 8) != 0 || u16(m, 10) > 1) return std::nullopt;
    std::size_t pos = 12;
    bool plain = true;
    if (!read_name(m, pos, false, q.name, plain)) return std::nullopt;
    if (pos + 4 > m.size()) return std::nullopt;
    q.qtype = u16(m, pos);
    q.qclass = u16(m, pos + 2);
    q.question = std::string(m.substr(12, pos + 4 - 12));
    if (!plain) q.name = "\x01";  // never a plain name: matches nothing (egress_plan.hpp)
    return q;
}

std::string build_answer(const Query& q, Rcode rcode, const std::optional<Ipv4>& address, std::uint32_t ttl) {
    std::string out;
    out.reserve(12 + q.question.size() + 16);
    put16(out, q.id);
    unsigned flags = 0x8000 | 0x0400 | 0x0080 | static_cast<unsigned>(rcode);  // QR, AA, RA
    if (q.recursion_desired) flags |= 0x0100;
    put16(out, flags);
    put16(out, 1);
    put16(out, address ? 1 : 0);
    put16(out, 0);
    put16(out, 0);
    out += q.question;
    if (address) {
        put16(out, 0xc00c);  // the question's name
        put16(out, kTypeA);
        put16(out, kClassIn);
        put32(out, ttl);
        put16(out, 4);
        for (auto b : *address) out += static_cast<char>(b);
    }
    return out;
}

std::string build_formerr(std::uint16_t id) {
    std::string out;
    put16(out, id);
    put16(out, 0x8000 | 0x0080 | static_cast<unsigned>(Rcode::FormErr));
    for (int i = 0; i < 4; ++i) put16(out, 0);
    return out;
}

std::string build_query(std::uint16_t id, std::string_view name, std::uint16_t qtype) {
    std::string out;
    put16(out, id);
    put16(out, 0x0100);  // RD
    put16(out, 1);
    put16(out, 0);
    put16(out, 0);
    put16(out, 0);
    std::size_t start = 0;
    while (start < name.size()) {
        std::size_t dot = name.find('.', start);
        if (dot == std::string_view::npos) dot = name.size();
        out += static_cast<char>(dot - start);
        out += name.substr(start, dot - start);
        start = dot + 1;
    }
    out += '\0';
    put16(out, qtype);
    put16(out, kClassIn);
    return out;
}

std::optional<Response> parse_response(std::string_view m, std::uint16_t id, std::string_view name) {
    if (m.size() < 12 || u16(m, 0) != id) return std::nullopt;
    std::uint16_t flags = u16(m, 2);
    if ((flags & 0x8000) == 0 || ((flags >> 11) & 0xf) != 0) return std::nullopt;
    Response r;
    r.rcode = static_cast<Rcode>(flags & 0xf);
    r.truncated = (flags & 0x0200) != 0;
    if (u16(m, 4) != 1) return std::nullopt;
    std::size_t answers = u16(m, 6);
    std::size_t pos = 12;
    std::string text;
    bool plain = true;
    if (!read_name(m, pos, true, text, plain) || pos + 4 > m.size()) return std::nullopt;
    if (!same_name(text, name) || u16(m, pos) != kTypeA || u16(m, pos + 2) != kClassIn) return std::nullopt;
    pos += 4;
    for (std::size_t i = 0; i < answers; ++i) {
        if (!read_name(m, pos, true, text, plain) || pos + 10 > m.size()) return std::nullopt;
        std::uint16_t type = u16(m, pos), cls = u16(m, pos + 2);
        std::size_t rdlen = u16(m, pos + 8);
        pos += 10;
        if (pos + rdlen > m.size()) return std::nullopt;
        // The answer section of a recursive resolver's reply is the chain for our question
        // (CNAMEs, then the A records at its end): every A record in it is an address of the
        // name.
        if (type == kTypeA && cls == kClassIn && rdlen == 4 && r.addresses.size() < kMaxAddresses) {
            Ipv4 a{};
            for (std::size_t b = 0; b < 4; ++b) a[b] = static_cast<std::uint8_t>(m[pos + b]);
            r.addresses.push_back(a);
        }
        pos += rdlen;
    }
    return r;
}

std::optional<Ipv4> parse_ipv4(std::string_view t) {
    Ipv4 a{};
    std::size_t part = 0, i = 0;
    while (true) {
        if (i >= t.size() || !std::isdigit(static_cast<unsigned char>(t[i]))) return std::nullopt;
        unsigned v = 0;
        std::size_t digits = 0;
        while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
            v = v * 10 + static_cast<unsigned>(t[i] - '0');
            if (++digits > 3 || v > 255) return std::nullopt;
            ++i;
        }
        a[part++] = static_cast<std::uint8_t>(v);
        if (part == 4) return i == t.size() ? std::optional<Ipv4>(a) : std::nullopt;
        if (i >= t.size() || t[i] != '.') return std::nullopt;
        ++i;
    }
}

std::string format_ipv4(const Ipv4& a) {
    return std::to_string(a[0]) + "." + std::to_string(a[1]) + "." + std::to_string(a[2]) + "." +
           std::to_string(a[3]);
}

std::vector<Ipv4> parse_resolv_conf(std::string_view text) {
    std::vector<Ipv4> out;
    std::size_t start = 0;
    while (start < text.size() && out.size() < 3) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(start, end - start);
        start = end + 1;
        constexpr std::string_view kKey = "nameserver";
        if (line.substr(0, kKey.size()) != kKey || line.size() == kKey.size() ||
            !(line[kKey.size()] == ' ' || line[kKey.size()] == '\t'))
            continue;
        line.remove_prefix(kKey.size());
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        std::size_t stop = 0;
        while (stop < line.size() && line[stop] != ' ' && line[stop] != '\t' && line[stop] != '\r' &&
               line[stop] != '#' && line[stop] != ';')
            ++stop;
        if (auto a = parse_ipv4(line.substr(0, stop))) out.push_back(*a);
    }
    return out;
}

}  // namespace pyjail::dns
