// A fresh jail's pid 1: its steps, in order (the mount plan and the lock-down, shared with a run
// from a template, are in steps.cpp). Each step
// either succeeds or reports {step, errno, message} to the supervisor and exits; the order
// matters for security and is explained step by step.
#include "child.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "exitstatus.hpp"
#include "init.hpp"
#include "protocol.hpp"
#include "steps.hpp"
#include "sys.hpp"

extern char** environ;

namespace pyjail {

namespace pid1 {

namespace {

// The parent-death signal: if the supervisor dies (even by SIGKILL), so does the jail -- pid 1
// dying takes every process of the pid namespace with it. Credential changes clear it, so
// it is set again after them; the POLLHUP check closes the race with a parent that died
// before the prctl.
void die_with_parent() {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(ChildStep::Pdeathsig, errno, kExitJailError, "prctl");
    pollfd p{report_fd(), 0, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)) != 0) ::_exit(kExitJailError);
}

void wait_for_parent(const ChildPlan& p) {
    // Until the id maps are written we are nobody here. An unprivileged invoker's maps name
    // only its own ids, which the kernel lets the new namespace's first process write itself:
    // no round trip to the parent.
    if (!p.own_uid_map.empty()) {
        const char* failed = "";
        if (int e = write_id_maps("/proc/self/", p.own_uid_map, p.own_gid_map, failed); e != 0)
            fail(ChildStep::IdMaps, e, kExitJailError, "cannot write %s", failed);
        return;
    }
    // Root maps another user, which only the parent (with CAP_SETUID on the host) may write;
    // the byte says the maps are in.
    char go = 0;
    ssize_t n;
    do n = ::read(report_fd(), &go, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1) ::_exit(kExitJailError);  // the supervisor is gone: nothing to report to
}

void scrub_host_memory(const ChildPlan& p) {
    // This process is a copy of the supervisor. Its environment strings are the host's, and
    // its command line may hold --env values: wipe both, so nothing of them is left in pid 1's
    // memory or in /proc/1/cmdline, which the program can read.
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) ::explicit_bzero(*e, std::strlen(*e));
    for (char** a = p.host_argv; a != nullptr && *a != nullptr; ++a) ::explicit_bzero(*a, std::strlen(*a));
}

void become_jail_user(const ChildPlan& p) {
    // From here on the jail acts on files as the mapped jail user (an id of its own, the
    // invoking user, or --host-user; hostid.hpp). The capabilities we hold are those of the new user namespace only.
    // Attack: a jail of its own host id reading the invoking user's group-readable files
    // through the user's supplementary groups.
    if (p.drop_groups && ::setgroups(0, nullptr) != 0)
        fail(ChildStep::SetIds, errno, kExitJailError, "setgroups(0)");
    if (::setresgid(p.jail_gid, p.jail_gid, p.jail_gid) != 0)
        fail(ChildStep::SetIds, errno, kExitJailError, "setresgid(%u)", p.jail_gid);
    if (::setresuid(p.jail_uid, p.jail_uid, p.jail_uid) != 0)
        fail(ChildStep::SetIds, errno, kExitJailError, "setresuid(%u)", p.jail_uid);
    die_with_parent();
    // Not dumpable: the program (same uid) can neither ptrace pid 1 nor read its /proc files,
    // which hold a copy of the supervisor's memory.
    if (::prctl(PR_SET_DUMPABLE, 0) != 0) fail(ChildStep::Dumpable, errno, kExitJailError, "prctl");
}

