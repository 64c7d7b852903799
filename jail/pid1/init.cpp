#include "init.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "protocol.hpp"

namespace pyjail::pid1 {

namespace {

// Kills every other process of the pid namespace and waits for each, so that the kernel adds
// their usage to ours. Again and again: a process may fork while kill(-1) runs. Gives up
// after kReapAllMs (a process stuck in the kernel), when the kernel's own kill takes over.
bool reap_all() {
    // Nothing left to kill when pid 1 has no child at all (ECHILD, zombies included): every
    // process of this pid namespace descends from pid 1, and an orphan becomes pid 1's child,
    // so no process of the jail can be missed. kill(-1) walks every process of the host to
    // find ours, which cost each run about 0.1 ms.
    while (true) {
        pid_t pid = ::waitpid(-1, nullptr, WNOHANG | __WALL);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0 && errno == ECHILD) return true;
        if (pid <= 0) break;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    constexpr int kRoundMs = 20;
    for (int round = 0; round * kRoundMs < kReapAllMs; ++round) {
        // -1 from pid 1: every process of our pid namespace but us.
        ::kill(-1, SIGKILL);
        while (true) {
            pid_t pid = ::waitpid(-1, nullptr, WNOHANG | __WALL);
            if (pid < 0 && errno == EINTR) continue;
            if (pid < 0 && errno == ECHILD) return true;
            if (pid <= 0) break;
        }
        timespec ts{0, kRoundMs * 1000000L};
        (void)::sigtimedwait(&chld, nullptr, &ts);
    }
    return false;
}

[[noreturn]] void reap_all_and_exit(int report_fd) {
    JailMessage m{};
    m.kind = MsgKind::Reaped;
    m.exit_code = reap_all() ? kInitReapedAll : kInitLeftSome;
    rusage ru{};
    if (::getrusage(RUSAGE_CHILDREN, &ru) == 0) {
        m.user_us = static_cast<std::int64_t>(ru.ru_utime.tv_sec) * 1000000 + ru.ru_utime.tv_usec;
        m.system_us = static_cast<std::int64_t>(ru.ru_stime.tv_sec) * 1000000 + ru.ru_stime.tv_usec;
        m.maxrss_kb = ru.ru_maxrss;
    }
    (void)::send(report_fd, &m, sizeof m, MSG_NOSIGNAL);
    ::_exit(m.exit_code);
}

// Reads the supervisor's requests that wait on the socket (none, when the signal was the
// program's own); true if one asks to reap.
bool reap_requested(int report_fd) {
    while (true) {
        SupervisorRequest r{};
        ssize_t n = ::recv(report_fd, &r, sizeof r, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n != static_cast<ssize_t>(sizeof r)) return false;
        if (r.kind == Pid1Request::ReapAll) return true;
    }
}

}  // namespace

void run_reaper(pid_t program, int report_fd) noexcept {
    // Let go of the program's stdin/stdout/stderr: a reader of the program's output must see
    // EOF when the program's processes close it, not when pid 1 does.
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2; ++fd) {
        if (devnull >= 0) ::dup2(devnull, fd);
        else ::close(fd);
    }
    if (devnull > 2) ::close(devnull);

    sigset_t set;
    sigemptyset(&set);
    for (int s : kForwardedSignals) sigaddset(&set, s);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, kRequestSignal);

    while (true) {
        siginfo_t info{};
        int sig = ::sigwaitinfo(&set, &info);
        if (sig < 0) {
            if (errno == EINTR) continue;
            ::_exit(1);
        }
        if (sig == kRequestSignal) {
            // Only the supervisor may ask, and only over the report socket (protocol.hpp says
            // why not by a signal): no program can make pid 1 exit without reporting the
            // program's status.
            if (reap_requested(report_fd)) reap_all_and_exit(report_fd);
            continue;
        }
        if (sig != SIGCHLD) {
            // Relayed by the supervisor (or sent by the program itself: harmless).
            ::kill(program, sig);
            continue;
        }
        // Reap everything that ended: orphans re-parent to us.
        while (true) {
            int status = 0;
            pid_t pid = ::waitpid(-1, &status, WNOHANG);
            if (pid <= 0) break;
            if (pid != program) continue;
            JailMessage m{};
            m.kind = MsgKind::Status;
            m.wait_status = status;
            (void)::send(report_fd, &m, sizeof m, MSG_NOSIGNAL);
            // What the program left ends with it.
            reap_all_and_exit(report_fd);
        }
    }
}

}  // namespace pyjail::pid1
