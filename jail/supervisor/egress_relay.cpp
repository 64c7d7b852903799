#include "egress_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "error.hpp"
#include "sniff.hpp"

namespace pyjail::supervisor {

namespace {

// epoll keys: what a descriptor is (the top byte), a generation (so an event a closed
// connection left in this turn's batch never reaches the one reusing its place) and an index.
enum Key : std::uint64_t { kDns = 1, kListener = 2, kClient = 3, kUpstream = 4, kResolver = 5 };

std::uint64_t key(Key k, std::uint32_t generation, std::size_t index) {
    return (static_cast<std::uint64_t>(k) << 56) | (static_cast<std::uint64_t>(generation & 0xffffff) << 32) |
           static_cast<std::uint32_t>(index);
}

std::uint32_t ipv4_host_order(const dns::Ipv4& a) {
    return (static_cast<std::uint32_t>(a[0]) << 24) | (static_cast<std::uint32_t>(a[1]) << 16) |
           (static_cast<std::uint32_t>(a[2]) << 8) | a[3];
}

sockaddr_in socket_address(const dns::Ipv4& a, std::uint16_t port) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    s.sin_addr.s_addr = htonl(ipv4_host_order(a));
    return s;
}

constexpr std::size_t kPipeCapacity = 64 * 1024;  // a pipe's default size
// A download that has filled its pipe goes on through a larger one: each relay wake-up then
// moves up to this much, so a 100 MB download costs the supervisor a quarter of the wake-ups
// (on a busy 2-CPU host, fewer switches between server, relay and client are what throughput
// is made of). Bound: kMaxConnections of them, 32 x (256 + 64) KiB = 10 MiB of pipe pages at
// most, and only while full.
// Attack: a pipe counts against the invoking user's pipe budget (fs.pipe-user-pages-soft) by
// its size, not by what it holds, for as long as it exists, and past that budget every new
// pipe of the user gets two pages. A jail holding its connections idle would have charged
// 32 x 256 KiB of download pipes to the user; an idle connection's pipes keep the default.
constexpr std::size_t kDownloadPipeCapacity = 256 * 1024;

// The jail's side of a connection is a loopback in the jail's own network namespace, which
// inherits the host's congestion control. Where that is BBR, every byte the relay sends to the
// jail is paced by timers (a pacing hrtimer, TCP small queues, smaller bursts): on a loopback,
// pacing only costs the supervisor CPU (about a third of the relay's, on a 100 MB download) and
// the download its speed. Reno does not pace, and is always allowed to an unprivileged user.
// The upstream side keeps the host's choice: that leg is a real network.
void send_to_jail_unpaced(int client) {
    static constexpr char kReno[] = "reno";
    (void)::setsockopt(client, IPPROTO_TCP, TCP_CONGESTION, kReno, sizeof kReno - 1);
}

}  // namespace

struct EgressRelay::Pipe {
    UniqueFd r, w;
    std::size_t fill = 0;  // bytes in it
    std::size_t capacity = kPipeCapacity;
    std::size_t grow_to = 0;  // the size it asks for once it has filled (0: none)

    // Its real size. Attack: a jail that shares the invoking user's host uid (no id range of
    // its own) spends the user's pipe budget (fs.pipe-user-pages-soft) on pipes of its own,
    // so the supervisor's new pipes get two pages (and F_SETPIPE_SZ fails); waiting to fill
    // more than it holds, the relay would poll a full pipe without end and spin the
    // supervisor's CPU.
    void size_up(std::size_t want) {
        if (want > kPipeCapacity) (void)::fcntl(w.get(), F_SETPIPE_SZ, static_cast<int>(want));
        int got = ::fcntl(w.get(), F_GETPIPE_SZ);
        if (got > 0) capacity = std::min(static_cast<std::size_t>(got), want);
    }
    // Once full, asks once for grow_to: a download, never an idle connection.
    void grow_when_full() {
        if (fill < capacity || grow_to <= capacity) return;
        std::size_t want = grow_to;
        grow_to = 0;
        size_up(want);
    }
};

