// Theory of operation
//
// pyjail is a supervisor (the invoking user, in the host's namespaces) and a jail (a process
// tree in new user, mount, pid, net, ipc, uts and cgroup namespaces). No step needs privileges
// on the host: everything the jail does, it does with the capabilities a new user namespace
// grants its creator, over objects that namespace owns.
//
//   pyjail (setup::, then supervisor::)         the jail: pid1:: (child.cpp), program::
//   1. options + profile -> Policy (policy.cpp)
//   2. setup::prepare_run (prepare.cpp): facts
//      about the host -> one RunPlan (mounts,
//      id maps, argv, env, filter, limits); the
//      script opened with the jail's host user's
//      rights (hostopen.hpp)
//   3. run_jail (this file): the channels (sync
//      socket, stdio relay, signals), the
//      cgroup leaf, the child's plan
//   4. clone3(NEW*)  ------------------------>  writes its own id maps; or, when root runs
//                                              pyjail or the jail has a subordinate id,
//                                              waits on the sync socket while
//   5. (root) write setgroups=deny, uid_map,    the parent writes them
//      gid_map (a user: newuidmap/newgidmap;
//      hostid_lease.hpp), send "go"  ---------> become the jail user, mount plan, pivot_root,
//   5b. a helper makes the network namespace    meanwhile; then enter that network namespace,
//      in the jail's user namespace, sends it   (network_maker.hpp)
//      (network_maker.hpp)  ------------------>
//                                              hostname, lo, rlimits, setsid, close fds,
//                                              drop caps, no_new_privs, (seccomp), "ready",
//                                              fork: pid 2 execs the program,
//                                                    pid 1 reaps and reports
//   6. supervise (supervise.cpp): relay          <- {Error} or {Ready}, then {Status}
//      signals, enforce the limits, reap pid 1
//   7. collect the usage, decide the status
//      (report.cpp: classify_run), exit status
//
// Failures before clone are plain exceptions. After it, the child reports {step, errno,
// text} over the socket and exits; the parent turns that into the same one-line error. The
// child never returns into the parent's frames (it ends in execve or _exit), so no destructor
// of the parent's RAII objects runs twice.
#include "spawn.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cassert>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "child.hpp"
#include "error.hpp"
#include "run_plans.hpp"
#include "run_request.hpp"
#include "template_protocol.hpp"
#include "exitstatus.hpp"
#include "hints.hpp"
#include "hostid_lease.hpp"
#include "hostopen.hpp"
#include "hostroot.hpp"
#include "network_maker.hpp"
#include "init.hpp"
#include "net_hint.hpp"
#include "notice_stamp.hpp"
#include "process_tree.hpp"
#include "egress_relay.hpp"
#include "relay.hpp"
#include "supervise.hpp"
#include "template_binds.hpp"
#include "terminal.hpp"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace pyjail::supervisor {

namespace {

// Kills and reaps the jail if the supervisor leaves before supervising it to the end.
class JailHandle {
public:
    // Who waits for pid 1: we do (a fresh jail, our clone), or the template that forked it.
    enum class Parent { Us, Template };
    JailHandle(int pidfd, pid_t pid, Parent parent) : pidfd_(pidfd), pid_(pid), parent_(parent) {}
    JailHandle(const JailHandle&) = delete;
    JailHandle& operator=(const JailHandle&) = delete;
    ~JailHandle() {
        if (!pidfd_ || reaped_) return;
        sys_pidfd_send_signal(pidfd_.get(), SIGKILL);
        siginfo_t info{};
        while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info,
                        WEXITED) != 0 &&
               errno == EINTR) {
        }
    }
    int pidfd() const { return pidfd_.get(); }
    pid_t pid() const { return pid_; }
    Parent parent() const { return parent_; }
    void mark_reaped() { reaped_ = true; }

private:
    UniqueFd pidfd_;
    pid_t pid_;
    Parent parent_;
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

