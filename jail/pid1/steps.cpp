#include "steps.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "egress_pid1.hpp"
#include "run_userns.hpp"
#include "exitstatus.hpp"
#include "init.hpp"
#include "protocol.hpp"
#include "sys.hpp"

namespace pyjail::pid1 {

namespace {

int g_report_fd = -1;
int g_report_send_flags = 0;  // MSG_DONTWAIT for a run from a template (set_report_fd)

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

// A mask over a /proc entry this kernel does not have: nothing to hide. The mount's own ENOENT
// says so (no lstat before each of the twenty masks); only then is the target looked at, so a
// mount that fails for any other reason, or on a target that is there, still stops the run.
// Keeps errno for the caller's message.
bool absent(const MountOp& op, int err) {
    if (!op.if_exists || err != ENOENT) return false;
    struct stat st;
    bool gone = ::lstat(op.target.c_str(), &st) != 0 && errno == ENOENT;
    errno = err;
    return gone;
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

}  // namespace

void set_report_fd(int fd, bool never_wait) noexcept {
    g_report_fd = fd;
    g_report_send_flags = never_wait ? MSG_DONTWAIT : 0;
}
int report_send_flags() noexcept { return g_report_send_flags; }
int report_fd() noexcept { return g_report_fd; }

void do_mount(ChildStep step, const char* src, const char* target, const char* type,
              unsigned long flags, const char* data) {
    if (::mount(src, target, type, flags, data) != 0)
        fail(step, errno, kExitJailError, "%s on /%s", type != nullptr ? type : (src ? src : "-"), target);
}


// Async-signal-safe enough for a copy of a single-threaded process: no allocation, no locks.
void fail(ChildStep step, int err, int exit_code, const char* fmt, ...) noexcept {
    JailMessage m{};
    m.kind = MsgKind::Error;
    m.err = err;
    m.exit_code = exit_code;
    m.step = step;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(m.text, sizeof m.text, fmt, ap);
    va_end(ap);
    if (g_report_fd >= 0) (void)::send(g_report_fd, &m, sizeof m, MSG_NOSIGNAL | g_report_send_flags);
    ::_exit(exit_code);
}

void apply_mount_op(const MountOp& op, const MountPlan& plan, const std::vector<std::string>& sources,
                    int content_fd, const char* where) {
    const char* t = op.target.c_str();
    const bool root = op.target.empty();
    switch (op.kind) {
        case OpKind::Tmpfs:
            if (::mount("tmpfs", where, "tmpfs", op.flags, op.data.c_str()) != 0 && !absent(op, errno))
                fail(root ? ChildStep::MountRoot : ChildStep::MountTmpfs, errno, kExitJailError, "tmpfs on /%s", where);
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
            if (op.source_slot >= 0 && plan.sources[static_cast<std::size_t>(op.source_slot)].host_path.empty()) {
                // A tree from the client (open_sources): moved here, never bound again, so the
                // run holds that one clone and nothing else of the host.
                src = sources[static_cast<std::size_t>(op.source_slot)];
                if (::syscall(SYS_move_mount, AT_FDCWD, src.c_str(), AT_FDCWD, where, MOVE_MOUNT_F_SYMLINKS) != 0)
                    fail(ChildStep::Bind, errno, kExitJailError, "cannot put the client's bind on /%s", t);
                break;
            }
            if (op.source_slot >= 0) {
                src = sources[static_cast<std::size_t>(op.source_slot)];
                if (!op.source_path.empty()) src += "/" + op.source_path;
            }
            if (::mount(src.c_str(), where, nullptr, op.flags, nullptr) != 0 && !absent(op, errno))
                fail(op.source_slot == 0 ? ChildStep::RootfsBind : ChildStep::Bind, errno, kExitJailError,
                     "bind %s on /%s",
                     op.source_slot >= 0
                         ? plan.sources[static_cast<std::size_t>(op.source_slot)].host_path.c_str()
                         : src.c_str(),
                     t);
            break;
        }
        case OpKind::Remount:
            if (::mount(nullptr, t, nullptr, op.flags, nullptr) != 0 && !absent(op, errno))
                fail(ChildStep::Remount, errno, kExitJailError, "- on /%s", t);
            break;
        case OpKind::Copy: copy_in(op, content_fd); break;
        case OpKind::Write: {
            int out = ::open(t, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, op.mode);
            if (out < 0 || ::write(out, op.data.data(), op.data.size()) != static_cast<ssize_t>(op.data.size()))
                fail(ChildStep::Mkfile, errno, kExitJailError, "cannot write /%s", t);
            ::close(out);
            break;
        }
    }
}

namespace {

// Opens the sources to bind, in this mount namespace (a bind's source must be a mount of the
// caller's own namespace, so the parent's fds cannot serve) and before the new root covers
// the staging directory. The jail user opens them: when root runs pyjail, the jail sees host
// files with the rights of --host-user, never root's.
std::vector<std::string> open_sources(const MountPlan& plan, const std::vector<int>& source_mount_fds) {
    std::vector<std::string> paths;
    for (std::size_t slot = 0; slot < plan.sources.size(); ++slot) {
        const SourceRef& src = plan.sources[slot];
        if (src.content) {
            paths.emplace_back();
            continue;
        }
        // A run from a template's host bind: a tree its client opened (template_binds.hpp),
        // with no path in this namespace; apply_mount_op moves it to its target.
        if (src.host_path.empty()) {
            if (slot >= source_mount_fds.size() || source_mount_fds[slot] < 0)
                fail(ChildStep::Bind, EBADF, kExitJailError, "a host bind came without its tree");
            paths.push_back("/proc/self/fd/" + std::to_string(source_mount_fds[slot]));
            continue;
        }
        // An idmapped clone (when root runs pyjail with ids of its own): in the source's place
        // in this private mount namespace, so the bind below is made from it.
        if (slot < source_mount_fds.size() && source_mount_fds[slot] >= 0 &&
            sys_move_mount_here(source_mount_fds[slot], src.host_path.c_str()) != 0)
            fail(ChildStep::Bind, errno, kExitJailError, "cannot place the idmapped mount of %s",
                 src.host_path.c_str());
        int fd = ::open(src.host_path.c_str(), O_PATH | O_CLOEXEC);
        if (fd < 0)
            fail(slot == 0 ? ChildStep::RootfsBind : ChildStep::Bind, errno, kExitJailError, "cannot open %s",
                 src.host_path.c_str());
        paths.push_back("/proc/self/fd/" + std::to_string(fd));
    }
    return paths;
}

void set_hostname(const std::string& hostname) {
    if (::sethostname(hostname.data(), hostname.size()) != 0)
        fail(ChildStep::Hostname, errno, kExitJailError, "sethostname");
    if (::setdomainname("", 0) != 0) fail(ChildStep::Hostname, errno, kExitJailError, "setdomainname");
}

void set_up_network(bool loopback_up) {
    // A new network namespace has only `lo`, down. --net none leaves it so: no socket can
    // reach anything. --net loopback brings it up: a private 127.0.0.1, not the host's.
    if (!loopback_up) return;
    int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) fail(ChildStep::Network, errno, kExitJailError, "socket");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) fail(ChildStep::Network, errno, kExitJailError, "get lo flags");
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) fail(ChildStep::Network, errno, kExitJailError, "bring lo up");
    ::close(s);
}

