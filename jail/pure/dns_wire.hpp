// The DNS wire format, both ways pyjail speaks it for controlled egress (egress_plan.hpp):
// the queries a jail sends to its resolver (answered by the supervisor, never forwarded), and
// the supervisor's own stub queries to the host's resolver for the names it relays to.
//
// Pure and bounded: a query from the jail is hostile input. Nothing here allocates more than
// a small multiple of the message, and name decompression follows at most kMaxPointers
// pointers, each strictly backwards, so no message can loop the parser.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail::dns {

inline constexpr std::size_t kMaxUdpMessage = 512;  // what a jail's query may be, plain DNS
inline constexpr std::size_t kMaxName = 253;        // a name's text, without the final dot
inline constexpr int kMaxPointers = 16;             // compression pointers per name

inline constexpr std::uint16_t kTypeA = 1, kTypeCname = 5, kTypeAaaa = 28, kTypeOpt = 41;
inline constexpr std::uint16_t kClassIn = 1;

enum class Rcode : std::uint8_t { NoError = 0, FormErr = 1, ServFail = 2, NxDomain = 3, NotImp = 4,
                                  Refused = 5 };

using Ipv4 = std::array<std::uint8_t, 4>;

// One question of a query, as a jail asked it.
struct Query {
    std::uint16_t id = 0;
    bool recursion_desired = false;
    std::string name;        // lower case, no final dot; "" for the root
    std::uint16_t qtype = 0;
    std::uint16_t qclass = 0;
    std::string question;    // the question's wire bytes, echoed in the answer
};

// A query: not a response, opcode QUERY, exactly one question (names without compression:
// a query has nothing to point back to), no answer or authority records, at most one
// additional (EDNS's OPT). Otherwise nothing: `header_id` then says whether a FORMERR can be
// sent back (the header was readable) or the datagram is dropped.
std::optional<Query> parse_query(std::string_view msg, std::optional<std::uint16_t>* header_id = nullptr);

// The answer to `q`: `rcode`, and an A record for `address` when given (the question's name,
// by pointer). Authoritative, recursion available.
std::string build_answer(const Query& q, Rcode rcode, const std::optional<Ipv4>& address,
                         std::uint32_t ttl = 60);
// FORMERR for a query whose header was readable and nothing else.
std::string build_formerr(std::uint16_t id);

// The supervisor's query for `name`'s A records (recursion desired).
std::string build_query(std::uint16_t id, std::string_view name, std::uint16_t qtype = kTypeA);

struct Response {
    Rcode rcode = Rcode::NoError;
    bool truncated = false;
    std::vector<Ipv4> addresses;  // the answer section's A records (at most kMaxAddresses)
};
inline constexpr std::size_t kMaxAddresses = 16;

// The host resolver's answer to build_query(id, name): nothing unless it is a response to
// exactly that question (id, name, type A, class IN).
std::optional<Response> parse_response(std::string_view msg, std::uint16_t id, std::string_view name);

// A name as a jail may ask for it: 1 to kMaxName characters of letters, digits, '-' and '_'
// in labels of 1 to 63, lower case. Anything else is no name pyjail knows.
bool is_plain_name(std::string_view name);

// The nameservers (IPv4) of a resolv.conf, in order, at most three (as glibc).
std::vector<Ipv4> parse_resolv_conf(std::string_view text);

std::optional<Ipv4> parse_ipv4(std::string_view text);
std::string format_ipv4(const Ipv4& a);

}  // namespace pyjail::dns