// Every descriptor between the supervisor and the jail: the sync socket, the relay of the
// standard streams that need one, the relayed signals.
class Channels {
public:
    explicit Channels(const RunPlan& p) {
        if (p.egress) egress.emplace(*p.egress, read_egress_host_facts(p.egress->policy), monotonic_ms());
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
            throw JailError("socketpair", "cannot create the sync socket", errno);
        parent_end.reset(sv[0]);
        child_end.reset(sv[1]);
        // fds 0-2: pipes, sockets, ttys and /dev/null reach the jail as they are (no copy on
        // the common path); anything else, and fds 1 and 2 under --output-limit, through our
        // relay.
        const std::array<StdioKind, 3> kinds{classify_host_fd(0), classify_host_fd(1),
                                             classify_host_fd(2)};
        const Limits& l = p.policy.limits;
        StdioPlan stdio = plan_stdio(kinds, l.output.has_value(), same_host_object(1, 2));
        if (!stdio.any_relay()) return;
        relay.emplace(stdio, l.output, l.fsize);
        for (int fd = 0; fd < 3; ++fd)
            if (p.policy.verbose && relay->jail_end(fd) >= 0)
                std::fprintf(stderr, "pyjail: fd %d (%s) relayed through a pipe%s\n", fd,
                             stdio_kind_name(kinds[static_cast<std::size_t>(fd)]),
                             fd == 2 && stdio.stderr_joins_stdout ? " (fd 1's)" : "");
    }

    // The jail has its ends: ours only from here on.
    void close_jail_ends() {
        child_end.reset();
        if (relay) relay->close_jail_ends();
    }

    UniqueFd parent_end;  // the supervisor's end of the sync socket
    UniqueFd child_end;   // the jail's, until it has it
    std::optional<StdioRelay> relay;
    std::optional<EgressRelay> egress;  // --net allow
    SignalRelay signals;
};

// A writable bind the jail's host user cannot write: say so up front instead of letting the
// program fail later with a bare EACCES. Which binds those are, the plan found out as that
// user (setup::reach_as_host_user): --host-user when root runs pyjail, else the invoking user.
void warn_unwritable_binds(const RunPlan& p) {
    for (const UnwritableBind& b : p.unwritable_binds) {
        if (!p.invoker.is_root()) {
            std::fprintf(stderr,
                         "pyjail: warning: %s: %s is not writable by you, %s: what the program writes "
                         "there will fail (make it writable by you, or bind a directory you can write)\n",
                         b.origin.c_str(), b.source.c_str(), uid_with_name(p.invoker.uid).c_str());
            continue;
        }
        // The fix names a user: the owner, when the jail may write as them (never root).
        std::string fix = b.owner != 0
                              ? fmt::format("its owner is {}: run with --host-user {}, or chown it",
                                            uid_with_name(b.owner), b.owner)
                              : fmt::format("chown it to uid {}, or to a user you name with --host-user",
                                            p.ids.host_uid);
        std::fprintf(stderr,
                     "pyjail: warning: %s: %s is not writable by %s, the jail's host user when "
                     "pyjail runs as root: what the program writes there will fail (%s)\n",
                     b.origin.c_str(), b.source.c_str(), uid_with_name(p.ids.host_uid).c_str(), fix.c_str());
    }
}

// What the plan cannot know without acting on the host (so --explain does none of it): the
// warnings about the plan, and whether this kernel can filter syscalls at all -- failing
// closed, and early.
void check_host_before_run(const RunPlan& p) {
    if (!p.policy.quiet) warn_unwritable_binds(p);
    if (p.seccomp) {
        if (int e = seccomp_user_notif_errno(); e != 0)
            throw JailError("seccomp", "this kernel cannot filter syscalls with user notification",
                            e, child_step_hint(ChildStep::Seccomp, e == EOPNOTSUPP ? EINVAL : e));
    } else if (!p.is_template) {  // loud even under --quiet: the one protection explicitly gone
        std::fprintf(stderr, "pyjail: WARNING: --seccomp off: the program can make every syscall "
                             "the kernel allows in a user namespace\n");
    }
}

void say_no_cgroup(const RunPlan& p);

// The jail's cgroup, if we have one: limits written before the jail exists, and the jail
// born into it, so not one instruction of it runs outside its limits.
void create_cgroup_leaf(const RunPlan& p, std::optional<CgroupLeaf>& leaf, RunFacts& facts) {
    if (p.cgroup.ok) {
        leaf.emplace(p.cgroup, p.limits.cgroup_files);
        facts.cgroup = leaf->relative_path();
        if (p.policy.verbose) std::fprintf(stderr, "pyjail: cgroup %s\n", leaf->path().c_str());
        return;
    }
    say_no_cgroup(p);
}