void set_rlimits(const std::vector<RlimitValue>& rlimits) {
    // Soft and hard alike, so the program cannot raise them. Among them RLIMIT_CORE=0: a core
    // file would hold the program's memory outside its control.
    for (const auto& r : rlimits) {
        rlimit v{r.value, r.hard != 0 ? r.hard : r.value};
        if (::setrlimit(static_cast<__rlimit_resource>(r.resource), &v) != 0)
            fail(ChildStep::Rlimits, errno, kExitJailError, "%s=%llu", r.name,
                 static_cast<unsigned long long>(r.value));
    }
}

void take_stdio(const int (&fds)[3]) {
    // A relayed stream's pipe replaces the host's descriptor, which the jail then never holds
    // (a host file it held could be reopened for writing through /proc/self/fd or truncated).
    // The pipes' ends are all above 2 (relay.cpp), so no dup2 here overwrites another.
    for (int fd = 0; fd < 3; ++fd)
        if (fds[fd] >= 0 && ::dup2(fds[fd], fd) < 0)
            fail(ChildStep::Stdio, errno, kExitJailError, "dup2 onto fd %d", fd);
}

void new_session() {
    // A new session has no controlling terminal: TIOCSTI cannot push keystrokes into the
    // invoking user's shell.
    if (::setsid() < 0) fail(ChildStep::Setsid, errno, kExitJailError, "setsid");
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
    // Effective, permitted and inheritable sets emptied (capset directly: no library needed
    // in a template's extension module).
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3]{};
    if (::syscall(SYS_capset, &header, none) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "clear capability sets");
}

