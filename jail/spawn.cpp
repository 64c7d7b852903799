// Theory of operation
//
// pyjail is a supervisor (the invoking user, in the host's namespaces) and a jail (a process
// tree in new user, mount, pid, net, ipc, uts and cgroup namespaces). No step needs privileges
// on the host: everything the jail does, it does with the capabilities a new user namespace
// grants its creator, over objects that namespace owns.
//
//   parent (this file)                         child (child.cpp), pid 1 of the jail
//   1. options + profile -> Policy (policy.cpp)
//   2. facts about the host -> MountPlan,
//      id maps, argv, env (pure planners)
//   3. open every bind source and the script
//      (the script with the jail's host user's
//      rights, hostopen.hpp: the jail can only
//      see what its user could open)
//   4. clone3(NEW*)  ------------------------>  writes its own id maps; or, when root runs
//                                              pyjail, waits on the sync socket while
//   5. (root) write setgroups=deny, uid_map,    the parent writes them
//      gid_map, send "go"  -------------------> become the jail user, mount plan, pivot_root,
//                                              hostname, lo, rlimits, setsid, close fds,
//                                              drop caps, no_new_privs, (seccomp), "ready",
//                                              fork: pid 2 execs the program,
//                                                    pid 1 reaps and reports
//   6. wait: relay signals, enforce wall time,  <- {Error} or {Ready}, then {Status}
//      reap pid 1, map the outcome to an exit
//      status
//
// Failures before clone are plain exceptions. After it, the child reports {step, errno,
// text} over the socket and exits; the parent turns that into the same one-line error. The
// child never returns into the parent's frames (it ends in execve or _exit), so no destructor
// of the parent's RAII objects runs twice.
#include "spawn.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <sys/resource.h>

#include "child.hpp"
#include "compiled_filter.hpp"
#include "error.hpp"
#include "exitstatus.hpp"
#include "exposure.hpp"
#include "hints.hpp"
#include "hostopen.hpp"
#include "init.hpp"
#include "relay.hpp"
#include "rootfs.hpp"
#include "supervise.hpp"
#include "terminal.hpp"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace pyjail {

namespace {

std::string current_dir() {
    char buf[PATH_MAX];
    if (::getcwd(buf, sizeof buf) == nullptr)
        throw JailError("cwd", "cannot read the current directory", errno);
    return buf;
}

// "1000 65534 1\n" -> "1000 65534 1", for messages.
std::string trim_map(const std::string& map) {
    return map.empty() || map.back() != '\n' ? map : map.substr(0, map.size() - 1);
}

std::string fd_path(int fd) {
    char buf[PATH_MAX];
    ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The host user root's jails run as (--host-user).
std::pair<uid_t, gid_t> resolve_host_user(const HostUser& u) {
    if (u.uid && u.gid) return {*u.uid, *u.gid};
    // /etc/passwd is read directly, not through NSS: pyjail is linked statically, and a
    // static binary cannot rely on loading NSS modules.
    std::string passwd;
    (void)try_read_file("/etc/passwd", passwd);
    if (u.uid) {
        auto pw = find_passwd_entry(passwd, "", u.uid);
        return {*u.uid, pw ? pw->second : static_cast<gid_t>(*u.uid)};
    }
    auto pw = find_passwd_entry(passwd, u.name, std::nullopt);
    if (!pw)
        throw UsageError(fmt::format("--host-user: no user named '{}' in /etc/passwd", u.name),
                         "give UID:GID, e.g. 65534:65534");
    if (pw->first == 0 || pw->second == 0)
        throw UsageError(fmt::format("--host-user: '{}' is root", u.name));
    return *pw;
}

// What `path` (absolute, in the jail) names for the jail: through a bind, or in the rootfs.
FileKind probe_in_jail(const Prepared& p, const std::vector<BindSpec>& binds,
                       const std::string& path) {
    for (const auto& b : binds) {
        if (path == b.target || path.rfind(b.target + "/", 0) == 0) {
            std::string host = b.source + path.substr(b.target.size());
            struct stat st {};
            if (::stat(host.c_str(), &st) != 0) return FileKind::Missing;
            return S_ISREG(st.st_mode) && (st.st_mode & 0111) ? FileKind::Executable
                                                               : FileKind::NotExecutable;
        }
    }
    return probe_in_rootfs(p.rootfs_fd.get(), path);
}

// Kills and reaps the jail if the parent leaves before supervising it to the end.
class JailHandle {
public:
    explicit JailHandle(int pidfd) : pidfd_(pidfd) {}
    JailHandle(const JailHandle&) = delete;
    JailHandle& operator=(const JailHandle&) = delete;
    ~JailHandle() {
        if (!pidfd_) return;
        if (!reaped_) {
            sys_pidfd_send_signal(pidfd_.get(), SIGKILL);
            siginfo_t info{};
            while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info,
                            WEXITED) != 0 &&
                   errno == EINTR) {
            }
        }
    }
    int pidfd() const { return pidfd_.get(); }
    void mark_reaped() { reaped_ = true; }

private:
    UniqueFd pidfd_;
    bool reaped_ = false;
};