// Without a cgroup, which limits fell back to what: said by both doors, a fresh run's and a
// template run's.
void say_no_cgroup(const RunPlan& p) {
    if (p.cgroup.ok || p.cgroup.why_not.empty() || p.policy.quiet) return;
    // Once a day by default: a cron job's mail must not repeat it every run (notice.hpp).
    if (!notice_wanted(p.policy.cgroup_notice, p.cgroup.why_not)) return;
    // Only the limits a cgroup would have enforced (as the man page lists them): the fixed
    // rlimits and user-namespace counts are the same with a cgroup, and would only lengthen
    // the line.
    std::string fallback;
    for (const auto& e : p.limits.entries)
        if (e.name == "memory" || e.name == "pids" || e.name == "cpus" || e.name == "cpu-time")
            fallback += fmt::format("{}{} {}", fallback.empty() ? "" : ", ", e.name,
                                    e.mechanism == Mechanism::NotEnforced ? "NOT enforced"
                                                                           : "by " + e.detail);
    std::fprintf(stderr, "pyjail: no cgroup v2 for the limits (%s); falling back: %s%s\n",
                 p.cgroup.why_not.c_str(), fallback.c_str(), cgroup_notice_tail(p.policy.cgroup_notice).c_str());
}

// The report's account of whose kernel budgets the jail uses.
void record_host_ids(const RunPlan& p, const HostIdLease& ids, RunFacts& facts) {
    facts.host_uid = ids.maps().host_uid;
    facts.host_gid = ids.maps().host_gid;
    facts.host_ids = host_id_kind_name(p.host_ids.kind);
    facts.budgets_shared_with = p.host_ids.shared_with;
    facts.budgets_shared_why = p.host_ids.why_shared;
    facts.counts_charged_to_uid = p.invoker.uid;
    if (p.policy.verbose)
        std::fprintf(stderr, "pyjail: host uid %u, gid %u (%s)%s%s\n", *facts.host_uid, *facts.host_gid,
                     facts.host_ids.c_str(), p.host_ids.shared_with.empty() ? "" : ": budgets shared with ",
                     p.host_ids.shared_with.c_str());
}

// What the jail's pid 1 gets: the plan (run_plans.hpp), the ids this jail leased
// (hostid_lease.hpp), and the descriptors it takes over.
ChildPlan build_child_plan(const RunPlan& p, const RunFds& fds, const Channels& ch,
                           const HostIdLease& ids, const std::vector<UniqueFd>& idmapped,
                           char** host_argv) {
    ChildPlan c = plan_child(p);
    c.host_argv = host_argv;
    c.sync_fd = ch.child_end.get();
    c.parent_end_fd = ch.parent_end.get();
    c.own_uid_map.clear();
    c.own_gid_map.clear();
    if (!ids.supervisor_writes_maps()) {  // a user's own ids: the child writes its maps
        c.own_uid_map = ids.maps().uid_map;
        c.own_gid_map = ids.maps().gid_map;
    }
    for (const auto& fd : idmapped) c.source_mount_fds.push_back(fd.get());
    c.drop_groups = p.host_ids.kind == HostIdKind::Subordinate;
    c.script_fd = fds.script.get();
    for (int fd = 0; fd < 3; ++fd) c.stdio_fds[fd] = ch.relay ? ch.relay->jail_end(fd) : -1;
    return c;
}

#ifndef NDEBUG
// The child allocates (child.hpp): safe only if no other thread could hold a lock at clone.
int own_thread_count() {
    std::string status;
    if (!try_read_file("/proc/self/status", status)) return -1;
    auto at = status.find("\nThreads:");
    return at == std::string::npos ? -1 : std::atoi(status.c_str() + at + 9);
}
#endif

// clone3 into new namespaces (and the leaf): the jail's pid 1 runs `child` and never returns
// here. The handle kills and reaps the jail if anything below fails.
JailHandle clone_jail(const RunPlan& p, const ChildPlan& child, const std::optional<CgroupLeaf>& leaf) {
    assert(own_thread_count() == 1 && "pyjail must be single-threaded when it clones the jail");
    int pidfd = -1;
    CloneArgs args;
    // The network namespace comes beside pid 1's mounts (network_maker.hpp), not in this call.
    args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
                 CLONE_NEWCGROUP | CLONE_PIDFD;
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
        throw JailError("namespaces", "cannot create the jail's namespaces", e,
                        namespace_hint(e, p.invoker.is_root()));
    }
    if (pid == 0) pid1::run(child);
    return JailHandle(pidfd, pid, JailHandle::Parent::Us);
}