void set_userns_limits(const ChildPlan& p) {
    // Counts of the jail's own user namespace (inotify instances and watches, namespaces):
    // writable by whoever holds CAP_SYS_RESOURCE in it, which we do until the capabilities
    // are dropped; the program never can. /proc/sys/user shows the writer's own user
    // namespace's values, whichever procfs the path goes through (still the host's here).
    // A required counter that cannot be set fails the run: its limit would silently not hold.
    // Each file is opened below the one directory, not looked up from / every time.
    if (p.userns_limits.empty()) return;
    int dir = ::open("/proc/sys/user", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) fail(ChildStep::UsernsLimits, errno, kExitJailError, "cannot open /proc/sys/user");
    char value[32];
    for (const auto& l : p.userns_limits) {
        int fd = ::openat(dir, l.name, O_WRONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && !l.required) continue;
        if (fd < 0) fail(ChildStep::UsernsLimits, errno, kExitJailError, "cannot open /proc/sys/user/%s", l.name);
        // By hand, not snprintf: its first call here faulted in stdio's pages (about 0.05 ms).
        char* end = value + sizeof value;
        char* at = end;
        *--at = '\n';
        std::uint64_t v = l.value;
        do *--at = static_cast<char>('0' + v % 10);
        while ((v /= 10) != 0);
        const auto n = static_cast<ssize_t>(end - at);
        if (::write(fd, at, static_cast<std::size_t>(n)) != n)
            fail(ChildStep::UsernsLimits, errno, kExitJailError, "cannot set /proc/sys/user/%s to %llu", l.name,
                 static_cast<unsigned long long>(l.value));
        ::close(fd);
    }
    ::close(dir);
}

void enter_handed_network() {
    // The jail's network namespace: the one the supervisor made while we built the mount tree
    // (network_maker.hpp), or, if it could not, one of our own. Either way a new namespace
    // owned by the jail's user namespace, entered before the lock-down brings `lo` up and
    // before anything of the program runs: until here pid 1 was in the host's namespace, where
    // it holds no capability and opens no socket.
    NetworkHandoff h{};
    int net = -1;
    ssize_t n;
    do n = recv_with_fd(report_fd(), &h, sizeof h, net, 0);
    while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof h)) {
        if (net >= 0) ::close(net);
        ::_exit(kExitJailError);  // the supervisor is gone: nothing to report to
    }
    enter_network(h.err == 0 ? net : -1, ChildStep::Network);
    if (net >= 0) ::close(net);
}

}  // namespace

}  // namespace pid1

// pid 2, between clone and execve: it shares pid 1's memory (CLONE_VM) until the exec.
namespace program {

namespace {

[[noreturn]] void exec(const ChildPlan& p) {
    // Start the program with default signal dispositions and nothing blocked.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
        if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(p.exec_path.c_str(), p.argv.data(), p.envp.data());
    int e = errno;
    int code = (e == ENOENT || e == ENOTDIR) ? kExitNotFound : kExitCannotExecute;
    pid1::fail(ChildStep::Exec, e, code, "cannot execute %s", p.exec_path.c_str());
}

}  // namespace

}  // namespace program

namespace pid1 {

void run(const ChildPlan& p) noexcept {
    set_report_fd(p.sync_fd);
    ::close(p.parent_end_fd);

    wait_for_parent(p);
    scrub_host_memory(p);
    become_jail_user(p);
    set_userns_limits(p);
    apply_mount_plan(p.mounts, p.source_mount_fds, p.script_fd, p.staging_dir.c_str());
    enter_handed_network();
    const int keep[1] = {report_fd()};
    lock_down(p.lockdown, p.stdio_fds, keep, 1);
    // pid 2 shares our memory until it execs (as posix_spawn does): no page tables to copy,
    // and pid 1 waits the few microseconds until the exec. It runs on a stack of its own, so
    // nothing it does can disturb this frame.
    static char program_stack[64 * 1024] alignas(16);
    pid_t program_pid = ::clone(
        [](void* plan) -> int { program::exec(*static_cast<const ChildPlan*>(plan)); },
        program_stack + sizeof program_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
        const_cast<ChildPlan*>(&p));
    if (program_pid < 0) fail(ChildStep::Fork, errno, kExitJailError, "cannot start the program");
    run_reaper(program_pid, report_fd());
}

}  // namespace pid1

}  // namespace pyjail
