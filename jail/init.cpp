#include "init.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "protocol.hpp"

namespace pyjail {

void run_init_in_child(pid_t program, int report_fd) noexcept {
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

    while (true) {
        siginfo_t info{};
        int sig = ::sigwaitinfo(&set, &info);
        if (sig < 0) {
            if (errno == EINTR) continue;
            ::_exit(1);
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
            // Our exit ends the pid namespace: the kernel kills whatever the program left.
            ::_exit(0);
        }
    }
}

}  // namespace pyjail
