// The child's steps, in order. Each step either succeeds or reports {step, errno, message} to
// the supervisor and exits; the order matters for security and is explained step by step.
#include "child.hpp"

#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "exitstatus.hpp"
#include "init.hpp"
#include "protocol.hpp"
#include "sys.hpp"

extern char** environ;

namespace pyjail {

namespace {

int g_sync_fd = -1;

// Reports a failed step to the supervisor and exits. Async-signal-safe enough for a child
// of a single-threaded parent: no allocation, no locks.
[[noreturn]] void fail(ChildStep step, int err, int exit_code, const char* fmt, ...) {
    JailMessage m{};
    m.kind = MsgKind::Error;
    m.err = err;
    m.exit_code = exit_code;
    m.step = step;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    if (g_sync_fd >= 0) (void)::send(g_sync_fd, &m, sizeof m, MSG_NOSIGNAL);
    ::_exit(exit_code);
}

}  // namespace

namespace pid1 {

namespace {

// The parent-death signal: if the supervisor dies (even by SIGKILL), so does the jail -- pid 1
// dying takes every process of the pid namespace with it. Credential changes clear it, so
// it is set again after them; the POLLHUP check closes the race with a parent that died
// before the prctl.
void die_with_parent() {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(ChildStep::Pdeathsig, errno, kExitJailError, "prctl");
    pollfd p{g_sync_fd, 0, 0};
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
    do n = ::read(g_sync_fd, &go, 1);
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
    // From here on the jail acts on files as the mapped jail user (the invoking user, or
    // nobody for root). The capabilities we hold are those of the new user namespace only.
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
    char path[128];
    char value[32];
    for (const auto& l : p.userns_limits) {
        std::snprintf(path, sizeof path, "/proc/sys/user/%s", l.name);
        int fd = ::open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && !l.required) continue;
        if (fd < 0) fail(ChildStep::UsernsLimits, errno, kExitJailError, "cannot open %s", path);
        int n = std::snprintf(value, sizeof value, "%llu\n", static_cast<unsigned long long>(l.value));
        if (::write(fd, value, static_cast<std::size_t>(n)) != n)
            fail(ChildStep::UsernsLimits, errno, kExitJailError, "cannot set %s to %llu", path,
                 static_cast<unsigned long long>(l.value));
        ::close(fd);
    }
}

void do_mount(ChildStep step, const char* src, const char* target, const char* type,
              unsigned long flags, const char* data) {
    if (::mount(src, target, type, flags, data) != 0)
        fail(step, errno, kExitJailError, "%s on /%s", type != nullptr ? type : (src ? src : "-"), target);
}

void mkdirs(ChildStep step, const std::string& path, unsigned mode) {
    // Usually the parent exists: one call. Otherwise parents first; an existing directory is
    // fine.
    if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return;
    for (std::size_t i = 1; i <= path.size(); ++i) {
        if (i != path.size() && path[i] != '/') continue;
        std::string part = path.substr(0, i);
        if (::mkdir(part.c_str(), i == path.size() ? mode : 0755) != 0 && errno != EEXIST)
            fail(step, errno, kExitJailError, "cannot create mount point /%s", part.c_str());
    }
}

void copy_in(const MountOp& op, int src_fd) {
    int out = ::open(op.target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) fail(ChildStep::CopyScript, errno, kExitJailError, "cannot create /%s", op.target.c_str());
    while (true) {
        ssize_t n = ::sendfile(out, src_fd, nullptr, 1 << 20);
        if (n == 0) break;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(ChildStep::CopyScript, errno, kExitJailError, "copying into /%s", op.target.c_str());
    }
    if (::fchmod(out, op.mode) != 0) fail(ChildStep::CopyScript, errno, kExitJailError, "chmod /%s", op.target.c_str());
    ::close(out);
}

// Opens the sources to bind, in this mount namespace (a bind's source must be a mount of the
// caller's own namespace, so the parent's fds cannot serve) and before the new root covers
// the staging directory. The jail user opens them: when root runs pyjail, the jail sees host
// files with the rights of --host-user, never root's.
std::vector<std::string> open_sources(const ChildPlan& p) {
    std::vector<std::string> paths;
    for (std::size_t slot = 0; slot < p.mounts.sources.size(); ++slot) {
        const SourceRef& src = p.mounts.sources[slot];
        if (src.content) {
            paths.emplace_back();
            continue;
        }
        int fd = ::open(src.host_path.c_str(), O_PATH | O_CLOEXEC);
        if (fd < 0)
            fail(slot == 0 ? ChildStep::RootfsBind : ChildStep::Bind, errno, kExitJailError, "cannot open %s",
                 src.host_path.c_str());
        paths.push_back("/proc/self/fd/" + std::to_string(fd));
    }
    return paths;
}

void build_root(const ChildPlan& p) {
    // Nothing we mount may propagate back to the host's mount namespace.
    do_mount(ChildStep::MountPrivate, nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
    std::vector<std::string> source_paths = open_sources(p);

    for (const MountOp& op : p.mounts.ops) {
        const char* t = op.target.c_str();
        // The new root (a tmpfs, or the rootfs bound whole) goes on a host directory that only
        // this mount namespace sees covered, and we step into it.
        const bool root = op.target.empty();
        const char* where = root ? p.staging_dir.c_str() : t;
        struct stat st;
        // A mask over a /proc entry this kernel does not have: nothing to hide.
        if (op.if_exists && ::lstat(t, &st) != 0 && errno == ENOENT) continue;
        switch (op.kind) {
            case OpKind::Tmpfs:
                do_mount(root ? ChildStep::MountRoot : ChildStep::MountTmpfs, "tmpfs", where, "tmpfs", op.flags,
                         op.data.c_str());
                break;
            case OpKind::Proc: do_mount(ChildStep::MountProc, "proc", t, "proc", op.flags, nullptr); break;
            case OpKind::Devpts:
                do_mount(ChildStep::MountDevpts, "devpts", t, "devpts", op.flags, op.data.c_str());
                break;
            case OpKind::Mkdir:
                mkdirs(ChildStep::Mkdir, op.target, op.mode);
                // mkdir applies the invoker's umask: the sticky, world-writable scratch
                // directories get their mode exactly.
                if ((op.mode & ~0755u) != 0 && ::chmod(t, op.mode) != 0)
                    fail(ChildStep::Mkdir, errno, kExitJailError, "chmod /%s", t);
                break;
            case OpKind::MkFile: {
                int fd = ::open(t, O_WRONLY | O_CREAT | O_CLOEXEC, op.mode);
                if (fd < 0 && errno == ENOENT) {  // its directory first
                    auto slash = op.target.rfind('/');
                    if (slash != std::string::npos) mkdirs(ChildStep::Mkdir, op.target.substr(0, slash), 0755);
                    fd = ::open(t, O_WRONLY | O_CREAT | O_CLOEXEC, op.mode);
                }
                if (fd < 0) fail(ChildStep::Mkfile, errno, kExitJailError, "cannot create mount point /%s", t);
                ::close(fd);
                break;
            }
            case OpKind::Symlink:
                if (::symlink(op.source_path.c_str(), t) != 0)
                    fail(ChildStep::Symlink, errno, kExitJailError, "/%s -> %s", t, op.source_path.c_str());
                break;
            case OpKind::Bind: {
                std::string src = op.source_path;
                if (op.source_slot >= 0) {
                    src = source_paths[static_cast<std::size_t>(op.source_slot)];
                    if (!op.source_path.empty()) src += "/" + op.source_path;
                }
                if (::mount(src.c_str(), where, nullptr, op.flags, nullptr) != 0)
                    fail(op.source_slot == 0 ? ChildStep::RootfsBind : ChildStep::Bind, errno, kExitJailError,
                         "bind %s on /%s",
                         op.source_slot >= 0
                             ? p.mounts.sources[static_cast<std::size_t>(op.source_slot)].host_path.c_str()
                             : src.c_str(),
                         t);
                break;
            }
            case OpKind::Remount:
                do_mount(ChildStep::Remount, nullptr, t, nullptr, op.flags, nullptr);
                break;
            case OpKind::Copy: {
                copy_in(op, p.script_fd);
                break;
            }
        }
        if (root && ::chdir(where) != 0) fail(ChildStep::MountRoot, errno, kExitJailError, "chdir %s", where);
    }

    // Into the new root. pivot_root(".", ".") stacks the old root on top of the new one; the
    // lazy unmount then detaches the whole host tree, so no path leads back to it.
    if (sys_pivot_root(".", ".") != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "pivot_root");
    if (::umount2(".", MNT_DETACH) != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "detach old root");
    if (::chdir("/") != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "chdir /");
    // The root (the rootfs, or a tmpfs of mount points and symlinks): read-only, nothing can
    // be added.
    do_mount(ChildStep::RemountRoot, nullptr, "/", nullptr, p.mounts.root_flags, nullptr);
    if (::chdir(p.mounts.cwd.c_str()) != 0)
        fail(ChildStep::Chdir, errno, kExitJailError, "cannot enter %s", p.mounts.cwd.c_str());
}

void set_hostname(const ChildPlan& p) {
    if (::sethostname(p.hostname.data(), p.hostname.size()) != 0)
        fail(ChildStep::Hostname, errno, kExitJailError, "sethostname");
    if (::setdomainname("", 0) != 0) fail(ChildStep::Hostname, errno, kExitJailError, "setdomainname");
}

void set_up_network(const ChildPlan& p) {
    // A new network namespace has only `lo`, down. --net none leaves it so: no socket can
    // reach anything. --net loopback brings it up: a private 127.0.0.1, not the host's.
    if (!p.loopback_up) return;
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail(ChildStep::Network, errno, kExitJailError, "socket");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) fail(ChildStep::Network, errno, kExitJailError, "get lo flags");
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) fail(ChildStep::Network, errno, kExitJailError, "bring lo up");
    ::close(s);
}

void set_rlimits(const ChildPlan& p) {
    // Soft and hard alike, so the program cannot raise them. Among them RLIMIT_CORE=0: a core
    // file would hold the program's memory outside its control.
    for (const auto& r : p.rlimits) {
        rlimit v{r.value, r.hard != 0 ? r.hard : r.value};
        if (::setrlimit(static_cast<__rlimit_resource>(r.resource), &v) != 0)
            fail(ChildStep::Rlimits, errno, kExitJailError, "%s=%llu", r.name,
                 static_cast<unsigned long long>(r.value));
    }
}

void take_relayed_stdio(const ChildPlan& p) {
    // A relayed stream's pipe replaces the host's descriptor, which the jail then never holds
    // (a host file it held could be reopened for writing through /proc/self/fd or truncated).
    // The pipes' ends are all above 2 (relay.cpp), so no dup2 here overwrites another.
    for (int fd = 0; fd < 3; ++fd)
        if (p.stdio_fds[fd] >= 0 && ::dup2(p.stdio_fds[fd], fd) < 0)
            fail(ChildStep::Stdio, errno, kExitJailError, "dup2 onto fd %d", fd);
}

void new_session() {
    // A new session has no controlling terminal: TIOCSTI cannot push keystrokes into the
    // invoking user's shell.
    if (::setsid() < 0) fail(ChildStep::Setsid, errno, kExitJailError, "setsid");
}

void close_inherited_fds() {
    // Every inherited descriptor but 0, 1, 2 goes: a leaked fd to a host file or socket would
    // be a way out of every other protection. The sync socket moves to fd 3 and is close-on-
    // exec, so the program never holds it.
    if (g_sync_fd != 3) {
        if (::dup3(g_sync_fd, 3, O_CLOEXEC) < 0) fail(ChildStep::CloseFds, errno, kExitJailError, "dup3");
        g_sync_fd = 3;
    }
    if (sys_close_range(4, ~0U, 0) != 0) fail(ChildStep::CloseFds, errno, kExitJailError, "close_range");
}

void drop_capabilities() {
    // Capabilities of the jail's user namespace still let us mount, change uid inside, etc.:
    // drop them all, from every set, and lock it so none can come back on exec.
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap)
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            fail(ChildStep::Capabilities, errno, kExitJailError, "drop cap %d from the bounding set", cap);
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "clear ambient capabilities");
    if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                       SECBIT_NO_CAP_AMBIENT_RAISE |
                                       SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "securebits");
    cap_t none = ::cap_init();
    if (none == nullptr || ::cap_set_proc(none) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "clear capability sets");
    ::cap_free(none);
}