// The id maps, when the supervisor writes them (root; a user's subordinate ids through the
// helpers), and "go"; otherwise the child wrote its own.
void release_jail(const HostIdLease& ids, const JailHandle& jail, const Channels& ch) {
    if (!ids.supervisor_writes_maps()) return;
    ids.write_maps(jail.pid());
    char go = 1;
    if (::write(ch.parent_end.get(), &go, 1) != 1)
        throw JailError("sync", "cannot release the jail", errno);
}

Supervised supervise_jail(const RunPlan& p, const JailHandle& jail, Channels& ch,
                          std::optional<CgroupLeaf>& leaf, double started_ms) {
    SuperviseArgs sa;
    sa.pidfd = jail.pidfd();
    sa.sync_fd = ch.parent_end.get();
    sa.signal_fd = ch.signals.fd();
    sa.started_ms = started_ms;
    sa.ends_when_reaped = jail.parent() == JailHandle::Parent::Template;
    sa.wall_time = p.policy.wall_time;
    sa.kill_grace = p.policy.kill_grace;
    sa.interactive = ::isatty(STDIN_FILENO) == 1;
    sa.quiet = p.policy.quiet;
    sa.seccomp = p.seccomp ? &*p.seccomp : nullptr;
    if (leaf) {
        sa.cpu_time = p.policy.limits.cpu_time;
        sa.cpu_usage = [&] { return leaf->cpu_usage_s(); };
        sa.kill_all = [&] { leaf->kill_all(); };
    } else {
        // The rlimit fallback: RLIMIT_CPU bounds each process alone, so the supervisor sums
        // the whole tree's (pid 1 and all below it) as cpu.stat would. Its pid from the pidfd,
        // not from a template's reply: the kernel's word for the process we watch. Read at
        // the first check (100 ms in), not on the start's path.
        sa.cpu_time = p.policy.limits.cpu_time;
        sa.cpu_usage = [pidfd = jail.pidfd()]() -> std::optional<double> {
            std::optional<long> pid1 = fdinfo_number(pidfd, "Pid");
            if (!pid1 || *pid1 <= 0) return std::nullopt;  // gone
            return process_tree_cpu_s(static_cast<pid_t>(*pid1));
        };
    }
    sa.relay = ch.relay ? &*ch.relay : nullptr;
    sa.egress = ch.egress ? &*ch.egress : nullptr;
    return supervise(sa);
}

// What the jail wrote before it ended, as far as our reader takes it in a short while: a
// stalled reader must not keep pyjail (and the report) waiting.
void finish_output(const RunPlan& p, Channels& ch) {
    std::uint64_t dropped = ch.relay ? ch.relay->finish(StdioRelay::kFinalFlushMs) : 0;
    // Nor may a stalled reader of our own stderr, from here on.
    drop_own_stderr_if_stalled(500);
    if (dropped > 0 && !p.policy.quiet)
        std::fprintf(stderr, "pyjail: %llu bytes of the program's output were dropped: "
                             "pyjail's reader did not take them within %.0f s\n",
                     static_cast<unsigned long long>(dropped), StdioRelay::kFinalFlushMs / 1e3);
}

// --net allow: every connection still open is closed and counted; the report's account.
void finish_egress(Channels& ch, Supervised& s) {
    if (!ch.egress) return;
    ch.egress->finish();
    s.end.egress = ch.egress->report();
}

// The jail's CPU time and peak memory: the cgroup's, or what the kernel accounted to our
// reaped children.
Usage collect_usage(const std::optional<CgroupLeaf>& leaf, const Supervised& s) {
    Usage u;
    if (leaf) {
        CgroupStats st = leaf->stats();
        u.user_s = st.user_s;
        u.system_s = st.system_s;
        u.memory_peak = st.memory_peak;
        u.memory_peak_source = "memory.peak";
        u.oom_kills = st.oom_kills;
        u.pids_limit_hits = st.pids_limit_hits;
    }
    u.usage_partial = usage_is_partial(leaf.has_value(), s.error.has_value(), s.pid1_exited,
                                       s.pid1_code);
    if (u.user_s && u.memory_peak) return u;
    // Without a cgroup: the jail's pid 1 and, through it, every process of the jail it
    // waited for.
    rusage ru{};
    if (::getrusage(RUSAGE_CHILDREN, &ru) != 0) return u;
    auto secs = [](const timeval& tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    };
    if (!u.user_s) {
        u.user_s = secs(ru.ru_utime);
        u.system_s = secs(ru.ru_stime);
    }
    if (!u.memory_peak) {
        u.memory_peak = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
        u.memory_peak_source = "ru_maxrss (largest single process)";
    }
    return u;
}

