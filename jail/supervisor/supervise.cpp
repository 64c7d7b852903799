#include "supervise.hpp"

#include <poll.h>
#include <seccomp.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "egress_relay.hpp"
#include "interrupts.hpp"
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

namespace supervisor {

namespace {

// Answers the bucket must hold before a paused listener is polled again.
constexpr double kDeniedAnswersResume = 20;

// One jail's supervision: the loop and all of its state.
class Supervisor {
public:
    Supervisor(const SuperviseArgs& a, double now)
        : a_(a),
          answers_(kDeniedAnswersPerSecond, kDeniedAnswersBurst, now),
          deadline_ms_(a.wall_time > 0 ? a.started_ms + a.wall_time * 1e3 : 0),
          sync_fd_(a.sync_fd) {}
    ~Supervisor() {
        if (req_ != nullptr) seccomp_notify_free(req_, resp_);
    }
    Supervisor(const Supervisor&) = delete;
    Supervisor& operator=(const Supervisor&) = delete;

    // Until pid 1 is gone; reaps it.
    Supervised run() {
        while (true) {
            double now = monotonic_ms();
            constexpr nfds_t kOwn = 5;  // the relay's descriptors follow these
            pollfd fds[kOwn + StdioRelay::kPollSlots] = {{a_.pidfd, POLLIN, 0},
                                                         {sync_fd_, POLLIN, 0},
                                                         {a_.signal_fd, POLLIN, 0},
                                                         {listener_to_poll(now), POLLIN, 0},
                                                         {a_.egress ? a_.egress->poll_fd() : -1, POLLIN, 0}};
            if (a_.relay) a_.relay->fill_pollfds(fds + kOwn);
            int n = ::poll(fds, a_.relay ? kOwn + StdioRelay::kPollSlots : kOwn, poll_timeout(now));
            if (n < 0 && errno == EINTR) continue;
            check_limits();
            on_timers(monotonic_ms());
            if (n <= 0) {
                if (a_.egress) a_.egress->handle(monotonic_ms());  // its timers
                continue;
            }
            // After "ready" (which brings the filter's listener, needed at once) the jail only
            // says how the program ended, and then its pid 1 exits: those messages are read
            // when the pidfd says so, which saves waking up for them -- unless the run ends
            // with them (ends_when_reaped). Once the jail's end is closed, polling the socket
            // would spin, taking a CPU from the kernel while it tears the jail's namespaces
            // down.
            if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0 &&
                (!drain_messages() || (ready_ && !a_.ends_when_reaped)))
                sync_fd_ = -1;
            if (fds[2].revents & POLLIN) {
                signalfd_siginfo si{};
                if (::read(a_.signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
                    relay_signal(static_cast<int>(si.ssi_signo), monotonic_ms());
            }
            if (a_.egress) a_.egress->handle(monotonic_ms());
            if (fds[3].revents & POLLIN) answer_notification(monotonic_ms());
            else if (fds[3].revents & (POLLHUP | POLLERR | POLLNVAL)) listener_.reset();
            if (a_.relay) {
                a_.relay->handle(fds + kOwn);
                if (a_.relay->over_limit() && !killed_) kill_jail(monotonic_ms());
            }
            if (fds[0].revents & POLLIN) break;
            // Every process of the jail is gone (pid 1 waited for each): only pid 1's own
            // exit is left, and with it the teardown of the run's namespaces, which is not
            // the run's to wait for. Not when pid 1 left some (a process stuck in the
            // kernel): then its exit, which the kernel makes wait for them, ends the run.
            if (a_.ends_when_reaped && result_.reaped && result_.reaped->exit_code == kInitReapedAll) break;
        }
        drain_messages();
        return reap();
    }

private:
    // Until the wall-time deadline, the next --cpu-time check, or our own next timer.
    int poll_timeout(double now) const {
        int timeout = -1;
        if (deadline_ms_ > 0 && !killed_) {
            double left = deadline_ms_ - now;
            timeout = left <= 0 ? 0 : static_cast<int>(std::ceil(left));
        }
        // --cpu-time is checked ten times a second: the jail can overrun it by that much.
        if (watches_cpu() && !killed_ && (timeout < 0 || timeout > 100)) timeout = 100;
        return bound_timeout(timeout, now);
    }

    bool watches_cpu() const { return a_.cpu_time > 0 && a_.cpu_usage; }

    // --wall-time and --cpu-time: the jail is killed when either is used up.
    void check_limits() {
        if (killed_) return;
        if (deadline_ms_ > 0 && monotonic_ms() >= deadline_ms_) {
            timed_out_ = true;
            kill_jail(monotonic_ms());
            return;
        }
        if (watches_cpu()) {
            auto used = a_.cpu_usage();
            if (used && *used >= a_.cpu_time) {
                result_.end.cpu_timeout = true;
                kill_jail(monotonic_ms());
            }
        }
    }

    // Reads every waiting message. Returns false once the jail's end is closed (EOF).
    bool drain_messages() {
        while (true) {
            JailMessage m{};
            int fds[kMaxPassedFds];
            int got = 0;
            ssize_t n = recv_with_fds(a_.sync_fd, &m, sizeof m, fds, kMaxPassedFds, got, MSG_DONTWAIT);
            std::array<UniqueFd, kMaxPassedFds> held;
            for (int i = 0; i < got; ++i) held[static_cast<std::size_t>(i)].reset(fds[i]);
            UniqueFd& passed = held[0];
            if (n < 0 && errno == EINTR) continue;
            if (n == 0) return false;
            if (n != static_cast<ssize_t>(sizeof m)) return true;
            m.text[sizeof m.text - 1] = '\0';
            switch (m.kind) {
                case MsgKind::Error:
                    if (!result_.error) result_.error = m;
                    break;
                case MsgKind::Egress:
                    // Only before "ready": from then on pid 1 has nothing to hand over.
                    // Each at its own index: a message cannot name one twice (adopt refuses a
                    // socket that is not the plan's, or an index already filled).
                    if (a_.egress && !ready_)
                        for (int i = 0; i < got; ++i)
                            a_.egress->adopt(static_cast<std::int64_t>(m.exit_code) + i,
                                             std::move(held[static_cast<std::size_t>(i)]));
                    break;
                case MsgKind::Ready:
                    // Fail closed: a jail whose egress sockets did not all arrive would run with
                    // listeners nobody serves.
                    if (a_.egress && !a_.egress->complete() && !result_.error) {
                        JailMessage e{};
                        e.kind = MsgKind::Error;
                        e.step = ChildStep::Network;
                        e.exit_code = kExitJailError;
                        std::snprintf(e.text, sizeof e.text, "egress: pid 1 did not hand over every socket");
                        result_.error = e;
                        kill_jail(monotonic_ms());
                    }
                    ready_ = true;
                    result_.end.setup_ms = monotonic_ms() - a_.started_ms;
                    if (passed && !listener_) listener_ = std::move(passed);
                    break;
                case MsgKind::Status: status_ = m.wait_status; break;
                case MsgKind::Reaped: result_.reaped = m; break;
            }
        }
    }

    // The listener to poll, or -1 while the rate limit holds the answers back: the jail's
    // thread waits in the kernel until the bucket refills (a jail cannot buy supervisor CPU
    // with refused syscalls).
    int listener_to_poll(double now) {
        if (!listener_) return -1;
        bool paused = ms_until_answers(now) > 0;
        if (paused && !paused_) ++result_.end.denied_throttled;
        paused_ = paused;
        return paused ? -1 : listener_.get();
    }

    // One refused syscall: record it, and answer with the set's error.
    void answer_notification(double now) {
        if (!answers_.take(now)) return;
        if (req_ == nullptr && seccomp_notify_alloc(&req_, &resp_) != 0) {
            listener_.reset();
            return;
        }
        std::memset(req_, 0, sizeof *req_);
        if (seccomp_notify_receive(listener_.get(), req_) != 0) return;  // the caller died
        std::uint64_t args[6];
        for (int i = 0; i < 6; ++i) args[i] = req_->data.args[i];
        result_.end.denied.add(describe_syscall(req_->data.nr, args));
        resp_->id = req_->id;
        resp_->val = 0;
        resp_->flags = 0;
        resp_->error = -(a_.seccomp != nullptr ? seccomp_errno_for(*a_.seccomp, req_->data.nr) : EPERM);
        (void)seccomp_notify_respond(listener_.get(), resp_);
    }

    // A signal pyjail got: to the program (through pid 1). The first that asks to end starts
    // --kill-grace: a jail that ignores it must not keep pyjail until its wall time.
    void relay_signal(int sig, double now) {
        if (sig == SIGINT && a_.interactive) sig = escalate_interrupt(now);
        sys_pidfd_send_signal(a_.pidfd, sig);
        if (!is_terminating_signal(sig) || result_.end.relayed_signal != 0) return;
        result_.end.relayed_signal = sig;
        grace_ends_ms_ = now + a_.kill_grace * 1e3;
    }

    // Ctrl-C at a terminal: SIGINT, or SIGTERM for the third within two seconds.
    int escalate_interrupt(double now) {
        switch (interrupts_.on_interrupt(now)) {
            case InterruptEscalation::Step::Relay: return SIGINT;
            case InterruptEscalation::Step::Warn:
                if (!a_.quiet && result_.end.relayed_signal == 0)
                    std::fprintf(stderr, "pyjail: Ctrl-C once more within 2 s ends the jail\n");
                return SIGINT;
            case InterruptEscalation::Step::Escalate:
                if (!a_.quiet && result_.end.relayed_signal == 0)
                    std::fprintf(stderr, "pyjail: three interrupts: the jail is sent SIGTERM, and killed "
                                         "if it still runs %gs from now (--kill-grace)\n", a_.kill_grace);
                return SIGTERM;
        }
        return SIGINT;
    }

    // Ends the whole jail (once).
    void kill_jail(double now) {
        if (killed_) return;
        killed_ = true;
        if (a_.kill_all || !ready_) {
            // SIGKILL to pid 1 ends the whole pid namespace at once; cgroup.kill ends
            // whatever might be outside it. (Before "ready", pid 1 cannot take requests.)
            sys_pidfd_send_signal(a_.pidfd, SIGKILL);
            if (a_.kill_all) a_.kill_all();
            return;
        }
        // No cgroup counts the jail's usage: pid 1 kills and waits for every process, so
        // that the kernel accounts them, and gets SIGKILL if it has not done so in time. The
        // request goes over the socket only we hold, never as a signal (protocol.hpp).
        const SupervisorRequest reap{Pid1Request::ReapAll};
        if (::send(a_.sync_fd, &reap, sizeof reap, MSG_DONTWAIT | MSG_NOSIGNAL) !=
            static_cast<ssize_t>(sizeof reap)) {
            sys_pidfd_send_signal(a_.pidfd, SIGKILL);
            return;
        }
        sigkill_pid1_ms_ = now + kReapAllMs + 500;
    }

    // Whatever is due: the end of the grace after a terminating signal (unless the program
    // already ended), and the SIGKILL to a pid 1 that did not finish waiting.
    void on_timers(double now) {
        if (!killed_ && grace_ends_ms_ > 0 && now >= grace_ends_ms_ && !status_) {
            grace_expired_ = true;
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
        if (!killed_ && grace_ends_ms_ > 0 && !status_) until(grace_ends_ms_);
        if (sigkill_pid1_ms_ > 0) until(sigkill_pid1_ms_);
        if (listener_ && ms_until_answers(now) > 0) until(now + ms_until_answers(now));
        if (a_.egress) {
            int t = a_.egress->timeout_ms(now);
            if (t >= 0) until(now + t);
        }
        return timeout;
    }

    // Until the listener may be polled: the bucket is empty, or was and does not hold
    // kDeniedAnswersResume yet (not one answer per wake-up: each pause costs one).
    double ms_until_answers(double now) const {
        return answers_.ms_until(now, paused_ ? kDeniedAnswersResume : 1);
    }

    // pid 1 is gone: reap it, and say how the run ended.
    Supervised reap() {
        siginfo_t info{};
        int waited;
        while ((waited = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(a_.pidfd), &info,
                                  WEXITED)) != 0 &&
               errno == EINTR) {
        }
        // Not our child (a run from a template, whose pid 1 the template reaps): pid 1 said
        // how it ended before it exited, or it was killed.
        if (waited != 0 && errno == ECHILD) {
            drain_messages();
            info.si_code = result_.reaped ? CLD_EXITED : CLD_KILLED;
            info.si_status = result_.reaped ? result_.reaped->exit_code : SIGKILL;
        }
        Supervised s = std::move(result_);
        JailEnd& e = s.end;
        e.wall_s = (monotonic_ms() - a_.started_ms) / 1e3;
        e.output_limit = a_.relay != nullptr && a_.relay->over_limit();
        s.pid1_exited = info.si_code == CLD_EXITED;
        s.pid1_code = info.si_status;
        if (timed_out_) {
            e.outcome.kind = Outcome::Kind::WallTimeout;
        } else if (grace_expired_) {
            e.outcome.kind = Outcome::Kind::GraceTimeout;
            e.outcome.signal = e.relayed_signal;
        } else if (status_) {
            e.outcome = outcome_from_wait_status(*status_);
        } else {
            e.outcome.kind = Outcome::Kind::JailDied;
            if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) e.outcome.signal = info.si_status;
            else e.outcome.code = info.si_status;
        }
        return s;
    }

    const SuperviseArgs& a_;
    TokenBucket answers_;
    const double deadline_ms_;     // --wall-time's end (0: none)
    int sync_fd_;                  // -1 once the jail's end is closed
    Supervised result_;
    bool ready_ = false;
    bool killed_ = false;
    bool timed_out_ = false;       // the kill was --wall-time's
    bool grace_expired_ = false;   // the kill was --kill-grace's
    std::optional<int> status_;    // the program's wait status, once reported
    UniqueFd listener_;            // the filter's, from the "ready" message
    bool paused_ = false;
    double grace_ends_ms_ = 0;     // 0: no terminating signal relayed
    InterruptEscalation interrupts_;
    double sigkill_pid1_ms_ = 0;   // 0: none pending
    seccomp_notif* req_ = nullptr;
    seccomp_notif_resp* resp_ = nullptr;
};

}  // namespace

Supervised supervise(const SuperviseArgs& a) { return Supervisor(a, monotonic_ms()).run(); }

}  // namespace supervisor

}  // namespace pyjail