// One allowed name's address in the jail: which name it stands for now (a wildcard's slot
// gets one when the jail first asks for it), and what pyjail resolved it to.
struct EgressRelay::Slot {
    std::string name;
    enum class State { Idle, Pending, Ok, Failed } state = State::Idle;
    dns::Ipv4 address{};
    std::string why;  // Failed: the reason
    UniqueFd sock;    // Pending: the query to the host's resolver
    std::uint16_t id = 0;
    int attempt = 0;
    double deadline_ms = 0;
};

struct EgressRelay::Conn {
    UniqueFd client, upstream;
    std::size_t slot = 0;
    std::uint16_t port = 0;
    std::string name;
    enum class State { Resolving, Connecting, Open } state = State::Resolving;
    bool decided = false;   // the client said which host: its bytes may go on
    std::string sniffed;    // the client's bytes until then
    std::string head_out;   // those bytes, to write before splicing
    Pipe up, down;          // client -> upstream, upstream -> client
    bool client_eof = false, upstream_eof = false;
    bool up_shut = false, down_shut = false;
    std::uint64_t out = 0, in = 0;
    double accepted_ms = 0, last_ms = 0;
    std::uint32_t client_events = 0, upstream_events = 0;
    bool cut = false;
};

EgressHostFacts read_egress_host_facts(const EgressPolicy& policy) {
    EgressHostFacts f;
    if (policy.dns_server) {
        f.nameservers.push_back(*policy.dns_server);
        f.nameserver_port = policy.dns_port;
    } else {
        // pyjail is a static binary: glibc's getaddrinfo cannot load the NSS modules there,
        // and c-ares would be a dependency for one question. A small stub client (dns_wire.hpp)
        // asks the resolvers /etc/resolv.conf names, for A records only.
        std::string text;
        if (try_read_file("/etc/resolv.conf", text)) f.nameservers = dns::parse_resolv_conf(text);
    }
    bool needs_dns = false;
    for (const auto& h : policy.hosts)
        if (h.wildcard() || !pinned_address(policy, h.name)) needs_dns = true;
    if (needs_dns && f.nameservers.empty())
        throw JailError("egress", "no IPv4 nameserver in /etc/resolv.conf to resolve the allowed hosts with", 0,
                        "name one with --net-dns ADDRESS, or pin the hosts with --net-resolve HOST:ADDRESS");
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
        for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
            if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
            std::uint32_t v = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
            f.own_addresses.push_back({static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16),
                                       static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)});
        }
        ::freeifaddrs(list);
    }
    return f;
}

EgressRelay::EgressRelay(EgressPlan plan, EgressHostFacts facts, double now_ms)
    : plan_(std::move(plan)),
      facts_(std::move(facts)),
      accepts_(kAcceptsPerSecond, kAcceptsBurst, now_ms),
      queries_(kDnsPerSecond, kDnsBurst, now_ms) {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) throw JailError("egress", "cannot create an epoll instance", errno);
    listeners_.resize(plan_.listeners.size());
    for (std::size_t i = 0; i < plan_.slots.size(); ++i) {
        slots_.push_back(std::make_unique<Slot>());
        const AllowedHost& h = plan_.policy.hosts[plan_.slots[i].host];
        if (!h.wildcard()) slots_.back()->name = h.name;
    }
    report_.enabled = true;
}

EgressRelay::~EgressRelay() = default;

void EgressRelay::watch(int fd, std::uint64_t k, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = k;
    // Nothing wanted: out of the set, so that a hung-up socket (EPOLLHUP is reported whatever
    // the interest) cannot make the loop spin.
    if (events == 0) {
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
        return;
    }
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT)
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