void set_no_new_privs() {
    // No exec may ever gain privileges again (setuid files, file capabilities).
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail(ChildStep::NoNewPrivs, errno, kExitJailError, "prctl");
}

void join_new_keyring() {
    // Keyrings are not namespaced: start the program in a new, empty session keyring, so the
    // invoking user's session keys are not even named by it (the key syscalls are also
    // refused by the filter). ENOSYS: a kernel without keys has nothing to hide.
    if (::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) < 0 && errno != ENOSYS)
        fail(ChildStep::Keyring, errno, kExitJailError, "cannot join a new session keyring");
}

// Returns the filter's listener (or -1 without a filter), which goes to the supervisor with
// the "ready" message: one wake-up of the supervisor instead of two.
int install_seccomp(const ChildPlan& p) {
    // Last before the program, so the set-up above is not limited by it. The filter notifies
    // the supervisor of every refused syscall; the listener fd goes to it and not beyond.
    // Until it arrives there, a refused call would wait forever: pid 1 only makes calls every
    // set must allow (parse_seccomp_set checks) before it hands the listener over, with the
    // "ready" message once its signals are set up.
    if (p.seccomp_filter.empty()) return -1;
    sock_fprog prog{static_cast<unsigned short>(p.seccomp_filter.size()),
                    const_cast<sock_filter*>(p.seccomp_filter.data())};
    long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                              SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) fail(ChildStep::Seccomp, errno, kExitJailError, "cannot install the syscall filter");
    return static_cast<int>(listener);
}