void keep_template_capabilities(bool low_ports) {
    // A template (`pyjail serve`) runs only trusted code: the rootfs's interpreter importing
    // the rootfs's modules. It keeps, in its own user namespace only, what making a run a jail
    // of its own takes (forked_run.cpp): new namespaces and mounts (SYS_ADMIN), `lo` (NET_ADMIN)
    // and emptying the run's bounding set (SETPCAP). Every other capability goes, from every
    // set; these three survive the interpreter's execve as ambient capabilities (the jail user
    // is not root: nothing else survives it), and the interpreter lowers them to its permitted
    // set before it runs any module of the rootfs (template_::lower_capabilities). Every run drops
    // them all before its program runs. Serving --net allow, also NET_BIND_SERVICE: each run's
    // pid 1 binds the run's resolver at port 53 of the run's own network namespace.
    const std::vector<int> kKeep = low_ports ? std::vector<int>{CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP,
                                                                CAP_NET_BIND_SERVICE}
                                             : std::vector<int>{CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP};
    auto kept = [&](int cap) {
        for (int k : kKeep)
            if (k == cap) return true;
        return false;
    };
    for (int cap = 0; cap <= CAP_LAST_CAP; ++cap)
        if (!kept(cap) && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            fail(ChildStep::Capabilities, errno, kExitJailError, "drop cap %d from the bounding set", cap);
    if (::prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                       SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "securebits");
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct sets[_LINUX_CAPABILITY_U32S_3]{};
    for (int k : kKeep) {
        sets[k / 32].effective |= 1u << (k % 32);
        sets[k / 32].permitted |= 1u << (k % 32);
        sets[k / 32].inheritable |= 1u << (k % 32);
    }
    if (::syscall(SYS_capset, &header, sets) != 0)
        fail(ChildStep::Capabilities, errno, kExitJailError, "set the template's capabilities");
    for (int k : kKeep)
        if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, k, 0, 0) != 0)
            fail(ChildStep::Capabilities, errno, kExitJailError, "raise ambient capability %d", k);
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

// Returns the filter's listener, or -1 without one.
int install_seccomp(const std::vector<sock_filter>& filter, bool notifies) {
    // Last before the program, so the set-up above is not limited by it. A run's filter
    // notifies the supervisor of every refused syscall; the listener fd goes to it and not
    // beyond. Until it arrives there, a refused call would wait forever: pid 1 only makes calls
    // every set must allow (parse_seccomp_set checks) before it hands the listener over, with
    // the "ready" message once its signals are set up. A template's filter has no listener:
    // its runs' filters, stacked on it, need the stack's one listener.
    if (filter.empty()) return -1;
    sock_fprog prog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
    long listener = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                              notifies ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0, &prog);
    if (listener < 0) fail(ChildStep::Seccomp, errno, kExitJailError, "cannot install the syscall filter");
    return notifies ? static_cast<int>(listener) : -1;
}

// Keeps `keep` at 3, 4, ... (close-on-exec) and closes every other descriptor above 2: a leaked
// fd to a host file or socket would be a way out of every other protection. The first is the
// report socket, which the program never holds.
void keep_only(const int* keep, int n) {
    int moved[8];
    if (n < 1 || n > 8) fail(ChildStep::CloseFds, EINVAL, kExitJailError, "keep %d descriptors", n);
    // Out of the way first (a target may be another's source), above every target.
    for (int k = 0; k < n; ++k)
        if ((moved[k] = ::fcntl(keep[k], F_DUPFD_CLOEXEC, 3 + n)) < 0)
            fail(ChildStep::CloseFds, errno, kExitJailError, "fcntl(F_DUPFD)");
    for (int k = 0; k < n; ++k)
        if (::dup3(moved[k], 3 + k, O_CLOEXEC) < 0) fail(ChildStep::CloseFds, errno, kExitJailError, "dup3");
    if (sys_close_range(static_cast<unsigned>(3 + n), ~0U, 0) != 0)
        fail(ChildStep::CloseFds, errno, kExitJailError, "close_range");
    g_report_fd = 3;
}

void send_ready(int listener) {
    JailMessage ready{};
    ready.kind = MsgKind::Ready;
    if (int e = send_with_fd(g_report_fd, &ready, sizeof ready, listener, g_report_send_flags); e != 0)
        fail(ChildStep::Seccomp, e, kExitJailError, "cannot hand the filter's listener to pyjail");
    if (listener >= 0) ::close(listener);
}