// Blocks the relayed signals for the supervisor's lifetime and hands them out on a signalfd;
// the old mask comes back when the run ends.
class SignalRelay {
public:
    SignalRelay() {
        sigset_t set;
        sigemptyset(&set);
        for (int s : kForwardedSignals) sigaddset(&set, s);
        if (::sigprocmask(SIG_BLOCK, &set, &old_) != 0)
            throw JailError("signals", "sigprocmask", errno);
        fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
        if (!fd_) throw JailError("signals", "signalfd", errno);
        // A reader of the relayed output that goes away must not kill the supervisor (and
        // with it the cleanup of the jail); the program gets default dispositions back.
        ::signal(SIGPIPE, SIG_IGN);
    }
    SignalRelay(const SignalRelay&) = delete;
    SignalRelay& operator=(const SignalRelay&) = delete;
    ~SignalRelay() { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
    int fd() const { return fd_.get(); }

private:
    sigset_t old_{};
    UniqueFd fd_;
};

// When root runs pyjail, the jail writes as --host-user: say so up front instead of letting
// the program fail later with a bare EACCES.
void warn_unwritable_binds(const std::vector<BindSpec>& binds, const IdMaps& ids) {
    for (const auto& b : binds) {
        struct stat st {};
        if (!b.writable || ::stat(b.source.c_str(), &st) != 0) continue;
        bool ok = (st.st_uid == ids.host_uid && (st.st_mode & S_IWUSR)) ||
                  (st.st_gid == ids.host_gid && (st.st_mode & S_IWGRP)) || (st.st_mode & S_IWOTH);
        if (!ok)
            std::fprintf(stderr,
                         "pyjail: warning: %s: %s is not writable by uid %u, the jail's host user "
                         "when pyjail runs as root (chown it, or choose --host-user)\n",
                         b.origin.c_str(), b.source.c_str(), ids.host_uid);
    }
}

// Fail closed, and early, on a kernel that cannot filter syscalls or notify us of refusals.
void probe_seccomp_from_parent() {
    if (int e = seccomp_user_notif_errno(); e != 0) {
        throw JailError("seccomp", "this kernel cannot filter syscalls with user notification", e,
                        child_step_hint(ChildStep::Seccomp, e == EOPNOTSUPP ? EINVAL : e));
    }
}

}  // namespace