// A set-up step of the jail failed: its error, with the fix where we know it.
[[noreturn]] void throw_child_error(const JailMessage& m, const RunFacts& facts) {
    // Who the jail is on the host: the rights a rootfs or a bind lacked are this id's.
    std::string who =
        facts.host_uid ? uid_with_name(*facts.host_uid, "an id of the jail's own, with others' rights") : "";
    std::string hint = child_step_hint(m.step, m.err, who);
    // pivot_root's EINVAL has one cause a user can act on: the host's / is the initramfs.
    if (m.step == ChildStep::PivotRoot && m.err == EINVAL) {
        std::string mountinfo;
        if (try_read_file("/proc/self/mountinfo", mountinfo) && root_is_initramfs(mountinfo))
            hint = kInitramfsRootHint;
    }
    throw JailError(std::string(child_step_name(m.step)), m.text, m.err, hint,
                    m.exit_code != 0 ? m.exit_code : kExitJailError);
}

// The limits the lines about the run's end name; --memory only where it is RLIMIT_DATA.
EndLimits end_limits(const RunPlan& p) {
    const Limits& l = p.policy.limits;
    EndLimits e{p.policy.wall_time, p.policy.kill_grace, l.cpu_time, l.output, std::nullopt};
    for (const auto& entry : p.limits.entries)
        if (entry.name == "memory" && entry.mechanism == Mechanism::Rlimit) e.memory_rlimit = l.memory;
    return e;
}

// How the run ended, said once: the child's set-up error, or the status, its line on stderr
// and pyjail's exit status.
int report_end(const RunPlan& p, const Supervised& s, RunFacts& facts) {
    if (s.error) throw_child_error(*s.error, facts);
    const bool verbose = p.policy.verbose;
    if (verbose && p.seccomp)
        std::fprintf(stderr, "pyjail: seccomp filter %s\n",
                     p.seccomp_compiled_at.empty()
                         ? "compiled at run time (no filter compiled at build time matches this set)"
                         : ("compiled at build time: " + p.seccomp_compiled_at).c_str());
    if (verbose) std::fprintf(stderr, "pyjail: jail set up in %.2f ms\n", s.end.setup_ms);
    if (verbose && !s.end.denied.empty())
        std::fprintf(stderr, "pyjail: denied: %s\n", summarize_denied(s.end.denied).c_str());
    for (const auto& cut : facts.streams_cut)
        if (std::string line = stream_cut_message(cut, chosen_by(setting(p.policy.settings, "fsize")));
            !line.empty() && !p.policy.quiet)
            std::fprintf(stderr, "pyjail: %s\n", line.c_str());
    RunStatus status = classify_run(facts);
    const EndLimits limits = end_limits(p);
    std::string what = status_message(status, s.end.outcome, limits);
    if (!what.empty() && !p.policy.quiet && status_message_wanted(status, s.end.outcome, verbose, limits))
        std::fprintf(stderr, "pyjail: %s\n", what.c_str());
    facts.exit_code = exit_code_for(status, s.end.outcome);
    if (std::string hint = missing_network_hint(p.policy.net, s.end.denied, facts.exit_code != 0,
                                                chosen_by(setting(p.policy.settings, "net")));
        !hint.empty() && !p.policy.quiet)
        std::fprintf(stderr, "pyjail: %s\n", hint.c_str());
    if (std::string hint = egress_refusals_hint(s.end.egress, facts.exit_code != 0);
        !hint.empty() && !p.policy.quiet)
        std::fprintf(stderr, "pyjail: %s\n", hint.c_str());
    return facts.exit_code;
}

