#include "sniff.hpp"

#include <cstdint>

namespace pyjail {

namespace {

using Kind = Sniffed::Kind;

Sniffed refused(std::string why) {
    Sniffed s;
    s.kind = Kind::Refused;
    s.why = std::move(why);
    return s;
}

unsigned byte(std::string_view s, std::size_t i) { return static_cast<unsigned char>(s[i]); }
std::size_t u16(std::string_view s, std::size_t i) { return (byte(s, i) << 8) | byte(s, i + 1); }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// A host name as a client may state it: letters, digits, '-', '_' and '.', lower-cased; a
// final dot dropped. Anything else (a NUL, a space, an IP literal's ':' or '[') is refused
// by returning "" with `ok` false.
std::string host_name(std::string_view text, bool& ok) {
    ok = false;
    if (!text.empty() && text.back() == '.') text.remove_suffix(1);
    if (text.empty() || text.size() > 253) return {};
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        c = lower(c);
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
            return {};
        out += c;
    }
    ok = true;
    return out;
}

bool is_tchar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

std::string_view trim(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
}

// "host" or "host:port" (the port's digits are checked, not compared: the listener fixed the
// port) -> host. IP literals ("[::1]", "1.2.3.4") pass host_name's letters only as dotted
// digits, which then match no allowed name.
std::string authority_host(std::string_view a, bool& ok) {
    ok = false;
    if (auto colon = a.rfind(':'); colon != std::string_view::npos) {
        std::string_view port = a.substr(colon + 1);
        if (port.empty() || port.size() > 5) return {};
        for (char c : port)
            if (c < '0' || c > '9') return {};
        a = a.substr(0, colon);
    }
    return host_name(a, ok);
}

// The request line's start: METHOD SP. Returns the method's length, or 0 when the first
// bytes cannot be an HTTP request (then they are another protocol).
std::size_t method_length(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size() && i < 32 && s[i] >= 'A' && s[i] <= 'Z') ++i;
    if (i == 0 || i >= s.size() || s[i] != ' ') return 0;
    return i;
}

// The TLS records at the start of `s`, their handshake bytes joined (a ClientHello may span
// records). `complete`: the first handshake message is whole.
struct Handshake {
    std::string bytes;
    bool complete = false;
    std::string error;
};

Handshake join_handshake(std::string_view s) {
    Handshake h;
    std::size_t pos = 0;
    while (true) {
        if (h.bytes.size() >= 4) {
            std::size_t need = 4 + ((byte(h.bytes, 1) << 16) | (byte(h.bytes, 2) << 8) | byte(h.bytes, 3));
            if (h.bytes.size() >= need) {
                h.complete = true;
                h.bytes.resize(need);
                return h;
            }
            if (need > kMaxSniff) {
                h.error = "a TLS ClientHello larger than pyjail reads";
                return h;
            }
        }
        if (pos + 5 > s.size()) return h;
        if (byte(s, pos) != 0x16) {
            h.error = "a TLS connection that does not start with a handshake";
            return h;
        }
        if (byte(s, pos + 1) != 3) {
            h.error = "not TLS: an unknown record version";
            return h;
        }
        std::size_t len = u16(s, pos + 3);
        if (len == 0 || len > 16384 + 256) {
            h.error = "a TLS record of an invalid length";
            return h;
        }
        if (pos + 5 + len > s.size()) return h;
        h.bytes.append(s.substr(pos + 5, len));
        pos += 5 + len;
    }
}

}  // namespace

