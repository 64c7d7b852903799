#include "dbus.hpp"

#include <fmt/format.h>

#include <cstring>

namespace pyjail::dbus {

namespace {

// Containers nest at most 32 arrays and 32 structs deep (the specification); a deeper
// signature is refused before it can exhaust the stack.
constexpr int kMaxDepth = 64;

std::size_t alignment_of(char code) {
    switch (code) {
        case 'y': case 'g': case 'v': return 1;
        case 'n': case 'q': return 2;
        case 'b': case 'i': case 'u': case 'h': case 's': case 'o': case 'a': return 4;
        case 'x': case 't': case 'd': case '(': case '{': return 8;
        default: return 0;
    }
}

// Where the single complete type starting at sig[i] ends (one past it). Throws on a malformed
// signature.
std::size_t single_type_end(std::string_view sig, std::size_t i, int depth) {
    if (depth > kMaxDepth) throw DbusError("signature nests too deeply");
    if (i >= sig.size()) throw DbusError("signature ends inside a type");
    char c = sig[i];
    if (c == 'a') return single_type_end(sig, i + 1, depth + 1);
    if (c == '(' || c == '{') {
        char close = c == '(' ? ')' : '}';
        std::size_t j = i + 1;
        int members = 0;
        while (j < sig.size() && sig[j] != close) {
            j = single_type_end(sig, j, depth + 1);
            ++members;
        }
        if (j >= sig.size() || members == 0) throw DbusError("unterminated or empty struct");
        if (c == '{' && members != 2) throw DbusError("a dict entry holds two types");
        return j + 1;
    }
    if (alignment_of(c) == 0) throw DbusError(fmt::format("unknown type code '{}'", c));
    return i + 1;
}

// Reads (or skips) values in a message, checking every length against what is there.
// Positions are offsets from the start of the message, as alignment is.
struct Cursor {
    std::string_view data;
    bool big = false;
    std::size_t pos = 0;

    void need(std::size_t n) const {
        if (n > data.size() - pos) throw DbusError("message ends inside a value");
    }
    void align(std::size_t n) {
        std::size_t to = (pos + n - 1) / n * n;
        need(to - pos);
        for (; pos < to; ++pos)
            if (data[pos] != 0) throw DbusError("padding is not zero");
    }
    std::uint64_t uint(std::size_t n) {
        align(n);
        need(n);
        std::uint64_t v = 0;
        for (std::size_t k = 0; k < n; ++k) {
            auto b = static_cast<std::uint8_t>(data[pos + (big ? k : n - 1 - k)]);
            v = (v << 8) | b;
        }
        pos += n;
        return v;
    }
    std::string_view text(std::size_t length_bytes) {
        std::size_t n = static_cast<std::size_t>(uint(length_bytes));
        need(n);
        need(n + 1);
        std::string_view s = data.substr(pos, n);
        if (data[pos + n] != '\0' || s.find('\0') != std::string_view::npos)
            throw DbusError("string is not NUL-terminated or holds a NUL");
        pos += n + 1;
        return s;
    }
    std::string_view string() { return text(4); }
    std::string_view signature() {
        std::string_view s = text(1);
        // Every type of the signature must be complete.
        for (std::size_t i = 0; i < s.size();) i = single_type_end(s, i, 0);
        return s;
    }

    // Skips one value of the single complete type at sig[i]; returns the end of that type.
    std::size_t skip(std::string_view sig, std::size_t i, int depth) {
        if (depth > kMaxDepth) throw DbusError("value nests too deeply");
        char c = sig[i];
        switch (c) {
            case 'y': uint(1); return i + 1;
            case 'n': case 'q': uint(2); return i + 1;
            case 'b': {
                if (uint(4) > 1) throw DbusError("boolean is neither 0 nor 1");
                return i + 1;
            }
            case 'i': case 'u': case 'h': uint(4); return i + 1;
            case 'x': case 't': case 'd': uint(8); return i + 1;
            case 's': case 'o': string(); return i + 1;
            case 'g': signature(); return i + 1;
            case 'v': {
                std::string_view inner = signature();
                if (inner.empty() || single_type_end(inner, 0, depth + 1) != inner.size())
                    throw DbusError("variant holds other than one type");
                skip(inner, 0, depth + 1);
                return i + 1;
            }
            case 'a': {
                std::size_t length = static_cast<std::size_t>(uint(4));
                std::size_t element_end = single_type_end(sig, i + 1, depth + 1);
                align(alignment_of(sig[i + 1]));
                need(length);
                std::size_t end = pos + length;
                while (pos < end) {
                    std::size_t before = pos;
                    skip(sig, i + 1, depth + 1);
                    if (pos == before) throw DbusError("array element of no size");
                }
                if (pos != end) throw DbusError("array length does not match its elements");
                return element_end;
            }
            case '(': case '{': {
                align(8);
                char close = c == '(' ? ')' : '}';
                std::size_t j = i + 1;
                while (sig[j] != close) j = skip(sig, j, depth + 1);
                return j + 1;
            }
            default: throw DbusError(fmt::format("unknown type code '{}'", c));
        }
    }
};

void put_u32(std::string& buf, std::size_t at, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) buf[at + static_cast<std::size_t>(k)] = static_cast<char>((v >> (8 * k)) & 0xff);
}

}  // namespace

