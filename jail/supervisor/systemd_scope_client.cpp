// The side of systemd_scope.hpp that talks: a unix socket to the bus, EXTERNAL authentication,
// three calls and the wait for systemd's job, bounded by one deadline.
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <vector>

#include "error.hpp"
#include "prepare.hpp"
#include "spawn.hpp"
#include "supervise.hpp"
#include "systemd_scope.hpp"

namespace pyjail {

namespace {

// The whole exchange, connect to JobRemoved. systemd answers in milliseconds; the bound is
// for a bus that accepts and never answers, which must not hang a cron job forever.
constexpr double kDeadlineMs = 10000;

const char* kHint = "systemd-run --user --scope -p Delegate=yes pyjail ... does the same by hand; "
                    "--cgroup-manager none stops asking";

JailError bus_error(const BusChoice& bus, const std::string& what, int err = 0) {
    std::string where = bus.socket[0] == '\0' ? "@" + bus.socket.substr(1) : bus.socket;
    return JailError("systemd",
                     fmt::format("cannot get a delegated scope from {} over {} ({}): {}",
                                 bus.manager_name(), where, bus.origin, what),
                     err, kHint);
}

// One connection to a bus, with everything it receives parsed as messages.
class BusConnection {
public:
    BusConnection(const BusChoice& bus, double deadline) : bus_(bus), deadline_(deadline) {
        fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!fd_) throw bus_error(bus, "socket", errno);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (bus.socket.size() >= sizeof addr.sun_path) throw bus_error(bus, "the socket path is too long");
        std::memcpy(addr.sun_path, bus.socket.data(), bus.socket.size());
        socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + bus.socket.size() +
                                               (bus.socket[0] == '\0' ? 0 : 1));
        if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
            throw bus_error(bus, "connect", errno);
    }

    void send(const std::string& bytes) {
        for (std::size_t done = 0; done < bytes.size();) {
            wait_for(POLLOUT);
            ssize_t n = ::send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
            if (n < 0 && errno != EINTR && errno != EAGAIN) throw bus_error(bus_, "send", errno);
            if (n > 0) done += static_cast<std::size_t>(n);
        }
    }

    // One "\r\n"-terminated line of the authentication exchange.
    std::string read_line() {
        for (;;) {
            auto end = buf_.find("\r\n");
            if (end != std::string::npos) {
                std::string line = buf_.substr(0, end);
                buf_.erase(0, end + 2);
                return line;
            }
            // A server that talks without end must not grow this buffer without end.
            if (buf_.size() > 512) throw bus_error(bus_, "the authentication line is too long");
            fill();
        }
    }

    dbus::Message read_message() {
        for (;;) {
            try {
                std::size_t size = dbus::message_size(buf_);
                if (size != 0 && buf_.size() >= size) {
                    dbus::Message m = dbus::parse_message(std::string_view(buf_).substr(0, size));
                    buf_.erase(0, size);
                    return m;
                }
            } catch (const dbus::DbusError& e) {
                throw bus_error(bus_, fmt::format("malformed message from the bus: {}", e.what()));
            }
            fill();
        }
    }

private:
    void wait_for(short events) {
        for (;;) {
            double left = deadline_ - monotonic_ms();
            if (left <= 0)
                throw bus_error(bus_, fmt::format("no answer within {:.0f} s", kDeadlineMs / 1000));
            pollfd p{fd_.get(), events, 0};
            int r = ::poll(&p, 1, static_cast<int>(left) + 1);
            if (r > 0) return;
            if (r < 0 && errno != EINTR) throw bus_error(bus_, "poll", errno);
        }
    }

    void fill() {
        wait_for(POLLIN);
        char chunk[4096];
        ssize_t n = ::recv(fd_.get(), chunk, sizeof chunk, MSG_DONTWAIT);
        if (n == 0) throw bus_error(bus_, "the bus closed the connection");
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) return;
            throw bus_error(bus_, "recv", errno);
        }
        buf_.append(chunk, static_cast<std::size_t>(n));
    }

    const BusChoice& bus_;
    double deadline_;
    UniqueFd fd_;
    std::string buf_;
};

// Text a bus peer chose, fit for one line of stderr: control characters (a terminal escape, a
// newline that would forge a second message) become '?', and it is cut at `max` bytes.
std::string printable(std::string_view s, std::size_t max = 200) {
    std::string out(s.substr(0, max));
    for (char& ch : out)
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
    return out;
}

std::uint64_t random_u64() {
    std::uint64_t v = 0;
    if (::getrandom(&v, sizeof v, 0) != sizeof v) v = static_cast<std::uint64_t>(monotonic_ms() * 1000) ^ static_cast<std::uint64_t>(::getpid());
    return v;
}

}  // namespace