void EgressRelay::adopt(std::int64_t index, UniqueFd fd) {
    // pid 1 is ours, but a socket is checked against the plan before it is used: the wrong
    // one would quietly serve another name.
    auto specs_size = static_cast<std::int64_t>(plan_.listeners.size()) + 1;
    if (index < 0 || index >= specs_size || !fd) return;
    int type = 0;
    socklen_t len = sizeof type;
    sockaddr_in a{};
    socklen_t alen = sizeof a;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &alen) != 0 || a.sin_family != AF_INET)
        return;
    std::vector<EgressSocketSpec> specs = egress_socket_specs(plan_);
    const EgressSocketSpec& want = specs[static_cast<std::size_t>(index)];
    int listening = 0;
    len = sizeof listening;
    if (type != (want.udp ? SOCK_DGRAM : SOCK_STREAM) || ntohs(a.sin_port) != want.port ||
        ntohl(a.sin_addr.s_addr) != want.address ||
        (!want.udp && (::getsockopt(fd.get(), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)))
        return;
    if (::fcntl(fd.get(), F_SETFL, O_NONBLOCK) != 0) return;
    if (index == 0) {
        if (dns_) return;
        dns_ = std::move(fd);
        watch(dns_.get(), key(kDns, 0, 0), EPOLLIN);
    } else {
        auto i = static_cast<std::size_t>(index - 1);
        if (listeners_[i]) return;
        listeners_[i] = std::move(fd);
        watch(listeners_[i].get(), key(kListener, 0, i), EPOLLIN);
    }
    ++adopted_;
}

bool EgressRelay::complete() const { return adopted_ == plan_.listeners.size() + 1; }

int EgressRelay::timeout_ms(double now) const {
    double next = -1;
    auto until = [&](double at) {
        if (next < 0 || at < next) next = at;
    };
    for (const auto& c : conns_) {
        if (!c) continue;
        until(c->decided && c->state == Conn::State::Open ? c->last_ms + kEgressIdleMs
                                                          : c->accepted_ms + kEgressSniffMs);
    }
    for (const auto& s : slots_)
        if (s->state == Slot::State::Pending) until(s->deadline_ms);
    if (!listeners_polled_ && open_conns_ < kMaxConnections) until(now + accepts_.ms_until(now, 1));
    if (!dns_polled_) until(now + queries_.ms_until(now, 1));
    if (next < 0) return -1;
    return next <= now ? 0 : static_cast<int>(std::ceil(next - now));
}

void EgressRelay::handle(double now) {
    epoll_event events[64];
    int n = ::epoll_wait(epoll_.get(), events, 64, 0);
    for (int i = 0; i < n; ++i) {
        std::uint64_t k = events[i].data.u64;
        auto kind = static_cast<Key>(k >> 56);
        auto gen = static_cast<std::uint32_t>((k >> 32) & 0xffffff);
        auto index = static_cast<std::size_t>(k & 0xffffffffu);
        std::uint32_t ev = events[i].events;
        switch (kind) {
            case kDns: on_dns(now); break;
            case kListener: on_listener(index, now); break;
            case kResolver: on_resolver(index, now); break;
            case kClient:
            case kUpstream:
                if (index < kMaxConnections && conns_[index] && (generations_[index] & 0xffffff) == gen)
                    service(index, kind == kClient ? ev : 0, kind == kUpstream ? ev : 0, now);
                break;
        }
    }
    // Timers: lookups that took too long, connections silent or idle too long.
    for (std::size_t s = 0; s < slots_.size(); ++s)
        if (slots_[s]->state == Slot::State::Pending && now >= slots_[s]->deadline_ms) send_attempt(s, now);
    for (std::size_t c = 0; c < conns_.size(); ++c) {
        if (!conns_[c]) continue;
        Conn& x = *conns_[c];
        if (x.decided && x.state == Conn::State::Open) {
            if (now >= x.last_ms + kEgressIdleMs) close_conn(c, "allowed", "closed after 60 s idle");
        } else if (now >= x.accepted_ms + kEgressSniffMs) {
            close_conn(c, "refused", x.decided ? "the host did not answer within 10 s"
                                               : "the client did not say which host it wants within 10 s");
        }
    }
    if (!listeners_polled_ && open_conns_ < kMaxConnections && accepts_.ms_until(now, 1) <= 0)
        set_listeners_polled(true);
    if (!dns_polled_ && queries_.ms_until(now, 1) <= 0) {
        dns_polled_ = true;
        watch(dns_.get(), key(kDns, 0, 0), EPOLLIN);
    }
}