void Writer::u32(std::uint32_t v) {
    align(4);
    for (int k = 0; k < 4; ++k) byte(static_cast<std::uint8_t>((v >> (8 * k)) & 0xff));
}

void Writer::align(std::size_t n) {
    while (buf_.size() % n != 0) byte(0);
}

void Writer::string(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    buf_.append(s);
    byte(0);
}

void Writer::signature(std::string_view s) {
    byte(static_cast<std::uint8_t>(s.size()));
    buf_.append(s);
    byte(0);
}

std::size_t Writer::begin_array(std::size_t element_alignment) {
    u32(0);
    std::size_t length_at = buf_.size() - 4;
    align(element_alignment);  // padding before the first element is not part of the length
    // The start of the elements is recorded after the length, in the length's place.
    put_u32(buf_, length_at, static_cast<std::uint32_t>(buf_.size()));
    return length_at;
}

void Writer::end_array(std::size_t length_at) {
    std::uint32_t start = 0;
    for (int k = 3; k >= 0; --k)
        start = (start << 8) | static_cast<std::uint8_t>(buf_[length_at + static_cast<std::size_t>(k)]);
    put_u32(buf_, length_at, static_cast<std::uint32_t>(buf_.size() - start));
}

std::string encode_call(const Call& call, std::uint32_t serial) {
    Writer h;
    h.byte('l');
    h.byte(static_cast<std::uint8_t>(Type::MethodCall));
    h.byte(0);  // flags: a reply is expected
    h.byte(1);  // protocol version
    h.u32(static_cast<std::uint32_t>(call.body.size()));
    h.u32(serial);
    std::size_t fields = h.begin_array(8);
    auto field = [&](std::uint8_t code, char type, const std::string& value) {
        if (value.empty() && type != 'g') return;
        h.begin_struct();
        h.byte(code);
        h.signature(std::string(1, type));
        if (type == 'g') h.signature(value);
        else h.string(value);
    };
    field(1, 'o', call.path);
    field(2, 's', call.interface);
    field(3, 's', call.member);
    field(6, 's', call.destination);
    if (!call.signature.empty()) field(8, 'g', call.signature);
    h.end_array(fields);
    h.align(8);
    return h.bytes() + call.body;
}

std::size_t message_size(std::string_view buf) {
    if (buf.size() < 16) return 0;
    if (buf[0] != 'l' && buf[0] != 'B') throw DbusError("not a D-Bus message (bad endianness mark)");
    if (buf[3] != 1) throw DbusError("unsupported D-Bus protocol version");
    Cursor c{buf.substr(0, 16), buf[0] == 'B', 4};
    std::uint64_t body = c.uint(4);
    c.uint(4);
    std::uint64_t fields = c.uint(4);
    if (body > kMaxMessage || fields > kMaxMessage) throw DbusError("message too large");
    std::uint64_t header = (16 + fields + 7) / 8 * 8;
    std::uint64_t total = header + body;
    if (total > kMaxMessage) throw DbusError("message too large");
    return static_cast<std::size_t>(total);
}

