// Controlled egress, in the supervisor (egress_plan.hpp says how a flow goes): the jail's
// resolver and the relay of its connections to the allowed hosts.
//
// Everything is one epoll descriptor, polled in the supervisor's loop next to the deadlines,
// and every descriptor in it is non-blocking: no read, write, connect or lookup can hold up
// a deadline. What the jail can make the supervisor do is bounded:
// - at most kMaxConnections relayed connections at once; past that, and past
//   kAcceptsPerSecond, the listeners are not polled and further connections wait in the jail's
//   own kernel (each listener's backlog is kListenBacklog);
// - at most kDnsPerSecond answered queries; the rest wait in the socket's buffer or drop;
// - per connection, kMaxSniff bytes of memory until it has said which host it wants, then
//   two pipes the kernel splices through (no copy into the supervisor);
// - --net-bytes each way, all connections together; a connection that would exceed it is cut;
// - a connection that says nothing within kEgressSniffMs, or stays idle kEgressIdleMs, is
//   closed;
// - host-side lookups: one per name slot at a time, kResolveAttempts tries of
//   kResolveAttemptMs each.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "egress_plan.hpp"
#include "sys.hpp"
#include "throttle.hpp"

namespace pyjail::supervisor {

inline constexpr double kAcceptsPerSecond = 200, kAcceptsBurst = 64;
inline constexpr double kDnsPerSecond = 500, kDnsBurst = 100;
inline constexpr double kResolveAttemptMs = 2000;
inline constexpr int kResolveAttempts = 3;

// The host's facts the relay needs, read before the jail starts.
struct EgressHostFacts {
    std::vector<dns::Ipv4> nameservers;    // --net-dns, else /etc/resolv.conf's
    std::uint16_t nameserver_port = 53;
    std::vector<dns::Ipv4> own_addresses;  // the host's interfaces' (refused unless pinned)
};
// Throws JailError when there is no resolver to ask and some allowed name is not pinned.
EgressHostFacts read_egress_host_facts(const EgressPolicy& policy);

class EgressRelay {
public:
    // Throws JailError.
    EgressRelay(EgressPlan plan, EgressHostFacts facts, double now_ms);
    ~EgressRelay();
    EgressRelay(const EgressRelay&) = delete;
    EgressRelay& operator=(const EgressRelay&) = delete;

    // A socket from the jail's pid 1 (MsgKind::Egress): `index` into egress_socket_specs.
    // A socket that is not what the plan says is refused (closed).
    void adopt(std::int64_t index, UniqueFd fd);
    // Whether pid 1 handed over every socket (checked at "ready": fail closed otherwise).
    bool complete() const;

    int poll_fd() const { return epoll_.get(); }
    // Until the next timer (ms), or -1.
    int timeout_ms(double now_ms) const;
    // One turn: whatever epoll has ready, and the timers that are due. Never blocks.
    void handle(double now_ms);
    // The jail is gone: every connection is closed and counted.
    void finish();

    const EgressReport& report() const { return report_; }

    struct Conn;
    struct Slot;
    struct Pipe;  // one direction of a connection, spliced through a pipe

private:
    void on_dns(double now);
    // Answers one query; returns the name slot it gave out, if any.
    std::optional<std::size_t> answer_query(std::string_view msg, const void* from, unsigned from_len);
    void on_listener(std::size_t index, double now);
    void start_resolve(std::size_t slot, double now);
    void send_attempt(std::size_t slot, double now);
    void on_resolver(std::size_t slot, double now);
    void resolved(std::size_t slot, double now);
    void service(std::size_t c, std::uint32_t client_ev, std::uint32_t upstream_ev, double now);
    void connect_upstream(Conn& c);
    bool decide(Conn& c);
    bool pump(Conn& c, bool up, double now);
    void update_interest(std::size_t c);
    void close_conn(std::size_t c, const char* verdict, const std::string& why);
    void set_listeners_polled(bool on);
    void watch(int fd, std::uint64_t key, std::uint32_t events);

    EgressPlan plan_;
    EgressHostFacts facts_;
    UniqueFd epoll_;
    UniqueFd dns_;
    std::vector<UniqueFd> listeners_;  // parallel to plan_.listeners
    std::size_t adopted_ = 0;
    std::vector<std::unique_ptr<Slot>> slots_;  // parallel to plan_.slots
    std::array<std::unique_ptr<Conn>, kMaxConnections> conns_;
    std::array<std::uint32_t, kMaxConnections> generations_{};
    std::size_t open_conns_ = 0;
    bool listeners_polled_ = true;
    bool dns_polled_ = true;
    TokenBucket accepts_, queries_;
    EgressReport report_;
};

}  // namespace pyjail::supervisor