// ---- the jail's resolver ----

void EgressRelay::on_dns(double now) {
    // A bounded batch a turn, at most kDnsPerSecond: a jail that floods its resolver is
    // answered at that pace, and its datagrams wait (or drop) in its own socket's buffer.
    for (int i = 0; i < 64; ++i) {
        if (!queries_.take(now)) {
            dns_polled_ = false;
            watch(dns_.get(), key(kDns, 0, 0), 0);
            return;
        }
        char buf[dns::kMaxUdpMessage + 1];
        sockaddr_in from{};
        socklen_t from_len = sizeof from;
        ssize_t got = ::recvfrom(dns_.get(), buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from),
                                 &from_len);
        if (got < 0) return;
        // Prefetch: the name's real address is looked up as soon as the jail asks for it.
        if (auto slot = answer_query(std::string_view(buf, static_cast<std::size_t>(got)), &from, from_len))
            start_resolve(*slot, now);
    }
}

std::optional<std::size_t> EgressRelay::answer_query(std::string_view msg, const void* from, unsigned from_len) {
    auto send = [&](const std::string& reply) {
        (void)::sendto(dns_.get(), reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                       static_cast<const sockaddr*>(from), from_len);
    };
    std::optional<std::uint16_t> id;
    auto q = dns::parse_query(msg, &id);
    if (!q) {
        if (id) send(dns::build_formerr(*id));
        return std::nullopt;
    }
    ++report_.dns_queries;
    // No query is ever forwarded: an allowed name gets its address in the jail, every other
    // name NXDOMAIN, so names cannot carry data out (DNS tunnelling), and the jail learns
    // nothing of the host's network.
    std::optional<std::size_t> host;
    if (dns::is_plain_name(q->name)) host = find_allowed_host(plan_.policy, q->name);
    std::string shown = dns::is_plain_name(q->name) ? q->name : "(not a host name)";
    if (!host || q->qclass != dns::kClassIn) {
        ++report_.dns_refused;
        report_.add({shown, 0, "refused", "not an allowed host", 0, 0, 1});
        send(dns::build_answer(*q, dns::Rcode::NxDomain, std::nullopt));
        return std::nullopt;
    }
    // Its slot: an exact name's own, or a wildcard's slot already given this name, or a free one.
    std::optional<std::size_t> slot;
    for (std::size_t s = 0; s < slots_.size() && !slot; ++s)
        if (plan_.slots[s].host == *host && slots_[s]->name == q->name) slot = s;
    for (std::size_t s = 0; s < slots_.size() && !slot; ++s)
        if (plan_.slots[s].host == *host && slots_[s]->name.empty()) {
            slots_[s]->name = q->name;
            slot = s;
        }
    if (!slot) {
        ++report_.dns_refused;
        report_.add({q->name, 0, "refused",
                     "more than " + std::to_string(kWildcardSlots) + " names of " + plan_.policy.hosts[*host].name, 0,
                     0, 1});
        send(dns::build_answer(*q, dns::Rcode::NxDomain, std::nullopt));
        return std::nullopt;
    }
    report_.add({q->name, 0, "allowed", "", 0, 0, 1});
    // An A query gets the slot's address; AAAA and the rest an empty answer (the name exists,
    // with no such record), so clients fall back to IPv4 at once.
    std::optional<dns::Ipv4> a;
    if (q->qtype == dns::kTypeA) a = plan_.slots[*slot].address;
    send(dns::build_answer(*q, dns::Rcode::NoError, a));
    return slot;
}

// ---- pyjail's own lookups ----