Prepared prepare_from_parent(Policy policy, const DataDirs& dirs) {
    Prepared p;
    std::string cwd = current_dir();
    p.rootfs = policy.rootfs.empty() ? dirs.rootfs : resolve_rootfs(policy.rootfs, dirs);
    p.rootfs_fd = open_rootfs_from_parent(p.rootfs);
    auto binds = all_binds(policy);

    // Bind sources are checked now, so a missing one fails before any process exists; the
    // child opens them again in its own mount namespace, as the jail user.
    MountFacts facts;
    facts.rootfs_top = list_rootfs_top(p.rootfs_fd.get());
    facts.rootfs_locked_flags = locked_flags_of(p.rootfs_fd.get());
    int script_fd = -1;
    for (const auto& b : binds) {
        UniqueFd fd(::open(b.source.c_str(), O_PATH | O_CLOEXEC));
        if (!fd)
            throw JailError("bind", fmt::format("{}: cannot use {}", b.origin, b.source), errno,
                            "the source of a bind must exist on the host");
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) throw JailError("bind", b.source, errno);
        BindFacts f;
        f.is_dir = S_ISDIR(st.st_mode);
        f.real_source = fd_path(fd.get());
        f.locked_flags = locked_flags_of(fd.get());
        bool target_is_dir = false;
        f.target_in_rootfs = exists_in_rootfs(p.rootfs_fd.get(), b.target, target_is_dir) &&
                             target_is_dir == f.is_dir;
        if (f.is_dir) f.credentials = credentials_in_from_parent(fd.get());
        facts.binds.push_back(f);
    }
    facts.home_dirs = home_dirs_from_parent();

    if (!policy.command.empty()) {
        p.command = resolve_command(
            policy.command,
            [&](const std::string& path) { return probe_in_jail(p, binds, path); },
            pythons_in_rootfs(p.rootfs_fd.get()));
    }
    p.argv = policy.command;

    uid_t root_uid = 0;
    gid_t root_gid = 0;
    if (::geteuid() == 0) std::tie(root_uid, root_gid) = resolve_host_user(policy.host_user);

    std::optional<std::string> script;
    if (p.command.script_index) {
        std::string host = absolute_path(p.argv[*p.command.script_index], cwd);
        // Opened with the rights of the jail's host user (hostopen.hpp): root must not read a
        // file for the jail through a link another user planted.
        std::optional<HostUserIds> as_host_user;
        if (::geteuid() == 0) as_host_user = HostUserIds{root_uid, root_gid};
        UniqueFd fd = open_script_from_parent(host, p.argv[*p.command.script_index], as_host_user);
        facts.script_real_path = fd_path(fd.get());
        script = host;
        script_fd = fd.get();
        p.owned_fds.push_back(std::move(fd));
    }

    p.mounts = plan_mounts(policy, p.rootfs, facts, script);
    if (p.mounts.script_jail_path) p.argv[*p.command.script_index] = *p.mounts.script_jail_path;
    // The script is read by the parent's open fd: the jail gets a copy of a file its host
    // user can read (or root's own, on a path nobody else could have planted).
    for (const auto& src : p.mounts.sources) p.content_fds.push_back(src.content ? script_fd : -1);

    p.ids = plan_idmaps(::geteuid(), ::getegid(), root_uid, root_gid);
    if (::geteuid() == 0 && !policy.quiet) warn_unwritable_binds(binds, p.ids);
    p.env = jail_environment(policy);

    // The filter is ready before any process exists: compiled at build time for exactly this
    // set, or compiled here, so that a broken set fails now.
    if (policy.seccomp != "off") {
        probe_seccomp_from_parent();
        FoundFile set = read_seccomp_set(policy.seccomp, dirs);
        std::string groups_path = dirs.profiles + "/seccomp/groups.toml";
        FilterInputs in{std::move(set.text), read_data_file(groups_path, "seccomp"), policy.net};
        std::string file;
        if (auto compiled = load_compiled_filter(dirs, in, file)) {
            p.seccomp = SeccompSet{policy.seccomp, false, std::move(compiled->allow),
                                   std::move(compiled->deny)};
            p.seccomp_filter = std::move(compiled->program);
            p.seccomp_compiled_at = file;
        } else {
            p.seccomp = parse_seccomp_set(in.set_text, set.path, in.groups_text, groups_path);
            p.seccomp->name = policy.seccomp;
            p.seccomp_filter = compile_seccomp(*p.seccomp, policy.net);
        }
    }

    // Limits: cgroup v2 where a delegated cgroup can be had, rlimits otherwise.
    const Limits& l = policy.limits;
    bool wants_cgroup = l.memory || l.pids || l.cpus || l.cpu_time > 0;
    if (policy.cgroup != CgroupMode::Off) {
        std::vector<std::string> controllers;
        if (l.memory) controllers.push_back("memory");
        if (l.pids) controllers.push_back("pids");
        if (l.cpus) controllers.push_back("cpu");
        p.cgroup = find_cgroup_site_from_parent(controllers, policy.cgroup_parent);
        if (!p.cgroup.ok && policy.cgroup == CgroupMode::Require)
            throw JailError("cgroup", "cgroup v2 is required (--cgroup require), but " + p.cgroup.why_not,
                            0, "or run with --cgroup auto to fall back to rlimits");
    }  // --cgroup off: rlimits by choice, nothing to explain
    if (!wants_cgroup && !p.cgroup.ok) p.cgroup.why_not.clear();
    p.limits = plan_limits(l, p.cgroup.ok);
    p.policy = std::move(policy);
    return p;
}