// Both doors from here on, once the jail's pid 1 exists (a fresh jail's clone, or a run the
// template forked): supervised until it is gone, then the output flushed, the relay's
// decisions, the usage (`usage`: where each door reads it) and how the run ended.
int supervise_to_the_end(const RunPlan& p, JailHandle& jail, Channels& channels,
                         std::optional<CgroupLeaf>& leaf, TerminalSettings& terminal,
                         double started_ms, RunFacts& facts,
                         Usage (*usage)(const std::optional<CgroupLeaf>&, const Supervised&)) {
    Supervised s = supervise_jail(p, jail, channels, leaf, started_ms);
    jail.mark_reaped();
    // The jail is gone, however it ended: so are the mount points its pid 1 made in host
    // directories (an empty file or directory in the user's, for each bind inside a --workdir).
    std::optional<HostUserIds> host_user;
    if (p.invoker.is_root()) host_user = HostUserIds{p.host_ids.files_uid, p.host_ids.files_gid};
    setup::remove_host_mount_points(p.mounts.host_mount_points, host_user);
    terminal.restore();
    finish_output(p, channels);
    finish_egress(channels, s);
    static_cast<JailEnd&>(facts) = s.end;
    static_cast<Usage&>(facts) = usage(leaf, s);
    if (channels.relay) facts.streams_cut = channels.relay->cuts();
    return report_end(p, s, facts);
}

}  // namespace

int run_jail(const PreparedRun& prepared, char** host_argv, RunFacts& facts) {
    const RunPlan& p = prepared.plan;
    facts.limits = p.limits.entries;
    check_host_before_run(p);
    Channels channels(p);
    std::optional<CgroupLeaf> leaf;
    create_cgroup_leaf(p, leaf, facts);
    // The jail's host ids: held until the jail is gone (declared before its handle).
    const HostIdLease ids(p.host_ids);
    record_host_ids(p, ids, facts);
    // root's supplementary groups would follow the jail (setgroups is denied inside it):
    // drop them here, the supervisor does not need them.
    if (p.invoker.is_root() && ::setgroups(0, nullptr) != 0)
        throw JailError("setgroups", "cannot drop supplementary groups", errno);
    const std::vector<UniqueFd> idmapped = ids.idmapped_sources(p.mounts);
    const ChildPlan child = build_child_plan(p, prepared.fds, channels, ids, idmapped, host_argv);

    // Saved before the jail can touch them, restored however it ends.
    TerminalSettings terminal;

    const double started_ms = monotonic_ms();
    JailHandle jail = clone_jail(p, child, leaf);
    channels.close_jail_ends();
    release_jail(ids, jail, channels);
    send_jail_network(jail.pidfd(), channels.parent_end.get());

    return supervise_to_the_end(p, jail, channels, leaf, terminal, started_ms, facts, collect_usage);
}


namespace {

// A connection to `pyjail serve`, and what it said first.
struct ServeConnection {
    UniqueFd fd;
    ServeHello hello{};
};

std::string via_hint(const std::string& socket) {
    return fmt::format("is `pyjail serve --socket {}` running, and yours?", socket);
}

ServeConnection connect_to_server(const std::string& socket) {
    ServeConnection c;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket.size() >= sizeof addr.sun_path)
        throw UsageError(fmt::format("--via: the socket path is longer than {} bytes", sizeof addr.sun_path - 1));
    std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
    c.fd.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!c.fd) throw JailError("via", "cannot create a socket", errno);
    if (::connect(c.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        throw JailError("via", fmt::format("cannot connect to the template at {}", socket), errno,
                        via_hint(socket));
    // Attack: another local user listens at this path (a shared directory, or the name of a
    // server that stopped). Before anything is sent or believed, the server must be this
    // user's or root's: the listener's credentials, which its owner cannot forge.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c.fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        throw JailError("via", fmt::format("cannot tell who listens at {}", socket), errno, via_hint(socket));
    if (!trusted_serve_peer(cred.uid, ::geteuid()))
        throw JailError("via",
                        fmt::format("the server at {} runs as uid {}, neither this user nor root", socket, cred.uid),
                        0, "start your own `pyjail serve`, with its --socket in a directory only you can write");
    ssize_t n;
    do n = ::recv(c.fd.get(), &c.hello, sizeof c.hello, 0);
    while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof c.hello) || c.hello.version != kServeProtocolVersion)
        throw JailError("via", fmt::format("{} did not answer as a pyjail server of this version", socket),
                        n < 0 ? errno : 0, "restart `pyjail serve` with this pyjail");
    c.hello.rootfs[sizeof c.hello.rootfs - 1] = '\0';
    c.hello.why_not[sizeof c.hello.why_not - 1] = '\0';
    c.hello.refused[sizeof c.hello.refused - 1] = '\0';
    if (c.hello.refused[0] != '\0')
        throw JailError("via", fmt::format("the server at {} takes no run now: {}", socket, c.hello.refused));
    return c;
}

}  // namespace