Message parse_message(std::string_view whole) {
    std::size_t size = message_size(whole);
    if (size == 0 || size != whole.size()) throw DbusError("incomplete message");
    Message m;
    m.big_endian = whole[0] == 'B';
    m.type = static_cast<Type>(whole[1]);
    Cursor c{whole, m.big_endian, 4};
    std::size_t body_length = static_cast<std::size_t>(c.uint(4));
    m.serial = static_cast<std::uint32_t>(c.uint(4));
    if (m.serial == 0) throw DbusError("message serial is 0");
    std::size_t fields_length = static_cast<std::size_t>(c.uint(4));
    std::size_t fields_end = c.pos + fields_length;
    // The header fields are parsed within their own length only.
    Cursor f{whole.substr(0, fields_end), m.big_endian, c.pos};
    while (f.pos < fields_end) {
        f.align(8);
        auto code = static_cast<std::uint8_t>(f.uint(1));
        std::string_view type = f.signature();
        auto want = [&](std::string_view expected) {
            if (type != expected)
                throw DbusError(fmt::format("header field {} has type '{}'", code, type));
        };
        switch (code) {
            case 1: want("o"); m.path = f.string(); break;
            case 2: want("s"); m.interface = f.string(); break;
            case 3: want("s"); m.member = f.string(); break;
            case 4: want("s"); m.error_name = f.string(); break;
            case 5: want("u"); m.reply_serial = static_cast<std::uint32_t>(f.uint(4)); break;
            case 7: want("s"); m.sender = f.string(); break;
            case 8: want("g"); m.signature = f.signature(); break;
            default:  // destination, unix fds, and fields a later specification adds
                if (type.empty() || single_type_end(type, 0, 0) != type.size())
                    throw DbusError("header field variant holds other than one type");
                f.skip(type, 0, 1);
        }
    }
    if (f.pos != fields_end) throw DbusError("header fields overrun their length");
    c.pos = fields_end;
    c.align(8);
    if (whole.size() - c.pos != body_length) throw DbusError("body length mismatch");
    m.body = std::string(whole.substr(c.pos));
    if (m.type == Type::Error && m.error_name.empty()) throw DbusError("error without a name");
    if ((m.type == Type::MethodReturn || m.type == Type::Error) && !m.reply_serial)
        throw DbusError("reply without a reply serial");
    // The body must hold exactly what the signature says (checked here once, so that Reader
    // only ever reads well-formed data). Alignment in the body is relative to the message,
    // whose body starts at a multiple of 8: the same as relative to the body.
    Cursor b{m.body, m.big_endian, 0};
    for (std::size_t i = 0; i < m.signature.size();) i = b.skip(m.signature, i, 0);
    if (!b.data.empty() && b.pos != b.data.size()) throw DbusError("body longer than its signature");
    return m;
}

std::uint32_t Reader::u32() {
    Cursor c{data_, big_, pos_};
    auto v = static_cast<std::uint32_t>(c.uint(4));
    pos_ = c.pos;
    return v;
}

std::string Reader::string() {
    Cursor c{data_, big_, pos_};
    std::string s(c.string());
    pos_ = c.pos;
    return s;
}

std::string error_text(const Message& m) {
    if (m.signature.empty() || m.signature[0] != 's') return {};
    Reader r(m.body, m.big_endian);
    return r.string();
}

std::string auth_request(std::uint32_t uid) {
    std::string decimal = std::to_string(uid), hex;
    for (char ch : decimal) hex += fmt::format("{:02x}", static_cast<unsigned char>(ch));
    // The leading NUL byte is the credentials byte every client sends first.
    return std::string(1, '\0') + "AUTH EXTERNAL " + hex + "\r\n";
}

bool auth_accepted(std::string_view line) { return line.rfind("OK ", 0) == 0; }

std::optional<std::string> unix_socket_of(std::string_view address) {
    while (!address.empty()) {
        std::size_t semi = address.find(';');
        std::string_view one = address.substr(0, semi);
        address = semi == std::string_view::npos ? std::string_view() : address.substr(semi + 1);
        if (one.rfind("unix:", 0) != 0) continue;
        one.remove_prefix(5);
        while (!one.empty()) {
            std::size_t comma = one.find(',');
            std::string_view kv = one.substr(0, comma);
            one = comma == std::string_view::npos ? std::string_view() : one.substr(comma + 1);
            std::size_t eq = kv.find('=');
            if (eq == std::string_view::npos) continue;
            std::string_view key = kv.substr(0, eq), raw = kv.substr(eq + 1);
            if (key != "path" && key != "abstract") continue;
            std::string value;
            bool ok = true;
            for (std::size_t i = 0; i < raw.size(); ++i) {
                if (raw[i] != '%') {
                    value += raw[i];
                    continue;
                }
                auto hexval = [](char h) -> int {
                    if (h >= '0' && h <= '9') return h - '0';
                    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
                    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
                    return -1;
                };
                if (i + 2 >= raw.size()) {
                    ok = false;
                    break;
                }
                int hi = hexval(raw[i + 1]);
                int lo = hexval(raw[i + 2]);
                if (hi < 0 || lo < 0) {
                    ok = false;
                    break;
                }
                value += static_cast<char>(hi * 16 + lo);
                i += 2;
            }
            // A NUL in a path would silently shorten it.
            if (!ok || value.empty() || value.find('\0') != std::string::npos) continue;
            return key == "abstract" ? std::string(1, '\0') + value : value;
        }
    }
    return std::nullopt;
}

}  // namespace pyjail::dbus