Sniffed parse_client_hello(std::string_view m) {
    // handshake type, length(3), version(2), random(32), session id, cipher suites,
    // compression methods, extensions.
    if (m.size() < 4 || byte(m, 0) != 1) return refused("a TLS handshake that is not a ClientHello");
    std::size_t pos = 4 + 2 + 32;
    auto skip = [&](std::size_t len_bytes) {
        if (pos + len_bytes > m.size()) return false;
        std::size_t len = len_bytes == 1 ? byte(m, pos) : u16(m, pos);
        pos += len_bytes + len;
        return pos <= m.size();
    };
    if (!skip(1) || !skip(2) || !skip(1)) return refused("a malformed TLS ClientHello");
    Sniffed s;
    s.kind = Kind::Tls;
    if (pos == m.size()) return s;  // no extensions: no SNI
    if (pos + 2 > m.size()) return refused("a malformed TLS ClientHello");
    std::size_t end = pos + 2 + u16(m, pos);
    if (end != m.size()) return refused("a malformed TLS ClientHello");
    pos += 2;
    bool seen_sni = false;
    while (pos < end) {
        if (pos + 4 > end) return refused("a malformed TLS ClientHello");
        std::size_t type = u16(m, pos), len = u16(m, pos + 2);
        pos += 4;
        if (pos + len > end) return refused("a malformed TLS ClientHello");
        std::string_view ext = m.substr(pos, len);
        pos += len;
        // Encrypted Client Hello: the name that matters is inside, unseen; the outer SNI
        // would name the front (the fronting this check exists to stop).
        if (type == 0xfe0d) return refused("a TLS ClientHello with Encrypted Client Hello");
        if (type != 0) continue;
        if (seen_sni) return refused("a TLS ClientHello with two server_name extensions");
        seen_sni = true;
        // server_name_list: one host_name entry (RFC 6066 allows no second of a type).
        if (ext.size() < 2 || u16(ext, 0) + 2 != ext.size()) return refused("a malformed TLS server_name");
        std::size_t at = 2;
        while (at < ext.size()) {
            if (at + 3 > ext.size()) return refused("a malformed TLS server_name");
            unsigned name_type = byte(ext, at);
            std::size_t name_len = u16(ext, at + 1);
            at += 3;
            if (at + name_len > ext.size()) return refused("a malformed TLS server_name");
            if (name_type == 0) {
                if (!s.host.empty()) return refused("a TLS ClientHello naming two hosts");
                bool ok = false;
                s.host = host_name(ext.substr(at, name_len), ok);
                if (!ok) return refused("a TLS server_name that is not a host name");
            }
            at += name_len;
        }
    }
    return s;
}

Sniffed parse_http_head(std::string_view head) {
    std::size_t line_end = head.find("\r\n");
    if (line_end == std::string_view::npos) return refused("a malformed HTTP request");
    std::string_view line = head.substr(0, line_end);
    std::size_t m = method_length(line);
    if (m == 0) return refused("a malformed HTTP request line");
    std::string_view method = line.substr(0, m);
    std::string_view rest = line.substr(m + 1);
    std::size_t sp = rest.find(' ');
    if (sp == std::string_view::npos) return refused("a malformed HTTP request line");
    std::string_view target = rest.substr(0, sp), version = rest.substr(sp + 1);
    if (version != "HTTP/1.1" && version != "HTTP/1.0") return refused("an HTTP version other than 1.0 or 1.1");
    // A proxy's forms would send the request on to a host the Host header does not name.
    if (method == "CONNECT") return refused("an HTTP CONNECT (a tunnel to another host)");
    std::string target_host;
    if (target.substr(0, 7) == "http://" || target.substr(0, 8) == "https://") {
        std::string_view auth = target.substr(target.find("//") + 2);
        auth = auth.substr(0, auth.find_first_of("/?#"));
        if (auth.find('@') != std::string_view::npos) return refused("an HTTP request target with user information");
        bool ok = false;
        target_host = authority_host(auth, ok);
        if (!ok) return refused("an HTTP request target naming no host name");
    } else if (!(target == "*" || (!target.empty() && target[0] == '/'))) {
        return refused("an HTTP request target of an unknown form");
    }
    Sniffed s;
    s.kind = Kind::Http;
    s.head_size = head.size();
    bool seen_host = false;
    std::size_t pos = line_end + 2;
    while (pos < head.size()) {
        std::size_t end = head.find("\r\n", pos);
        if (end == std::string_view::npos) return refused("a malformed HTTP request head");
        std::string_view field = head.substr(pos, end - pos);
        pos = end + 2;
        if (field.empty()) break;
        // Bare CR/LF and folded lines are read differently by different servers: a second
        // Host one of them sees and we do not.
        if (field.find('\r') != std::string_view::npos || field.find('\n') != std::string_view::npos ||
            field.front() == ' ' || field.front() == '\t')
            return refused("an HTTP header line pyjail cannot read unambiguously");
        std::size_t colon = field.find(':');
        if (colon == std::string_view::npos || colon == 0) return refused("a malformed HTTP header line");
        std::string_view name = field.substr(0, colon);
        for (char c : name)
            if (!is_tchar(c)) return refused("a malformed HTTP header name");
        if (!iequals(name, "host")) continue;
        if (seen_host) return refused("an HTTP request with two Host headers");
        seen_host = true;
        bool ok = false;
        s.host = authority_host(trim(field.substr(colon + 1)), ok);
        if (!ok) return refused("an HTTP Host that is not a host name");
    }
    if (!seen_host) return refused("an HTTP request without a Host header");
    if (!target_host.empty() && target_host != s.host)
        return refused("an HTTP request whose target and Host name different hosts");
    return s;
}