// The supervisor's requests (protocol.hpp) arrive on the report socket, now fd 3: the kernel
// signals pid 1 (kRequestSignal, init.hpp) when one is there. The owner and the flag belong to
// the socket and pid 1, and so survive a template run's exec of its reaper.
void hear_requests() {
    int flags = ::fcntl(g_report_fd, F_GETFL);
    if (::fcntl(g_report_fd, F_SETOWN, ::getpid()) != 0 || flags < 0 ||
        ::fcntl(g_report_fd, F_SETFL, flags | O_ASYNC) != 0)
        fail(ChildStep::CloseFds, errno, kExitJailError, "cannot be signalled for the supervisor's requests");
}

}  // namespace

void install_init_signals() {
    // Before the program starts, so no forwarded signal can fall between the cracks. pid 1 of
    // a pid namespace ignores signals it has no handler for, so each gets a (no-op) handler;
    // the signals stay blocked and are taken with sigwaitinfo.
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    sigset_t set;
    sigemptyset(&set);
    for (int s : kForwardedSignals) {
        ::sigaction(s, &sa, nullptr);
        sigaddset(&set, s);
    }
    for (int s : {SIGCHLD, kRequestSignal}) {
        ::sigaction(s, &sa, nullptr);
        sigaddset(&set, s);
    }
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

void apply_mount_plan(const MountPlan& plan, const std::vector<int>& source_mount_fds, int content_fd,
                      const char* staging_dir) {
    // Nothing we mount may propagate back to the mount namespace we came from.
    do_mount(ChildStep::MountPrivate, nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
    std::vector<std::string> source_paths = open_sources(plan, source_mount_fds);
    bool new_root = false;
    for (const MountOp& op : plan.ops) new_root = new_root || op.target.empty();
    // Without a new root, the targets are relative to the root we have.
    if (!new_root && ::chdir("/") != 0) fail(ChildStep::Chdir, errno, kExitJailError, "chdir /");

    for (const MountOp& op : plan.ops) {
        // The new root (a tmpfs, or the rootfs bound whole) goes on a host directory that only
        // this mount namespace sees covered, and we step into it.
        const bool root = op.target.empty();
        const char* where = root ? staging_dir : op.target.c_str();
        apply_mount_op(op, plan, source_paths, content_fd, where);
        if (root && ::chdir(where) != 0) fail(ChildStep::MountRoot, errno, kExitJailError, "chdir %s", where);
    }

    if (new_root) {
        // Into the new root. pivot_root(".", ".") stacks the old root on top of the new one;
        // the lazy unmount then detaches the whole host tree, so no path leads back to it.
        if (sys_pivot_root(".", ".") != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "pivot_root");
        if (::umount2(".", MNT_DETACH) != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "detach old root");
        if (::chdir("/") != 0) fail(ChildStep::PivotRoot, errno, kExitJailError, "chdir /");
        // The root (the rootfs, or a tmpfs of mount points and symlinks): read-only, nothing
        // can be added.
        do_mount(ChildStep::RemountRoot, nullptr, "/", nullptr, plan.root_flags, nullptr);
    }
    if (::chdir(plan.cwd.c_str()) != 0)
        fail(ChildStep::Chdir, errno, kExitJailError, "cannot enter %s", plan.cwd.c_str());
}

void enter_network(int net, ChildStep step) {
    if (net >= 0) {
        if (::setns(net, CLONE_NEWNET) != 0)
            fail(step, errno, kExitJailError, "cannot enter the jail's network namespace");
        return;
    }
    if (::unshare(CLONE_NEWNET) != 0) fail(step, errno, kExitJailError, "cannot create the jail's network namespace");
}

void lock_down(const Lockdown& l, const int (&stdio)[3], const int* keep, int keep_count) {
    set_hostname(l.hostname);
    set_up_network(l.loopback_up);
    open_egress_sockets(l.egress_sockets);
    if (l.own_user_namespace) enter_run_user_namespace(::getuid(), ::getgid());  // run_userns.hpp
    set_rlimits(l.rlimits);
    take_stdio(stdio);
    new_session();
    keep_only(keep, keep_count);
    hear_requests();
    if (l.template_capabilities) keep_template_capabilities(l.template_binds_low_ports);
    else drop_capabilities();
    set_no_new_privs();
    if (l.new_keyring) join_new_keyring();
    int listener = install_seccomp(l.seccomp_filter, l.filter_notifies);
    install_init_signals();
    send_ready(listener);
}

}  // namespace pyjail::pid1
