#include "network_maker.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "protocol.hpp"
#include "sys.hpp"

namespace pyjail {

namespace network_maker {

namespace {

struct Job {
    int jail_pidfd;
    int sync_fd;
    volatile bool sent;  // set by the helper: the supervisor sends the failure otherwise
};

// The helper, on a stack of its own in the supervisor's memory while the supervisor waits
// (vfork). Only syscalls: it shares the supervisor's thread-local errno, which the waiting
// supervisor sets again before reading it.
int make_and_send(void* arg) {
    auto& job = *static_cast<Job*>(arg);
    NetworkHandoff h{0};
    int net = -1;
    // In the jail's user namespace (setns with a pidfd enters the one pid 1 is in: Linux 5.8),
    // so that the namespace is the jail's: pid 1 holds CAP_NET_ADMIN over it to bring `lo`
    // up, and the program never does.
    if (::setns(job.jail_pidfd, CLONE_NEWUSER) != 0 || ::unshare(CLONE_NEWNET) != 0 ||
        (net = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
        h.err = errno != 0 ? errno : EINVAL;
    // pid 1 reads one message before its lock-down: the socket's buffer is empty, so this
    // does not wait; MSG_DONTWAIT still holds if it ever were not.
    if (send_with_fds(job.sync_fd, &h, sizeof h, &net, net >= 0 ? 1 : 0, MSG_DONTWAIT) == 0) job.sent = true;
    ::_exit(0);
}

}  // namespace

}  // namespace network_maker

namespace supervisor {

void send_jail_network(int jail_pidfd, int sync_fd) noexcept {
    static char stack[32 * 1024] alignas(16);
    network_maker::Job job{jail_pidfd, sync_fd, false};
    const int saved_errno = errno;
    pid_t helper = ::clone(network_maker::make_and_send, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &job);
    if (helper > 0) {
        // It has exited (vfork returns then): reaped now, no zombie waits out the run. Without
        // a cgroup, its CPU time (making the jail's namespace) is counted with the jail's, as
        // all of the jail's set-up in pid 1 is.
        while (::waitpid(helper, nullptr, __WALL) < 0 && errno == EINTR) {
        }
    }
    if (!job.sent) {
        // No helper, or it died before sending: pid 1 must not wait for it.
        NetworkHandoff h{helper < 0 ? errno : ECHILD};
        (void)send_with_fds(sync_fd, &h, sizeof h, nullptr, 0, MSG_DONTWAIT);
    }
    errno = saved_errno;
}

}  // namespace supervisor

}  // namespace pyjail
