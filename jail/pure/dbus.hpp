// The D-Bus wire format, as much of it as pyjail needs to ask systemd for a delegated scope
// (systemd_scope.hpp): the EXTERNAL authentication lines, method calls pyjail marshals, and a
// parser for whatever the bus sends back. Pure: no sockets, no syscalls; unit-tested and fuzzed
// (tests/fuzz, target `dbus`).
//
// Why our own and not sd-bus: pyjail is a static PIE, Debian ships no static libsystemd, and a
// static binary cannot dlopen libsystemd.so either. One method call, one signal and an
// authentication line are a few hundred lines, and the bus's replies are parsed with bounds on
// every length, since a bus peer is not trusted to send well-formed messages.
//
// Specification: https://dbus.freedesktop.org/doc/dbus-specification.html ("Message Protocol").
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pyjail::dbus {

// Larger messages are refused: everything pyjail expects is a few hundred bytes, and a bus
// that announces more (up to the specification's 128 MiB) must not make pyjail allocate it.
inline constexpr std::size_t kMaxMessage = 64 * 1024;

enum class Type : std::uint8_t { MethodCall = 1, MethodReturn = 2, Error = 3, Signal = 4 };

// Marshals values in little-endian order, aligned as the specification says. Alignment is
// relative to the start of the body, which starts on an 8-byte boundary of the message.
class Writer {
public:
    void byte(std::uint8_t v) { buf_.push_back(static_cast<char>(v)); }
    void u32(std::uint32_t v);
    void boolean(bool v) { u32(v ? 1 : 0); }
    void string(std::string_view s);     // 's' and 'o'
    void signature(std::string_view s);  // 'g'
    void align(std::size_t n);
    // An array: begin_array returns the position of its length, end_array fills it in.
    // `element_alignment` is 8 for structs and dict entries.
    std::size_t begin_array(std::size_t element_alignment);
    void end_array(std::size_t length_at);
    void begin_struct() { align(8); }
    const std::string& bytes() const { return buf_; }

private:
    std::string buf_;
};

struct Call {
    std::string destination, path, interface, member;
    std::string signature;  // of the body
    std::string body;       // marshalled by a Writer
};

// One method call message, ready to send.
std::string encode_call(const Call& call, std::uint32_t serial);

// A message from the bus, with the header fields pyjail reads.
struct Message {
    Type type = Type::MethodCall;
    std::uint32_t serial = 0;
    std::optional<std::uint32_t> reply_serial;
    std::string path, interface, member, error_name, sender, signature;
    bool big_endian = false;
    std::string body;
};

// How many bytes the message at the front of `buf` occupies: 0 when fewer than its fixed
// header (16 bytes) have arrived. Throws DbusError for a message that cannot be valid or is
// larger than kMaxMessage.
std::size_t message_size(std::string_view buf);

// Parses one whole message (message_size bytes). Throws DbusError.
Message parse_message(std::string_view whole);

// Reads a body whose signature is a sequence of basic types (pyjail checks the signature
// before reading). Throws DbusError past the end or on malformed strings.
class Reader {
public:
    Reader(std::string_view body, bool big_endian) : data_(body), big_(big_endian) {}
    std::uint32_t u32();
    std::string string();  // 's' and 'o'
    bool at_end() const { return pos_ == data_.size(); }

private:
    std::string_view data_;
    bool big_;
    std::size_t pos_ = 0;
};

// The first argument of an error reply when it is a string (the human-readable text), else "".
std::string error_text(const Message& m);

class DbusError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// EXTERNAL authentication: the NUL byte, the AUTH line for `uid`, and BEGIN is sent after OK.
std::string auth_request(std::uint32_t uid);
// The server's answer to it: true for "OK <guid>", false for "REJECTED ..." and anything else.
bool auth_accepted(std::string_view line);

// The unix socket a bus address names ("unix:path=/run/user/1000/bus", alternatives separated
// by ';', values %-escaped), the first usable one; an abstract socket comes back with a
// leading NUL. nullopt when no alternative is a unix path or abstract socket.
std::optional<std::string> unix_socket_of(std::string_view address);

}  // namespace pyjail::dbus
