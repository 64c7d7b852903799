#include "supervise.hpp"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <ctime>

#include "sys.hpp"

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

void drain_messages(int sync_fd, Supervised& s, std::optional<int>& status, double started_ms) {
    while (true) {
        JailMessage m{};
        ssize_t n = ::recv(sync_fd, &m, sizeof m, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n != static_cast<ssize_t>(sizeof m)) return;
        m.step[sizeof m.step - 1] = '\0';
        m.text[sizeof m.text - 1] = '\0';
        switch (m.kind) {
            case MsgKind::Error:
                if (!s.error) s.error = m;
                break;
            case MsgKind::Ready: s.setup_ms = monotonic_ms() - started_ms; break;
            case MsgKind::Status: status = m.wait_status; break;
        }
    }
}

}  // namespace

Supervised supervise_from_parent(int pidfd, int sync_fd, int signal_fd, double wall_time,
                                 double started_ms) {
    Supervised s;
    std::optional<int> status;
    bool timed_out = false;
    double deadline = wall_time > 0 ? started_ms + wall_time * 1e3 : 0;

    while (true) {
        int timeout = -1;
        if (deadline > 0 && !timed_out) {
            double left = deadline - monotonic_ms();
            timeout = left <= 0 ? 0 : static_cast<int>(std::ceil(left));
        }
        pollfd fds[3] = {{pidfd, POLLIN, 0}, {sync_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
        int n = ::poll(fds, 3, timeout);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) {
            // Wall time is up: SIGKILL to pid 1 ends the whole pid namespace at once.
            timed_out = true;
            sys_pidfd_send_signal(pidfd, SIGKILL);
            continue;
        }
        if (fds[1].revents & POLLIN) drain_messages(sync_fd, s, status, started_ms);
        if (fds[2].revents & POLLIN) {
            signalfd_siginfo si{};
            if (::read(signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
                sys_pidfd_send_signal(pidfd, static_cast<int>(si.ssi_signo));
        }
        if (fds[0].revents & POLLIN) break;
    }
    drain_messages(sync_fd, s, status, started_ms);

    siginfo_t info{};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    if (timed_out) {
        s.outcome.kind = Outcome::Kind::WallTimeout;
    } else if (status) {
        s.outcome = outcome_from_wait_status(*status);
    } else {
        s.outcome.kind = Outcome::Kind::JailDied;
        if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) s.outcome.signal = info.si_status;
        else s.outcome.code = info.si_status;
    }
    return s;
}

}  // namespace pyjail
