// Controlled egress (--net allow), the pure part: which names a jail may reach, on which
// ports, the loopback addresses and listeners that stand for them in the jail's network
// namespace, and which real addresses pyjail refuses to relay to.
//
// How a flow goes (egress_relay.hpp does it): the jail keeps its own network namespace with
// only `lo`. Its pid 1, before dropping its capabilities, binds a UDP socket at 127.0.0.1:53
// and, for each allowed name (a wildcard gets a small pool of them), one fake loopback address
// 127.100.X.Y with a TCP listener on each allowed port, and hands them all to the supervisor.
// The jail's resolver (its /etc/resolv.conf says 127.0.0.1) asks the supervisor, which answers
// an allowed name with its fake address and every other name with NXDOMAIN: no query leaves
// the host, so names cannot carry data out. A connection accepted on a name's listener is
// relayed to that name only (resolved by pyjail on the host, refusing loopback, private,
// link-local and the host's own addresses unless --net-resolve pinned one), and only if its
// TLS SNI or HTTP Host names that same host (sniff.hpp). Anything else the program tries --
// an IP address, UDP, ICMP, raw sockets -- finds no route out of its namespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dns_wire.hpp"

namespace pyjail {

inline constexpr std::size_t kMaxAllowHosts = 32;
inline constexpr std::size_t kMaxPortsPerHost = 8;
// Addresses a `*.example.com` entry hands out: its first kWildcardSlots distinct names each
// get one; later names get NXDOMAIN (the pool bounds the listeners pid 1 makes).
inline constexpr std::size_t kWildcardSlots = 8;
// Sockets pid 1 hands over and the supervisor holds for one jail (each its own descriptor).
inline constexpr std::size_t kMaxListeners = 240;
// Connections relayed at once; more wait in the kernel's accept queue (of kListenBacklog).
inline constexpr std::size_t kMaxConnections = 32;
inline constexpr int kListenBacklog = 16;
// A connection with no byte either way for this long is closed.
inline constexpr double kEgressIdleMs = 60'000;
// A client must have said which host it wants (its first bytes) within this.
inline constexpr double kEgressSniffMs = 10'000;
// Decisions the report lists; later ones are only counted.
inline constexpr std::size_t kMaxEgressDecisions = 64;

struct AllowedHost {
    std::string name;      // "example.com", or "*.example.com" (subdomains, not itself)
    std::vector<std::uint16_t> ports;
    std::string origin;    // "--allow-host" or the profile line, for messages
    bool wildcard() const { return name.size() > 2 && name[0] == '*'; }
};

struct PinnedName {
    std::string name;
    dns::Ipv4 address{};
};

// What the policy says (policy.hpp: Policy::egress).
struct EgressPolicy {
    std::vector<AllowedHost> hosts;
    std::vector<PinnedName> pins;
    std::optional<std::uint64_t> bytes;  // --net-bytes: each way, all connections together
    // --net-dns: the resolver pyjail asks for the allowed names (default: /etc/resolv.conf's).
    std::optional<dns::Ipv4> dns_server;
    std::uint16_t dns_port = 53;
};

// "ADDRESS" or "ADDRESS:PORT" of --net-dns. Throws UsageError.
void parse_net_dns(std::string_view text, const std::string& origin, EgressPolicy& e);



// "HOST", "HOST:PORT" or "*.DOMAIN[:PORT]"; without a port, 80 and 443. Throws UsageError.
AllowedHost parse_allow_host(std::string_view text, const std::string& origin);

// A name for a set of hosts one service needs, as `--allow-host @NAME`: each host with its
// port (man pyjail(1) and --explain list them).
struct AllowHostPreset {
    std::string_view name;                      // "pypi", written "@pypi"
    std::vector<std::string_view> hosts;        // "HOST:PORT", as --allow-host takes them
    std::string_view what;                      // for --explain and messages
};
const std::vector<AllowHostPreset>& allow_host_presets();
// One --allow-host value: a preset ("@pypi") gives each of its hosts, anything else what
// parse_allow_host does. Each host's origin names the preset. Throws UsageError.
std::vector<AllowedHost> expand_allow_host(std::string_view text, const std::string& origin);
// "HOST:ADDRESS" (an IPv4 address). Throws UsageError.
PinnedName parse_net_resolve(std::string_view text, const std::string& origin);
// Merges entries naming the same host (their ports together) and checks the bounds.
// Throws UsageError.
void check_egress_policy(EgressPolicy& e);

// One address of the jail's network namespace that stands for a name.
struct NameSlot {
    std::size_t host = 0;   // index into EgressPolicy::hosts
    dns::Ipv4 address{};    // 127.100.X.Y
};

// One listener pid 1 binds: a name slot's address, on one of its host's ports.
struct ListenerSpec {
    std::size_t slot = 0;   // index into EgressPlan::slots
    std::uint16_t port = 0;
};

struct EgressPlan {
    EgressPolicy policy;
    std::vector<NameSlot> slots;
    std::vector<ListenerSpec> listeners;
};

EgressPlan plan_egress(const EgressPolicy& policy);

// One socket the jail's pid 1 makes (egress_pid1.hpp): UDP (the resolver) or a TCP listener.
struct EgressSocketSpec {
    std::uint32_t address = 0;  // IPv4, host byte order
    std::uint16_t port = 0;
    bool udp = false;
};

// The sockets, in the order pid 1 hands them over: the resolver's 127.0.0.1:53, then one per
// EgressPlan::listeners entry.
std::vector<EgressSocketSpec> egress_socket_specs(const EgressPlan& plan);

// Whether `name` (lower case, no final dot) is `pattern`'s: equal, or for "*.d" a name
// ending in ".d" with at least one label before it.
bool host_matches(std::string_view pattern, std::string_view name);
// The allowed host `name` falls under (an exact entry before a wildcard), or nothing.
std::optional<std::size_t> find_allowed_host(const EgressPolicy& e, std::string_view name);
// Whether every name and port `inner` allows, `outer` allows too: a name, or a wildcard's
// every subdomain, under one of outer's entries with each of its ports. A template's
// allowlist bounds its runs' (serve_bounds.hpp).
bool allowlist_within(const AllowedHost& inner, const EgressPolicy& outer);
// The address --net-resolve pins `name` to, if any.
std::optional<dns::Ipv4> pinned_address(const EgressPolicy& e, std::string_view name);

// What the report says about egress: each decision once (repeats are counted), at most
// kMaxEgressDecisions of them; later ones only in the totals.
struct EgressDecision {
    std::string host;            // as the jail asked for it (a DNS name, or a listener's)
    std::uint16_t port = 0;      // 0: a DNS query
    std::string verdict;         // "allowed", "refused", or "cut" (relayed, then ended by a limit)
    std::string why;             // refused or cut: the reason
    std::uint64_t bytes_out = 0, bytes_in = 0;  // to the host, from it
    std::uint64_t count = 0;
};

struct EgressReport {
    bool enabled = false;                 // --net allow
    std::vector<EgressDecision> decisions;
    std::uint64_t decisions_dropped = 0;  // past kMaxEgressDecisions
    std::uint64_t connections = 0, refused = 0, dns_queries = 0, dns_refused = 0;
    std::uint64_t most_at_once = 0;       // connections relayed at the same time, at most
    std::uint64_t bytes_out = 0, bytes_in = 0;
    bool bytes_limit_hit = false;         // --net-bytes cut a connection

    // Adds one decision; merges it into an equal earlier one (host, port, verdict, why).
    void add(const EgressDecision& d);
};

// Why pyjail does not relay to `a` unless it was pinned, or nothing for a public address:
// loopback and "this network" (the host's own services), private and shared (RFC 1918, CGNAT:
// the host's LAN), link-local (169.254.169.254 is a cloud's metadata service, which hands out
// credentials), multicast, reserved and broadcast.
std::optional<std::string> refused_address_reason(const dns::Ipv4& a);

}  // namespace pyjail
