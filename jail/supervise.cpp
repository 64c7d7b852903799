#include "supervise.hpp"

#include <poll.h>
#include <seccomp.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "relay.hpp"
#include "init.hpp"
#include "sys.hpp"
#include "throttle.hpp"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace pyjail {

double monotonic_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

namespace {

// Answers the bucket must hold before a paused listener is polled again.
constexpr double kDeniedAnswersResume = 20;

class Supervisor {
public:
    Supervisor(const SuperviseArgs& a, double now)
        : a_(a), answers_(kDeniedAnswersPerSecond, kDeniedAnswersBurst, now) {}
    ~Supervisor() {
        if (req_ != nullptr) seccomp_notify_free(req_, resp_);
    }
    Supervisor(const Supervisor&) = delete;
    Supervisor& operator=(const Supervisor&) = delete;

    // Reads every waiting message. Returns false once the jail's end is closed (EOF).
    bool drain_messages() {
        while (true) {
            JailMessage m{};
            int fd = -1;
            ssize_t n = recv_with_fd(a_.sync_fd, &m, sizeof m, fd, MSG_DONTWAIT);
            UniqueFd passed(fd);
            if (n < 0 && errno == EINTR) continue;
            if (n == 0) return false;
            if (n != static_cast<ssize_t>(sizeof m)) return true;
            m.text[sizeof m.text - 1] = '\0';
            switch (m.kind) {
                case MsgKind::Error:
                    if (!result.error) result.error = m;
                    break;
                case MsgKind::Ready:
                    ready = true;
                    result.setup_ms = monotonic_ms() - a_.started_ms;
                    if (passed && !listener) listener = std::move(passed);
                    break;
                case MsgKind::Status: status = m.wait_status; break;
            }
        }
    }

    // The listener to poll, or -1 while the rate limit holds the answers back: the jail's
    // thread waits in the kernel until the bucket refills (a jail cannot buy supervisor CPU
    // with refused syscalls).
    int listener_to_poll(double now) {
        if (!listener) return -1;
        bool paused = ms_until_answers(now) > 0;
        if (paused && !paused_) ++result.denied_throttled;
        paused_ = paused;
        return paused ? -1 : listener.get();
    }

    // One refused syscall: record it, and answer with the set's error.
    void answer_notification(double now) {
        if (!answers_.take(now)) return;
        if (req_ == nullptr && seccomp_notify_alloc(&req_, &resp_) != 0) {
            listener.reset();
            return;
        }
        std::memset(req_, 0, sizeof *req_);
        if (seccomp_notify_receive(listener.get(), req_) != 0) return;  // the caller died
        std::uint64_t args[6];
        for (int i = 0; i < 6; ++i) args[i] = req_->data.args[i];
        result.denied.add(describe_syscall(req_->data.nr, args));
        resp_->id = req_->id;
        resp_->val = 0;
        resp_->flags = 0;
        resp_->error = -(a_.seccomp != nullptr ? seccomp_errno_for(*a_.seccomp, req_->data.nr) : EPERM);
        (void)seccomp_notify_respond(listener.get(), resp_);
    }

    // A signal pyjail got: to the program (through pid 1). The first that asks to end starts
    // --kill-grace: a jail that ignores it must not keep pyjail until its wall time.
    void relay_signal(int sig, double now) {
        sys_pidfd_send_signal(a_.pidfd, sig);
        if (!is_terminating_signal(sig) || result.relayed_signal != 0) return;
        result.relayed_signal = sig;
        grace_ends_ms_ = now + a_.kill_grace * 1e3;
    }

    // Ends the whole jail (once).
    void kill_jail(double now) {
        if (killed) return;
        killed = true;
        if (a_.kill_all || !ready) {
            // SIGKILL to pid 1 ends the whole pid namespace at once; cgroup.kill ends
            // whatever might be outside it. (Before "ready", pid 1 cannot take requests.)
            sys_pidfd_send_signal(a_.pidfd, SIGKILL);
            if (a_.kill_all) a_.kill_all();
            return;
        }
        // No cgroup counts the jail's usage: pid 1 kills and waits for every process, so
        // that the kernel accounts them, and gets SIGKILL if it has not done so in time.
        sys_pidfd_send_signal(a_.pidfd, reap_request_signal());
        sigkill_pid1_ms_ = now + kReapAllMs + 500;
    }

    // Whatever is due: the end of the grace after a terminating signal (unless the program
    // already ended), and the SIGKILL to a pid 1 that did not finish waiting.
    void on_timers(double now) {
        if (!killed && grace_ends_ms_ > 0 && now >= grace_ends_ms_ && !status) {
            grace_expired = true;
            kill_jail(now);
        }
        if (sigkill_pid1_ms_ > 0 && now >= sigkill_pid1_ms_) {
            sigkill_pid1_ms_ = 0;
            sys_pidfd_send_signal(a_.pidfd, SIGKILL);
        }
    }