ReportTarget ReportTarget::open_from_parent(const std::string& path, int fd) {
    ReportTarget t;
    if (!path.empty()) {
        // Not through a symlink, a FIFO or another user's file: a report path in a shared
        // directory must not let another user point pyjail (perhaps root) at a file to
        // truncate, or hang it in open() (hostopen.hpp).
        t.owned_ = open_report_from_parent(path);
        t.fd_ = t.owned_.get();
        t.name_ = path;
    } else if (fd >= 0) {
        if (::fcntl(fd, F_GETFD) < 0)
            throw JailError("report", fmt::format("--report-fd {} is not open", fd), errno);
        t.fd_ = fd;
        t.name_ = fmt::format("fd {}", fd);
    }
    return t;
}

void ReportTarget::write(const RunFacts& facts) const {
    if (fd_ < 0) return;
    std::string text = report_json(facts);
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            std::fprintf(stderr, "pyjail: report: cannot write %s: %s\n", name_.c_str(),
                         std::strerror(errno));
            return;
        }
        done += static_cast<std::size_t>(n);
    }
}

int spawn_and_supervise_from_parent(Prepared& p, char** host_argv, RunFacts& facts) {
    const bool verbose = p.policy.verbose;
    ChildPlan plan;
    plan.host_argv = host_argv;
    plan.jail_uid = kJailUid;
    plan.jail_gid = kJailGid;
    const bool child_maps_itself = ::geteuid() != 0;
    if (child_maps_itself) {
        plan.own_uid_map = p.ids.uid_map;
        plan.own_gid_map = p.ids.gid_map;
    }
    plan.staging_dir = "/tmp";
    plan.mounts = p.mounts;
    plan.content_fds = p.content_fds;
    plan.hostname = p.policy.hostname;
    plan.loopback_up = p.policy.net == NetMode::Loopback;
    plan.exec_path = p.command.exec_path;
    plan.seccomp_filter = p.seccomp_filter;
    plan.rlimits = p.limits.rlimits;
    plan.userns_limits = p.limits.userns_limits;
    facts.limits = p.limits.entries;
    if (!p.seccomp)  // loud even under --quiet: the one protection that is explicitly gone
        std::fprintf(stderr, "pyjail: WARNING: --seccomp off: the program can make every syscall "
                             "the kernel allows in a user namespace\n");
    for (auto& a : p.argv) plan.argv.push_back(a.data());
    plan.argv.push_back(nullptr);
    for (auto& e : p.env) plan.envp.push_back(e.data());
    plan.envp.push_back(nullptr);

    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        throw JailError("socketpair", "cannot create the sync socket", errno);
    UniqueFd parent_end(sv[0]);
    UniqueFd child_end(sv[1]);
    plan.sync_fd = child_end.get();
    plan.parent_end_fd = parent_end.get();

    // fds 0-2: pipes, sockets, ttys and /dev/null reach the jail as they are (no copy on
    // the common path); anything else, and fds 1 and 2 under --output-limit, through our relay.
    const std::array<StdioKind, 3> stdio_kinds{classify_host_fd(0), classify_host_fd(1),
                                               classify_host_fd(2)};
    StdioPlan stdio = plan_stdio(stdio_kinds, p.policy.limits.output.has_value(),
                                 same_host_object(1, 2));
    std::optional<StdioRelay> relay;
    if (stdio.any_relay()) {
        relay.emplace(stdio, p.policy.limits.output, p.policy.limits.fsize);
        for (int fd = 0; fd < 3; ++fd) {
            plan.stdio_fds[fd] = relay->jail_end(fd);
            if (verbose && plan.stdio_fds[fd] >= 0)
                std::fprintf(stderr, "pyjail: fd %d (%s) relayed through a pipe%s\n", fd,
                             stdio_kind_name(stdio_kinds[static_cast<std::size_t>(fd)]),
                             fd == 2 && stdio.stderr_joins_stdout ? " (fd 1's)" : "");
        }
    }

    // The jail's cgroup, if we have one: limits written before the jail exists, and the jail
    // born into it, so not one instruction of it runs outside its limits.
    std::optional<CgroupLeaf> leaf;
    if (p.cgroup.ok) {
        leaf.emplace(p.cgroup, p.limits.cgroup_files);
        facts.cgroup = leaf->relative_path();
        if (verbose) std::fprintf(stderr, "pyjail: cgroup %s\n", leaf->path().c_str());
    } else if (!p.cgroup.why_not.empty() && !p.policy.quiet) {
        std::string fallback;
        for (const auto& e : p.limits.entries)
            if (e.name != "nofile" && e.name != "fsize" && e.name != "output")
                fallback += fmt::format("{}{} {}", fallback.empty() ? "" : ", ", e.name,
                                        e.mechanism == Mechanism::NotEnforced ? "NOT enforced"
                                                                               : "by " + e.detail);
        std::fprintf(stderr, "pyjail: no cgroup v2 for the limits (%s); falling back: %s\n",
                     p.cgroup.why_not.c_str(), fallback.c_str());
    }

    SignalRelay signals;
    // Saved before the jail can touch them, restored however it ends.
    TerminalSettings terminal;

    // root's supplementary groups would follow the jail (setgroups is denied inside it):
    // drop them here, the supervisor does not need them.
    if (::geteuid() == 0 && ::setgroups(0, nullptr) != 0)
        throw JailError("setgroups", "cannot drop supplementary groups", errno);

    double started = monotonic_ms();
    int pidfd = -1;
    CloneArgs args;
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                 CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD;
    args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
    args.exit_signal = SIGCHLD;
    if (leaf) {
        args.flags |= kCloneIntoCgroup;
        args.cgroup = static_cast<std::uint64_t>(leaf->dir_fd());
    }
    std::fflush(nullptr);  // nothing buffered may be written twice
    pid_t pid = sys_clone3(args);
    if (pid < 0) {
        int e = errno;
        throw JailError("namespaces", "cannot create the jail's namespaces", e, namespace_hint(e, ::geteuid() == 0));
    }
    if (pid == 0) run_child(plan);

    JailHandle jail(pidfd);
    child_end.reset();
    if (relay) relay->close_jail_ends();

    // The id maps, when root runs pyjail (otherwise the child writes its own).
    if (!child_maps_itself) {
        const char* failed = "";
        if (int e = write_id_maps(fmt::format("/proc/{}/", pid), p.ids.uid_map, p.ids.gid_map, failed); e != 0)
            throw JailError("id maps",
                            fmt::format("cannot write {} ({} / {})", failed, trim_map(p.ids.uid_map),
                                        trim_map(p.ids.gid_map)),
                            e);
        char go = 1;
        if (::write(parent_end.get(), &go, 1) != 1) throw JailError("sync", "cannot release the jail", errno);
    }

    SuperviseArgs sa;
    sa.pidfd = pidfd;
    sa.sync_fd = parent_end.get();
    sa.signal_fd = signals.fd();
    sa.started_ms = started;
    sa.wall_time = p.policy.wall_time;
    sa.kill_grace = p.policy.kill_grace;
    sa.seccomp = p.seccomp ? &*p.seccomp : nullptr;
    if (leaf) {
        sa.cpu_time = p.policy.limits.cpu_time;
        sa.cpu_usage = [&] { return leaf->cpu_usage_s(); };
        sa.kill_all = [&] { leaf->kill_all(); };
    }
    sa.relay = relay ? &*relay : nullptr;
    Supervised s = supervise_from_parent(sa);
    jail.mark_reaped();
    terminal.restore();
    // What the jail wrote before it ended, as far as our reader takes it in a short while: a
    // stalled reader must not keep pyjail (and the report) waiting.
    std::uint64_t dropped = relay ? relay->finish(StdioRelay::kFinalFlushMs) : 0;
    // Nor may a stalled reader of our own stderr, from here on.
    drop_own_stderr_if_stalled_from_parent(500);
    if (dropped > 0 && !p.policy.quiet)
        std::fprintf(stderr, "pyjail: %llu bytes of the program's output were dropped: "
                             "pyjail's reader did not take them within %.0f s\n",
                     static_cast<unsigned long long>(dropped), StdioRelay::kFinalFlushMs / 1e3);

    facts.outcome = s.outcome;
    facts.denied = s.denied;
    facts.denied_throttled = s.denied_throttled;
    facts.relayed_signal = s.relayed_signal;
    facts.setup_ms = s.setup_ms;
    facts.wall_s = s.wall_s;
    facts.cpu_timeout = s.cpu_timeout;
    facts.output_limit = s.output_limit;
    if (leaf) {
        CgroupStats st = leaf->stats();
        facts.user_s = st.user_s;
        facts.system_s = st.system_s;
        facts.memory_peak = st.memory_peak;
        facts.memory_peak_source = "memory.peak";
        facts.oom_kills = st.oom_kills;
        facts.pids_limit_hits = st.pids_limit_hits;
    }
    facts.usage_partial = usage_is_partial(leaf.has_value(), s.error.has_value(), s.pid1_exited,
                                           s.pid1_code);
    if (!facts.user_s || !facts.memory_peak) {
        // Without a cgroup: what the kernel accounted to our reaped children -- the jail's
        // pid 1 and, through it, every process of the jail it waited for.
        rusage ru{};
        if (::getrusage(RUSAGE_CHILDREN, &ru) == 0) {
            auto secs = [](const timeval& tv) {
                return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
            };
            if (!facts.user_s) {
                facts.user_s = secs(ru.ru_utime);
                facts.system_s = secs(ru.ru_stime);
            }
            if (!facts.memory_peak) {
                facts.memory_peak = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
                facts.memory_peak_source = "ru_maxrss (largest single process)";
            }
        }
    }

    if (s.error) {
        const JailMessage& m = *s.error;
        throw JailError(std::string(child_step_name(m.step)), m.text, m.err, child_step_hint(m.step, m.err),
                        m.exit_code != 0 ? m.exit_code : kExitJailError);
    }
    if (verbose && p.seccomp)
        std::fprintf(stderr, "pyjail: seccomp filter %s\n",
                     p.seccomp_compiled_at.empty()
                         ? "compiled at run time (no filter compiled at build time matches this set)"
                         : ("compiled at build time: " + p.seccomp_compiled_at).c_str());
    if (verbose) std::fprintf(stderr, "pyjail: jail set up in %.2f ms\n", s.setup_ms);
    if (verbose && !s.denied.empty())
        std::fprintf(stderr, "pyjail: denied: %s\n", summarize_denied(s.denied).c_str());
    RunStatus status = classify_run(facts);
    const Limits& l = p.policy.limits;
    std::string what = status_message(status, s.outcome,
                                      {p.policy.wall_time, p.policy.kill_grace, l.cpu_time, l.output});
    if (!what.empty() && !p.policy.quiet && status_message_wanted(status, s.outcome, verbose))
        std::fprintf(stderr, "pyjail: %s\n", what.c_str());
    facts.exit_code = exit_code_for(status, s.outcome);
    return facts.exit_code;
}

}  // namespace pyjail
