// What a connection a jail made through controlled egress says first (egress_relay.hpp): a
// TLS ClientHello (whose SNI names the host it wants), an HTTP/1 request head (whose Host
// does), or some other protocol. The supervisor relays a connection accepted on an allowed
// name's listener only if the name the client states is that name: a shared front (a CDN, a
// virtual-host proxy) routes by SNI or Host, and would otherwise carry the jail to any site
// it serves ("domain fronting").
//
// Pure and bounded: the bytes are the jail's. sniff() is called again with more bytes until
// it decides; it never looks past kMaxSniff bytes, and a client that has not decided by then
// is refused.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pyjail {

inline constexpr std::size_t kMaxSniff = 16 * 1024 + 5 * 4;  // a full TLS record, and headers

struct Sniffed {
    enum class Kind {
        NeedMore,  // undecided: wait for more bytes (up to kMaxSniff)
        Tls,       // a ClientHello; `host`: its server_name, lower case ("" when it has none)
        Http,      // an HTTP/1.x request head; `host`: its Host's name, lower case, no port
        Opaque,    // neither: a protocol of its own (a database's, SSH, ...)
        Refused,   // a TLS or HTTP start pyjail will not relay; `why` says what
    };
    Kind kind = Kind::NeedMore;
    std::string host;
    std::string why;
    // Http: the bytes of the head (up to and including its empty line).
    std::size_t head_size = 0;
};

Sniffed sniff(std::string_view first_bytes);

// HTTP: the request head `sniffed.head_size` bytes of `first_bytes` hold, rewritten to ask the
// server to close the connection after its response (its Connection, Keep-Alive and
// Proxy-Connection fields replaced by "Connection: close"). Only the first request of a
// connection is read: a second one on a kept-alive connection could name another host of the
// same front, so a server that follows RFC 9112 (9.6) answers no other.
std::string one_request_only(std::string_view first_bytes, const Sniffed& sniffed);

// TLS: the ClientHello's SNI, parsed from a handshake message's body (exposed for tests).
Sniffed parse_client_hello(std::string_view body);
// HTTP: a complete request head ending in CRLF CRLF (exposed for tests).
Sniffed parse_http_head(std::string_view head);

}  // namespace pyjail