    // `timeout` (ms, -1: none) shortened to the next of our own timers.
    int bound_timeout(int timeout, double now) const {
        auto until = [&](double ms) {
            int left = ms <= now ? 0 : static_cast<int>(std::ceil(ms - now));
            if (timeout < 0 || left < timeout) timeout = left;
        };
        if (!killed && grace_ends_ms_ > 0 && !status) until(grace_ends_ms_);
        if (sigkill_pid1_ms_ > 0) until(sigkill_pid1_ms_);
        if (listener && ms_until_answers(now) > 0) until(now + ms_until_answers(now));
        return timeout;
    }

    Supervised result;
    bool ready = false;
    bool killed = false;
    bool grace_expired = false;  // the kill was --kill-grace's
    std::optional<int> status;
    UniqueFd listener;

private:
    // Until the listener may be polled: the bucket is empty, or was and does not hold
    // kDeniedAnswersResume yet (not one answer per wake-up: each pause costs one).
    double ms_until_answers(double now) const {
        return answers_.ms_until(now, paused_ ? kDeniedAnswersResume : 1);
    }

    const SuperviseArgs& a_;
    TokenBucket answers_;
    bool paused_ = false;
    double grace_ends_ms_ = 0;     // 0: no terminating signal relayed
    double sigkill_pid1_ms_ = 0;   // 0: none pending
    seccomp_notif* req_ = nullptr;
    seccomp_notif_resp* resp_ = nullptr;
};

}  // namespace

Supervised supervise_from_parent(const SuperviseArgs& a) {
    Supervisor sv(a, monotonic_ms());
    bool timed_out = false;
    const bool& killed = sv.killed;
    double deadline = a.wall_time > 0 ? a.started_ms + a.wall_time * 1e3 : 0;
    int sync_fd = a.sync_fd;  // -1 once the jail's end is closed
    bool over_cpu = false;
    auto kill_jail = [&] { sv.kill_jail(monotonic_ms()); };

    while (true) {
        int timeout = -1;
        double now = monotonic_ms();
        if (deadline > 0 && !killed) {
            double left = deadline - now;
            timeout = left <= 0 ? 0 : static_cast<int>(std::ceil(left));
        }
        // --cpu-time is checked ten times a second: the jail can overrun it by that much.
        if (a.cpu_time > 0 && a.cpu_usage && !killed && (timeout < 0 || timeout > 100)) timeout = 100;
        timeout = sv.bound_timeout(timeout, now);
        constexpr nfds_t kOwn = 4;  // the relay's descriptors follow these
        pollfd fds[kOwn + StdioRelay::kPollSlots] = {{a.pidfd, POLLIN, 0},
                                                     {sync_fd, POLLIN, 0},
                                                     {a.signal_fd, POLLIN, 0},
                                                     {sv.listener_to_poll(now), POLLIN, 0}};
        if (a.relay) a.relay->fill_pollfds(fds + kOwn);
        int n = ::poll(fds, a.relay ? kOwn + StdioRelay::kPollSlots : kOwn, timeout);
        if (n < 0 && errno == EINTR) continue;
        if (deadline > 0 && !killed && monotonic_ms() >= deadline) {
            timed_out = true;
            kill_jail();
        }
        if (a.cpu_time > 0 && a.cpu_usage && !killed) {
            auto used = a.cpu_usage();
            if (used && *used >= a.cpu_time) {
                over_cpu = true;
                kill_jail();
            }
        }
        sv.on_timers(monotonic_ms());
        if (n <= 0) continue;
        // After "ready" (which brings the filter's listener, needed at once) the jail only
        // says how the program ended, and then its pid 1 exits: those messages are read when
        // the pidfd says so, which saves waking up for them. Once the jail's end is closed,
        // polling the socket would spin, taking a CPU from the kernel while it tears the
        // jail's namespaces down.
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0 &&
            (!sv.drain_messages() || sv.ready))
            sync_fd = -1;
        if (fds[2].revents & POLLIN) {
            signalfd_siginfo si{};
            if (::read(a.signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
                sv.relay_signal(static_cast<int>(si.ssi_signo), monotonic_ms());
        }
        if (fds[3].revents & POLLIN) sv.answer_notification(monotonic_ms());
        else if (fds[3].revents & (POLLHUP | POLLERR | POLLNVAL)) sv.listener.reset();
        if (a.relay) {
            a.relay->handle(fds + kOwn);
            if (a.relay->over_limit() && !killed) kill_jail();
        }
        if (fds[0].revents & POLLIN) break;
    }
    sv.drain_messages();

    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(a.pidfd), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    Supervised s = std::move(sv.result);
    s.wall_s = (monotonic_ms() - a.started_ms) / 1e3;
    s.cpu_timeout = over_cpu;
    s.output_limit = a.relay != nullptr && a.relay->over_limit();
    s.pid1_exited = info.si_code == CLD_EXITED;
    s.pid1_code = info.si_status;
    if (timed_out) {
        s.outcome.kind = Outcome::Kind::WallTimeout;
    } else if (sv.grace_expired) {
        s.outcome.kind = Outcome::Kind::GraceTimeout;
        s.outcome.signal = s.relayed_signal;
    } else if (sv.status) {
        s.outcome = outcome_from_wait_status(*sv.status);
    } else {
        s.outcome.kind = Outcome::Kind::JailDied;
        if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) s.outcome.signal = info.si_status;
        else s.outcome.code = info.si_status;
    }
    return s;
}

}  // namespace pyjail