void EgressRelay::start_resolve(std::size_t s, double now) {
    Slot& slot = *slots_[s];
    if (slot.state != Slot::State::Idle || slot.name.empty()) return;
    if (auto pin = pinned_address(plan_.policy, slot.name)) {
        // Pinned by the user: taken as it is, private or loopback included.
        slot.state = Slot::State::Ok;
        slot.address = *pin;
        resolved(s, now);
        return;
    }
    slot.state = Slot::State::Pending;
    slot.attempt = 0;
    send_attempt(s, now);
}

void EgressRelay::send_attempt(std::size_t s, double now) {
    Slot& slot = *slots_[s];
    slot.sock.reset();
    if (slot.attempt >= kResolveAttempts || facts_.nameservers.empty()) {
        slot.state = Slot::State::Failed;
        slot.why = facts_.nameservers.empty() ? "no nameserver to ask" : "the host's resolver did not answer";
        resolved(s, now);
        return;
    }
    const dns::Ipv4& ns = facts_.nameservers[static_cast<std::size_t>(slot.attempt) % facts_.nameservers.size()];
    ++slot.attempt;
    slot.deadline_ms = now + kResolveAttemptMs;
    // A random id and a fresh port per query: an off-path spoofer must guess both.
    if (::getrandom(&slot.id, sizeof slot.id, 0) != sizeof slot.id) slot.id = static_cast<std::uint16_t>(now);
    slot.sock.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!slot.sock) return;  // tried again at the deadline
    sockaddr_in to = socket_address(ns, facts_.nameserver_port);
    std::string q = dns::build_query(slot.id, slot.name);
    if (::connect(slot.sock.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 ||
        ::send(slot.sock.get(), q.data(), q.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        slot.sock.reset();
        return;
    }
    watch(slot.sock.get(), key(kResolver, 0, s), EPOLLIN);
}

void EgressRelay::on_resolver(std::size_t s, double now) {
    if (s >= slots_.size() || slots_[s]->state != Slot::State::Pending || !slots_[s]->sock) return;
    Slot& slot = *slots_[s];
    char buf[4096];
    for (int i = 0; i < 8; ++i) {
        ssize_t got = ::recv(slot.sock.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (got < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            slot.sock.reset();  // ECONNREFUSED: nobody there; tried again at the deadline
            return;
        }
        auto r = dns::parse_response(std::string_view(buf, static_cast<std::size_t>(got)), slot.id, slot.name);
        if (!r) continue;  // not the answer to our question
        slot.sock.reset();
        if (r->rcode == dns::Rcode::NxDomain) {
            slot.state = Slot::State::Failed;
            slot.why = "does not resolve (NXDOMAIN)";
        } else if (r->addresses.empty()) {
            slot.state = Slot::State::Failed;
            slot.why = "has no IPv4 address";
        } else {
            // The first address that is public and not the host's own. A name that resolves
            // only to the host's network (loopback, private, link-local: a cloud's metadata
            // service) would take the jail there; the user must pin such a name to mean it.
            slot.state = Slot::State::Failed;
            for (const auto& a : r->addresses) {
                std::optional<std::string> why = refused_address_reason(a);
                if (!why && std::find(facts_.own_addresses.begin(), facts_.own_addresses.end(), a) !=
                                facts_.own_addresses.end())
                    why = "an address of this host";
                if (!why) {
                    slot.state = Slot::State::Ok;
                    slot.address = a;
                    break;
                }
                if (slot.why.empty()) slot.why = "resolves to " + dns::format_ipv4(a) + ", " + *why;
            }
        }
        resolved(s, now);
        return;
    }
}

void EgressRelay::resolved(std::size_t s, double now) {
    for (std::size_t c = 0; c < conns_.size(); ++c)
        if (conns_[c] && conns_[c]->slot == s && conns_[c]->state == Conn::State::Resolving) service(c, 0, 0, now);
}

// ---- connections ----

void EgressRelay::set_listeners_polled(bool on) {
    listeners_polled_ = on;
    for (std::size_t i = 0; i < listeners_.size(); ++i)
        if (listeners_[i]) watch(listeners_[i].get(), key(kListener, 0, i), on ? static_cast<std::uint32_t>(EPOLLIN) : 0u);
}

void EgressRelay::on_listener(std::size_t index, double now) {
    if (index >= listeners_.size() || !listeners_[index]) return;
    while (true) {
        // Past kMaxConnections or the accept rate, the listeners rest: further connections
        // wait in the jail's own kernel, at no cost to the supervisor.
        if (open_conns_ >= kMaxConnections || !accepts_.take(now)) {
            set_listeners_polled(false);
            return;
        }
        UniqueFd client(::accept4(listeners_[index].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!client) return;
        send_to_jail_unpaced(client.get());
        std::size_t c = 0;
        while (conns_[c]) ++c;
        auto x = std::make_unique<Conn>();
        const ListenerSpec& l = plan_.listeners[index];
        x->client = std::move(client);
        x->slot = l.slot;
        x->port = l.port;
        x->name = slots_[l.slot]->name;
        x->accepted_ms = x->last_ms = now;
        ++report_.connections;
        ++generations_[c];
        conns_[c] = std::move(x);
        ++open_conns_;
        report_.most_at_once = std::max<std::uint64_t>(report_.most_at_once, open_conns_);
        if (conns_[c]->name.empty()) {
            // A wildcard's address the jail never asked the name of: no host to relay to.
            close_conn(c, "refused", "an address no name was resolved to");
            continue;
        }
        start_resolve(l.slot, now);
        service(c, EPOLLIN, 0, now);
    }
}

void EgressRelay::connect_upstream(Conn& c) {
    Slot& slot = *slots_[c.slot];
    c.upstream.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.upstream) return;
    int p1[2], p2[2];
    if (::pipe2(p1, O_NONBLOCK | O_CLOEXEC) != 0) return c.upstream.reset();
    c.up.r.reset(p1[0]);
    c.up.w.reset(p1[1]);
    if (::pipe2(p2, O_NONBLOCK | O_CLOEXEC) != 0) return c.upstream.reset();
    c.down.r.reset(p2[0]);
    c.down.w.reset(p2[1]);
    c.up.size_up(kPipeCapacity);
    c.down.size_up(kPipeCapacity);
    c.down.grow_to = kDownloadPipeCapacity;
    sockaddr_in to = socket_address(slot.address, c.port);
    if (::connect(c.upstream.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) == 0)
        c.state = Conn::State::Open;
    else if (errno == EINPROGRESS)
        c.state = Conn::State::Connecting;
    else
        c.upstream.reset();
}

// Whether the client's first bytes say it wants this connection's host (sniff.hpp); closes
// the connection if not. Returns false when it is closed.
bool EgressRelay::decide(Conn& c) {
    Sniffed s = sniff(c.sniffed);
    std::string why;
    switch (s.kind) {
        case Sniffed::Kind::NeedMore:
            if (c.sniffed.size() < kMaxSniff && !c.client_eof) return true;
            why = c.client_eof ? "the client closed before saying which host it wants"
                               : "the client's first bytes are too long to read";
            break;
        case Sniffed::Kind::Opaque: c.decided = true; break;
        case Sniffed::Kind::Refused: why = s.why; break;
        case Sniffed::Kind::Tls:
        case Sniffed::Kind::Http:
            // Domain fronting: a shared front routes by SNI or Host, not by address.
            if (s.host.empty()) why = "a TLS connection without SNI";
            else if (s.host != c.name)
                why = std::string(s.kind == Sniffed::Kind::Tls ? "TLS SNI" : "HTTP Host") + " names " + s.host +
                      ", not " + c.name;
            else c.decided = true;
            break;
    }
    if (!c.decided) {
        for (std::size_t i = 0; i < conns_.size(); ++i)
            if (conns_[i].get() == &c) close_conn(i, "refused", why);
        return false;
    }
    c.head_out = s.kind == Sniffed::Kind::Http
                     ? one_request_only(c.sniffed, s) + c.sniffed.substr(s.head_size)
                     : std::move(c.sniffed);
    c.sniffed.clear();
    return true;
}

// Moves what it can one way: the sniffed head first, then through the pipe with splice.
// Returns false when the connection must end (an error, or --net-bytes).
bool EgressRelay::pump(Conn& c, bool up, double now) {
    int from = up ? c.client.get() : c.upstream.get();
    int to = up ? c.upstream.get() : c.client.get();
    Pipe& pipe = up ? c.up : c.down;
    bool& eof = up ? c.client_eof : c.upstream_eof;
    bool& shut = up ? c.up_shut : c.down_shut;
    std::uint64_t& total = up ? report_.bytes_out : report_.bytes_in;
    std::uint64_t& mine = up ? c.out : c.in;
    const std::optional<std::uint64_t>& limit = plan_.policy.bytes;
    for (int round = 0; round < 4; ++round) {
        bool moved = false;
        if (up && !c.head_out.empty()) {
            if (limit && total + c.head_out.size() > *limit) {
                c.cut = true;
                return false;
            }
            ssize_t n = ::send(to, c.head_out.data(), c.head_out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
            c.head_out.erase(0, static_cast<std::size_t>(n));
            total += static_cast<std::uint64_t>(n);
            mine += static_cast<std::uint64_t>(n);
            c.last_ms = now;
            if (!c.head_out.empty()) return true;
            moved = true;
        }
        if (pipe.fill > 0) {
            ssize_t n = ::splice(pipe.r.get(), nullptr, to, nullptr, pipe.fill, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
            if (n < 0 && errno != EAGAIN) return false;
            if (n > 0) {
                pipe.fill -= static_cast<std::size_t>(n);
                c.last_ms = now;
                moved = true;
            }
        }
        if (!eof && pipe.fill < pipe.capacity) {
            std::size_t want = pipe.capacity - pipe.fill;
            if (limit) {
                std::uint64_t left = *limit > total ? *limit - total : 0;
                if (left == 0) {
                    // Used up: if more is waiting, the connection is cut.
                    char b;
                    ssize_t p = ::recv(from, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                    if (p > 0) {
                        c.cut = true;
                        return false;
                    }
                    if (p == 0) eof = true;
                    want = 0;
                }
                want = static_cast<std::size_t>(std::min<std::uint64_t>(want, left));
            }
            if (want > 0) {
                ssize_t n = ::splice(from, nullptr, pipe.w.get(), nullptr, want, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
                if (n == 0) eof = true;
                else if (n < 0 && errno != EAGAIN) return false;
                else if (n > 0) {
                    pipe.fill += static_cast<std::size_t>(n);
                    total += static_cast<std::uint64_t>(n);
                    mine += static_cast<std::uint64_t>(n);
                    c.last_ms = now;
                    moved = true;
                }
            }
        }
        pipe.grow_when_full();  // a full pipe's worth was waiting: a download
        if (eof && pipe.fill == 0 && (!up || c.head_out.empty()) && !shut) {
            ::shutdown(to, SHUT_WR);
            shut = true;
        }
        if (!moved) break;
    }
    return true;
}

void EgressRelay::service(std::size_t i, std::uint32_t client_ev, std::uint32_t upstream_ev, double now) {
    Conn& c = *conns_[i];
    if (c.state == Conn::State::Resolving) {
        Slot& slot = *slots_[c.slot];
        if (slot.state == Slot::State::Failed) return close_conn(i, "refused", c.name + " " + slot.why);
        if (slot.state == Slot::State::Ok) {
            connect_upstream(c);
            if (!c.upstream) return close_conn(i, "refused", std::string("cannot connect: ") + std::strerror(errno));
        }
    }
    if (c.state == Conn::State::Connecting && (upstream_ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.upstream.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0)
            return close_conn(i, "refused", std::string("cannot connect to ") + dns::format_ipv4(slots_[c.slot]->address) +
                                                ": " + std::strerror(err));
        c.state = Conn::State::Open;
        upstream_ev = 0;
    }
    // The client's first bytes, until it has said which host it wants (bounded: kMaxSniff).
    if (!c.decided && !c.client_eof) {
        char buf[4096];
        std::size_t room = kMaxSniff - c.sniffed.size();
        ssize_t n = ::recv(c.client.get(), buf, std::min(room, sizeof buf), MSG_DONTWAIT);
        if (n == 0) c.client_eof = true;
        else if (n > 0) c.sniffed.append(buf, static_cast<std::size_t>(n));
        else if (errno != EAGAIN && errno != EWOULDBLOCK) c.client_eof = true;
        if (c.client_eof && c.sniffed.empty()) {
            // Gone without a byte: a port probe, or a client of a protocol where the server
            // speaks first, which got what it came for (relayed while the connection was open).
            return close_conn(i, c.state == Conn::State::Open ? "allowed" : "refused",
                              c.state == Conn::State::Open ? "" : "the client closed before saying which host it wants");
        }
        if ((n >= 0 || c.client_eof) && !decide(c)) return;
    }
    if (c.state == Conn::State::Open) {
        if ((client_ev | upstream_ev) & EPOLLERR) return close_conn(i, "allowed", "");
        if (!pump(c, false, now) || (c.decided && !pump(c, true, now)))
            return close_conn(i, c.cut ? "cut" : "allowed",
                              c.cut ? "over --net-bytes" : "");
        if (c.up_shut && c.down_shut) return close_conn(i, "allowed", "");
        // The client is gone both ways: nothing more can reach it (and a hung-up socket
        // would be reported on every turn).
        if (client_ev & EPOLLHUP) return close_conn(i, "allowed", "");
    }
    update_interest(i);
}

void EgressRelay::update_interest(std::size_t i) {
    Conn& c = *conns_[i];
    std::uint32_t ce = 0, ue = 0;
    bool open = c.state == Conn::State::Open;
    if (!c.client_eof && ((!c.decided && c.sniffed.size() < kMaxSniff) ||
                          (c.decided && open && c.up.fill < c.up.capacity && c.head_out.empty())))
        ce |= EPOLLIN;
    if (open && c.down.fill > 0) ce |= EPOLLOUT;
    if (c.state == Conn::State::Connecting) ue |= EPOLLOUT;
    if (open && !c.upstream_eof && c.down.fill < c.down.capacity) ue |= EPOLLIN;
    if (open && (!c.head_out.empty() || c.up.fill > 0)) ue |= EPOLLOUT;
    if (ce != c.client_events) {
        watch(c.client.get(), key(kClient, generations_[i], i), ce);
        c.client_events = ce;
    }
    if (c.upstream && ue != c.upstream_events) {
        watch(c.upstream.get(), key(kUpstream, generations_[i], i), ue);
        c.upstream_events = ue;
    }
}

void EgressRelay::close_conn(std::size_t i, const char* verdict, const std::string& why) {
    Conn& c = *conns_[i];
    std::string what = why;
    if (std::string_view(verdict) == "refused") ++report_.refused;
    if (c.cut) {
        report_.bytes_limit_hit = true;
        // A cut connection ends with a reset, both ways: a plain close reads as the end of the
        // stream, and a client (or server) that does not check the length it was promised
        // would take a truncated download (or upload) for a whole one.
        const linger reset{1, 0};
        for (int fd : {c.client.get(), c.upstream.get()})
            if (fd >= 0) (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    }
    report_.add({c.name.empty() ? "(unnamed)" : c.name, c.port, verdict, what, c.out, c.in, 1});
    conns_[i].reset();  // closes its descriptors, which leave the epoll set
    ++generations_[i];
    --open_conns_;
}

void EgressRelay::finish() {
    for (std::size_t i = 0; i < conns_.size(); ++i)
        if (conns_[i]) close_conn(i, conns_[i]->decided ? "allowed" : "refused", conns_[i]->decided ? "" : "the run ended");
    for (auto& s : slots_) s->sock.reset();
    listeners_.clear();
    dns_.reset();
}

}  // namespace pyjail::supervisor