void install_init_signals() {
    // Before the fork, so no forwarded signal can fall between the cracks. pid 1 of a pid
    // namespace ignores signals it has no handler for, so each gets a (no-op) handler; the
    // signals stay blocked and are taken with sigwaitinfo.
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    sigset_t set;
    sigemptyset(&set);
    for (int s : kForwardedSignals) {
        ::sigaction(s, &sa, nullptr);
        sigaddset(&set, s);
    }
    for (int s : {SIGCHLD, reap_request_signal()}) {
        ::sigaction(s, &sa, nullptr);
        sigaddset(&set, s);
    }
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
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
    fail(ChildStep::Exec, e, code, "cannot execute %s", p.exec_path.c_str());
}

}  // namespace

}  // namespace program

namespace pid1 {

void run(const ChildPlan& p) noexcept {
    g_sync_fd = p.sync_fd;
    ::close(p.parent_end_fd);

    wait_for_parent(p);
    scrub_host_memory(p);
    become_jail_user(p);
    set_userns_limits(p);
    build_root(p);
    set_hostname(p);
    set_up_network(p);
    set_rlimits(p);
    take_relayed_stdio(p);
    new_session();
    close_inherited_fds();
    drop_capabilities();
    set_no_new_privs();
    join_new_keyring();
    int listener = install_seccomp(p);
    install_init_signals();

    JailMessage ready{};
    ready.kind = MsgKind::Ready;
    if (int e = send_with_fd(g_sync_fd, &ready, sizeof ready, listener); e != 0)
        fail(ChildStep::Seccomp, e, kExitJailError, "cannot hand the filter's listener to pyjail");
    if (listener >= 0) ::close(listener);
    // pid 2 shares our memory until it execs (as posix_spawn does): no page tables to copy,
    // and pid 1 waits the few microseconds until the exec. It runs on a stack of its own, so
    // nothing it does can disturb this frame.
    static char program_stack[64 * 1024] alignas(16);
    pid_t program_pid = ::clone(
        [](void* plan) -> int { program::exec(*static_cast<const ChildPlan*>(plan)); },
        program_stack + sizeof program_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
        const_cast<ChildPlan*>(&p));
    if (program_pid < 0) fail(ChildStep::Fork, errno, kExitJailError, "cannot start the program");
    run_reaper(program_pid, g_sync_fd);
}

}  // namespace pid1

}  // namespace pyjail