std::string one_request_only(std::string_view first_bytes, const Sniffed& sniffed) {
    std::string_view head = first_bytes.substr(0, sniffed.head_size);
    while (!head.empty() && (head.front() == '\r' || head.front() == '\n')) head.remove_prefix(1);
    std::string out;
    out.reserve(head.size() + 20);
    std::size_t pos = 0;
    bool first = true;
    while (pos < head.size()) {
        std::size_t end = head.find("\r\n", pos);
        if (end == std::string_view::npos || end == pos) break;  // the empty line
        std::string_view line = head.substr(pos, end - pos);
        pos = end + 2;
        std::string_view name = line.substr(0, line.find(':'));
        if (!first && (iequals(name, "connection") || iequals(name, "keep-alive") || iequals(name, "proxy-connection")))
            continue;
        first = false;
        out.append(line);
        out += "\r\n";
    }
    out += "Connection: close\r\n\r\n";
    return out;
}

Sniffed sniff(std::string_view s) {
    if (s.size() > kMaxSniff) s = s.substr(0, kMaxSniff);
    if (s.empty()) return {};
    if (byte(s, 0) == 0x16) {
        Handshake h = join_handshake(s);
        if (!h.error.empty()) return refused(h.error);
        if (!h.complete) {
            if (s.size() >= kMaxSniff) return refused("a TLS ClientHello larger than pyjail reads");
            return {};
        }
        return parse_client_hello(h.bytes);
    }
    // HTTP/2 with prior knowledge: its requests name their host only in frames.
    if (s.substr(0, 4) == "PRI ") return refused("HTTP/2 without TLS (its host is not in a request head)");
    // Servers skip empty lines before a request line (RFC 9112, 2.2): so do we, or a CRLF
    // first would make a request look like another protocol.
    std::size_t lead = 0;
    while (lead < s.size() && (s[lead] == '\r' || s[lead] == '\n')) ++lead;
    if (lead > 16) return refused("a connection that starts with many empty lines");
    if (lead == s.size()) return {};
    std::string_view rest = s.substr(lead);
    if (!((rest[0] >= 'A' && rest[0] <= 'Z') || (rest[0] >= 'a' && rest[0] <= 'z'))) {
        Sniffed o;
        o.kind = Kind::Opaque;
        return o;
    }
    // A first line that names an HTTP version is HTTP, and read strictly: a lenient server
    // would take a tab for a space, or a bare LF for a line's end, and find a Host we did not
    // see. A first line without one is another protocol with a word first (SMTP's EHLO, Redis's
    // inline commands), or HTTP/0.9, which has no Host to front with.
    constexpr std::size_t kMaxFirstLine = 8192;
    std::size_t nl = rest.find('\n');
    if (nl == std::string_view::npos && rest.size() < kMaxFirstLine) return {};
    std::string_view line = rest.substr(0, std::min(nl, kMaxFirstLine));
    bool names_http = false;
    for (std::size_t i = 0; i + 5 <= line.size() && !names_http; ++i)
        names_http = iequals(line.substr(i, 5), "http/");
    if (!names_http) {
        Sniffed o;
        o.kind = Kind::Opaque;
        return o;
    }
    std::size_t head_end = rest.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
        if (rest.find("\n\n") != std::string_view::npos || rest.find("\n\r\n") != std::string_view::npos)
            return refused("an HTTP request head with bare line feeds");
        if (s.size() >= kMaxSniff) return refused("an HTTP request head larger than pyjail reads");
        return {};
    }
    Sniffed h = parse_http_head(rest.substr(0, head_end + 4));
    h.head_size += lead;
    return h;
}

}  // namespace pyjail