namespace {

// What a run from this server cannot be (not Python, another rootfs), and the report's account
// of the budgets it shares with its template.
void check_via_plan(const RunPlan& p, const ServeConnection& server, const std::string& socket, RunFacts& facts) {
    facts.limits = p.limits.entries;
    // The user namespace is the template's: it may hold its runs' namespaces, and a run holds
    // no capability to create one (nor may its filter's clone and unshare).
    for (auto& e : facts.limits)
        if (e.name == "namespaces") e.detail = "user.max_user_namespaces (the template's); no capability for others";
    // The run's host ids are the template's: only its user namespace is its own (run_userns.hpp).
    facts.host_ids = "template";
    facts.budgets_shared_with = "the template and its other runs";
    facts.budgets_shared_why = "a run from a template keeps the template's host ids";
    if (p.command.exec_path.rfind("python") == std::string::npos)
        throw UsageError(fmt::format("--via runs Python programs only, not {}", p.command.exec_path),
                         "run it as `pyjail --via SOCKET -- python ...`, or without --via");
    char real[PATH_MAX];
    if (::realpath(p.rootfs.c_str(), real) == nullptr || std::string(real) != server.hello.rootfs)
        throw UsageError(fmt::format("--via: the template at {} runs the rootfs {}; this run asks for {}",
                                     socket, server.hello.rootfs, p.rootfs),
                         "give the --rootfs (or profile) the server was started with");
}

// The request's descriptors, in request_fd_count's order: the report socket, fds 0-2 (or
// their relay), the script, the host binds' trees.
std::vector<int> via_fds(const Channels& channels, const RunFds& run_fds, const std::vector<UniqueFd>& bind_trees) {
    std::vector<int> fds = {channels.child_end.get()};
    for (int fd = 0; fd < 3; ++fd) {
        int relayed = channels.relay ? channels.relay->jail_end(fd) : -1;
        fds.push_back(relayed >= 0 ? relayed : fd);
    }
    if (run_fds.script) fds.push_back(run_fds.script.get());
    for (const auto& tree : bind_trees) fds.push_back(tree.get());
    return fds;
}

// Waits for the server's reply to a request, or a relayed signal, or the run's wall time.
// Attack (or a stalled template): a template that never answers held its clients for ever,
// deaf to Ctrl-C (the relayed signals are blocked for the signalfd). A run cannot outlast its
// wall time, so neither does its start; a signal ends the client, and with it the request
// (the server kills a run whose client left).
void await_via_reply(int server_fd, int signal_fd, double wall_time, const std::string& socket) {
    const double deadline = wall_time > 0 ? monotonic_ms() + wall_time * 1000 : 0;
    for (;;) {
        pollfd fds[2] = {{server_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
        const double left = deadline > 0 ? deadline - monotonic_ms() : -1;
        if (deadline > 0 && left <= 0)
            throw JailError("via",
                            fmt::format("the template at {} did not start the run within its wall time ({} s)",
                                        socket, wall_time),
                            0, "the server's stderr says why; stop it and start it again");
        int n = ::poll(fds, 2, deadline > 0 ? static_cast<int>(std::ceil(left)) : -1);
        if (n < 0 && errno != EINTR) throw JailError("via", "poll", errno);
        if (n > 0 && fds[0].revents != 0) return;
        signalfd_siginfo si{};
        if (n > 0 && fds[1].revents != 0 && ::read(signal_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si))
            throw JailError("via",
                            fmt::format("SIG{} before the template at {} started the run: it was not run",
                                        ::sigabbrev_np(static_cast<int>(si.ssi_signo)), socket),
                            0, {}, 128 + static_cast<int>(si.ssi_signo));
    }
}

// Sends the request and waits for the run's pid 1: its pidfd, and the server's reply.
TemplateReply start_via_run(const ServeConnection& server, const std::string& socket, const std::string& bytes,
                            const std::vector<int>& fds, const Channels& channels, double wall_time,
                            UniqueFd& pidfd) {
    if (int e = send_with_fds(server.fd.get(), bytes.data(), bytes.size(), fds.data(), static_cast<int>(fds.size()));
        e != 0)
        throw JailError("via", fmt::format("cannot send the run to {}", socket), e, via_hint(socket));
    await_via_reply(server.fd.get(), channels.signals.fd(), wall_time, socket);
    TemplateReply reply{};
    int got = -1;
    ssize_t n;
    do n = recv_with_fd(server.fd.get(), &reply, sizeof reply, got, 0);
    while (n < 0 && errno == EINTR);
    pidfd.reset(got);
    reply.text[sizeof reply.text - 1] = '\0';
    if (n != static_cast<ssize_t>(sizeof reply))
        throw JailError("via", fmt::format("the server at {} ended before the run started", socket),
                        n < 0 ? errno : 0, "its stderr says why");
    if (reply.kind != TemplateReplyKind::Started || !pidfd) {
        // The server's refusal in a fresh run's form: the step that failed, its errno, the fix.
        reply.step[sizeof reply.step - 1] = '\0';
        reply.hint[sizeof reply.hint - 1] = '\0';
        throw JailError(reply.step[0] != '\0' ? reply.step : "via",
                        fmt::format("the template at {} cannot start the run: {}", socket, reply.text), reply.err,
                        reply.hint);
    }
    return reply;
}

// Without a cgroup, the run's usage as its pid 1 reported it: the supervisor is not its
// parent, so RUSAGE_CHILDREN does not count it.
Usage via_usage(const std::optional<CgroupLeaf>& leaf, const Supervised& s) {
    Usage u = collect_usage(leaf, s);
    if (!leaf && s.reaped) {
        u.user_s = static_cast<double>(s.reaped->user_us) / 1e6;
        u.system_s = static_cast<double>(s.reaped->system_us) / 1e6;
        u.memory_peak = static_cast<std::uint64_t>(s.reaped->maxrss_kb) * 1024;
        u.memory_peak_source = "ru_maxrss (largest single process)";
    }
    return u;
}

}  // namespace

int run_via(const std::string& socket, Policy policy, const DataDirs& dirs, char** host_argv, RunFacts& facts,
            const std::function<void(int)>& on_script) {
    (void)host_argv;
    // Before anything reaches the server: an option the run cannot honour fails here.
    if (!policy.command.empty() && is_python_name(policy.command[0])) (void)plan_template_command(policy.command);
    // --net allow: the run's pid 1 binds its resolver and listeners in the run's own network
    // namespace (forked_run.cpp, lock_down) and hands them to us over the report socket; we
    // relay as a fresh jail's supervisor does (Channels, supervise_jail, finish_egress).
    ServeConnection server = connect_to_server(socket);
    CgroupSite site;
    site.ok = server.hello.cgroup_ok != 0;
    site.why_not = server.hello.why_not;
    const PreparedRun prepared = setup::prepare_run(std::move(policy), dirs, &site);
    const RunPlan& p = prepared.plan;
    check_via_plan(p, server, socket, facts);
    check_host_before_run(p);
    if (prepared.fds.script && on_script) on_script(prepared.fds.script.get());
    RunRequest request = plan_run_request(p, static_cast<bool>(prepared.fds.script));
    std::string bytes = encode_request(request);
    if (bytes.size() > kMaxRequestBytes)
        throw UsageError(fmt::format("--via: the command and environment take {} bytes, more than {}",
                                     bytes.size(), kMaxRequestBytes),
                         "put the program in a file instead of -c");
    Channels channels(p);
    // The host binds' sources, opened with this client's rights (template_binds.hpp).
    const std::vector<UniqueFd> bind_trees =
        setup::open_handed_binds(request, p.policy, p.host_ids.files_uid, p.host_ids.files_gid);

    TerminalSettings terminal;
    const double started_ms = monotonic_ms();
    UniqueFd pidfd;
    const TemplateReply reply = start_via_run(server, socket, bytes, via_fds(channels, prepared.fds, bind_trees),
                                              channels, p.policy.wall_time, pidfd);
    if (reply.restarted != 0 && !p.policy.quiet)
        std::fprintf(stderr, "pyjail: the template at %s had ended; it was started again for this run\n",
                     socket.c_str());
    channels.close_jail_ends();
    say_no_cgroup(p);

    // The run's leaf, made (and removed, when this connection closes) by the server.
    std::optional<CgroupLeaf> leaf;
    if (p.cgroup.ok && reply.text[0] == '/') {
        leaf.emplace(std::string(reply.text), std::string(), CgroupLeaf::Observed{});
        facts.cgroup = leaf->path();
    }
    // The run's pid 1 is the template's child, not ours: the supervisor watches it through
    // the pidfd, reads how it ended from its messages, and kills it through the pidfd.
    JailHandle jail(pidfd.release(), reply.pid, JailHandle::Parent::Template);
    return supervise_to_the_end(p, jail, channels, leaf, terminal, started_ms, facts, via_usage);
}

}  // namespace pyjail::supervisor
