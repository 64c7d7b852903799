// When the supervisor's loop ends a run: a fresh jail's when its pid 1 is gone; a run from a
// template's once its pid 1 says it reaped every process of the jail (supervise.hpp,
// ends_when_reaped), unless pid 1 says it left some. The test plays pid 1's messages on the
// sync socket; a process that is not our child (as a template's run is not its client's)
// stands in for pid 1, so that the pidfd says when "pid 1" is gone.
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "init.hpp"
#include "protocol.hpp"
#include "supervise.hpp"
#include "sys.hpp"

using namespace pyjail;

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace {

// A process that is not our child (its parent exits at once: it is re-parented away from us),
// which lives `ms` milliseconds (0: until killed). Returns its pidfd.
UniqueFd stand_in_for_pid1(int ms) {
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    pid_t middle = ::fork();
    REQUIRE(middle >= 0);
    if (middle == 0) {
        pid_t grandchild = ::fork();
        if (grandchild == 0) {
            ::close(pipefd[0]);
            ::close(pipefd[1]);
            if (ms == 0) {
                while (true) ::pause();
            }
            ::usleep(static_cast<useconds_t>(ms) * 1000);
            ::_exit(0);
        }
        (void)!::write(pipefd[1], &grandchild, sizeof grandchild);
        ::_exit(0);
    }
    ::close(pipefd[1]);
    pid_t pid = 0;
    REQUIRE(::read(pipefd[0], &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid));
    ::close(pipefd[0]);
    ::waitpid(middle, nullptr, 0);
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    REQUIRE(pidfd);
    // Not ours to wait for (were this process a child subreaper, it would be).
    siginfo_t info{};
    REQUIRE(::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd.get()), &info, WEXITED | WNOHANG) != 0);
    REQUIRE(errno == ECHILD);
    return pidfd;
}

bool gone(int pidfd) {
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

void say(int fd, MsgKind kind, int exit_code = 0) {
    JailMessage m{};
    m.kind = kind;
    m.exit_code = exit_code;
    REQUIRE(::send(fd, &m, sizeof m, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m));
}

// pid 1's messages of a run that went well, up to its last: Reaped with `reaped`.
Supervised supervise_with(int pidfd, bool ends_when_reaped, int reaped) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    UniqueFd ours(sv[0]), theirs(sv[1]);
    say(theirs.get(), MsgKind::Ready);
    say(theirs.get(), MsgKind::Status);
    say(theirs.get(), MsgKind::Reaped, reaped);
    SuperviseArgs a;
    a.pidfd = pidfd;
    a.sync_fd = ours.get();
    a.started_ms = monotonic_ms();
    a.ends_when_reaped = ends_when_reaped;
    a.wall_time = 30;  // a backstop: the test fails rather than hangs
    return supervisor::supervise(a);
}

}  // namespace

TEST_CASE("supervise: a run from a template is over when pid 1 has reaped every process, before pid 1 is gone") {
    UniqueFd pid1 = stand_in_for_pid1(0);
    Supervised s = supervise_with(pid1.get(), true, kInitReapedAll);
    CHECK_FALSE(gone(pid1.get()));  // its own exit is not the run's to wait for
    REQUIRE(s.reaped);
    CHECK(s.pid1_exited);
    CHECK(s.pid1_code == kInitReapedAll);
    CHECK(s.end.outcome.kind == Outcome::Kind::Exited);
    CHECK(s.end.outcome.code == 0);
    sys_pidfd_send_signal(pid1.get(), SIGKILL);
}

TEST_CASE("supervise: pid 1 that left a process behind ends the run only when it is gone") {
    // A process stuck in the kernel outlives pid 1's waiting: the kernel makes pid 1's exit
    // wait for it, and so does the run.
    UniqueFd pid1 = stand_in_for_pid1(200);
    Supervised s = supervise_with(pid1.get(), true, kInitLeftSome);
    CHECK(gone(pid1.get()));
    REQUIRE(s.reaped);
    CHECK(s.pid1_code == kInitLeftSome);
}

TEST_CASE("supervise: a fresh jail's run ends when its pid 1 is gone, whatever pid 1 said") {
    UniqueFd pid1 = stand_in_for_pid1(200);
    Supervised s = supervise_with(pid1.get(), false, kInitReapedAll);
    CHECK(gone(pid1.get()));
}

#include "interrupts.hpp"

TEST_CASE("Ctrl-C three times within two seconds escalates; slower ones do not") {
    using supervisor::InterruptEscalation;
    using Step = InterruptEscalation::Step;
    InterruptEscalation e;
    CHECK(e.on_interrupt(0) == Step::Relay);
    CHECK(e.on_interrupt(1500) == Step::Warn);
    CHECK(e.on_interrupt(2100) == Step::Warn);       // 0 is out of the window: 1500, 2100
    CHECK(e.on_interrupt(3400) == Step::Escalate);   // 1500, 2100, 3400
    InterruptEscalation slow;
    for (int i = 0; i < 10; ++i) CHECK(slow.on_interrupt(i * 2100.0) == Step::Relay);
}