namespace supervisor {

JoinedScope join_systemd_scope(const BusChoice& bus) {
    const double started = monotonic_ms();
    BusConnection c(bus, started + kDeadlineMs);
    c.send(dbus::auth_request(static_cast<std::uint32_t>(::geteuid())));
    std::string answer = c.read_line();
    if (!dbus::auth_accepted(answer))
        throw bus_error(bus, fmt::format("the bus refused EXTERNAL authentication ('{}')",
                                         printable(answer, 80)));
    JoinedScope joined;
    joined.unit = systemd::scope_name(random_u64());
    // Pipelined: the bus handles one connection's messages in order, so the match is in
    // place before systemd can finish the job.
    c.send("BEGIN\r\n" + dbus::encode_call(systemd::hello_call(), 1) +
           dbus::encode_call(systemd::add_match_call(), 2) +
           dbus::encode_call(systemd::start_scope_call(joined.unit, ::getpid()), 3));
    std::string job, systemd_name;
    // Jobs that ended, kept until the reply names ours (its signal may come first); bounded,
    // since other jobs of the same manager end meanwhile.
    std::vector<systemd::JobRemoved> ended;
    for (;;) {
        dbus::Message m = c.read_message();
        if (m.type == dbus::Type::Error && m.reply_serial && *m.reply_serial <= 3) {
            std::string text = dbus::error_text(m);
            throw bus_error(bus, fmt::format("{}{}{}", printable(m.error_name),
                                             text.empty() ? "" : ": ", printable(text, 300)));
        }
        if (m.type == dbus::Type::MethodReturn && m.reply_serial == 3u) {
            if (m.signature != "o")
                throw bus_error(bus, fmt::format("StartTransientUnit returned '{}', not a job",
                                                 printable(m.signature)));
            job = dbus::Reader(m.body, m.big_endian).string();
            // The bus stamps the sender: the reply's is systemd's own unique name.
            systemd_name = m.sender;
        }
        if (auto j = systemd::parse_job_removed(m)) {
            if (ended.size() == 256) ended.erase(ended.begin());
            ended.push_back(std::move(*j));
        }
        if (job.empty()) continue;
        // Any peer may send us a signal that looks like systemd's: only systemd's own counts.
        auto ours = std::find_if(ended.begin(), ended.end(), [&](const systemd::JobRemoved& j) {
            return j.job == job && j.sender == systemd_name;
        });
        if (ours == ended.end()) continue;
        if (ours->result != "done")
            throw bus_error(bus, fmt::format("systemd's job for {} ended '{}'", joined.unit,
                                             printable(ours->result)));
        break;
    }
    joined.ms = monotonic_ms() - started;
    joined.cgroup_dir = setup::own_cgroup_dir();
    std::string tail = "/" + joined.unit;
    if (joined.cgroup_dir.size() < tail.size() ||
        joined.cgroup_dir.compare(joined.cgroup_dir.size() - tail.size(), tail.size(), tail) != 0)
        throw bus_error(bus, fmt::format("systemd reported {} started, but pyjail is in {}",
                                         joined.unit, joined.cgroup_dir));
    return joined;
}

void settle_cgroup(RunPlan& p) {
    if (!p.systemd_scope) return;
    const Limits& l = p.policy.limits;
    try {
        JoinedScope joined = join_systemd_scope(*p.systemd_scope);
        std::vector<std::string> controllers;
        if (l.memory) controllers.push_back("memory");
        if (l.pids) controllers.push_back("pids");
        if (l.cpus) controllers.push_back("cpu");
        // Named as --cgroup-parent would be: the scope is delegated because we asked so, and
        // (as root) it may be checked without systemd's xattr mark.
        CgroupSite site = setup::find_cgroup_site(controllers, joined.cgroup_dir, p.invoker.uid);
        if (!site.ok)
            throw JailError("systemd", fmt::format("systemd delegated {}, but {}", joined.unit, site.why_not),
                            0, kHint);
        if (p.policy.verbose)
            std::fprintf(stderr, "pyjail: %s delegated %s in %.1f ms\n",
                         p.systemd_scope->manager_name().c_str(), joined.unit.c_str(), joined.ms);
        p.cgroup = site;
    } catch (const JailError& e) {
        if (p.policy.cgroup_manager == CgroupManager::Systemd) throw;
        if (p.policy.cgroup == CgroupMode::Require)
            throw JailError("cgroup", "cgroup v2 is required (--cgroup require), but " +
                                          p.cgroup.why_not + "; and " + e.message(),
                            e.err(), "or run with --cgroup auto to fall back to rlimits");
        // auto: as without a systemd to ask. No bus at all is the ordinary case of a host
        // without a session bus, and says nothing new; any other failure is worth a clause.
        if (e.err() != ENOENT && e.err() != ECONNREFUSED)
            p.cgroup.why_not += fmt::format("; {}: {}{}{}", e.step(), e.message(),
                                            e.err() != 0 ? ": " : "",
                                            e.err() != 0 ? std::strerror(e.err()) : "");
        if (p.policy.verbose) std::fprintf(stderr, "pyjail: %s\n", e.one_line().c_str());
        p.limits = plan_limits(l, false);
    }
    p.systemd_scope.reset();
}

}  // namespace supervisor

}  // namespace pyjail
