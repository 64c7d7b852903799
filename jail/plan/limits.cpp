#include "limits.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cmath>

namespace pyjail {

const char* mechanism_name(Mechanism m) {
    switch (m) {
        case Mechanism::CgroupV2: return "cgroup-v2";
        case Mechanism::Rlimit: return "rlimit";
        case Mechanism::Supervisor: return "supervisor";
        case Mechanism::UserNamespace: return "user-namespace";
        case Mechanism::NotEnforced: return "not-enforced";
    }
    return "";
}

std::string cpu_max_value(double cpus) {
    constexpr std::uint64_t period = 100000;
    auto quota = static_cast<std::uint64_t>(std::llround(cpus * static_cast<double>(period)));
    if (quota < 1000) quota = 1000;  // the kernel's minimum quota
    return fmt::format("{} {}", quota, period);
}

LimitEntry limit_entry(std::string name, std::uint64_t amount, const char* unit, Mechanism m, std::string detail) {
    return {std::move(name), std::to_string(amount), m, std::move(detail), unit, amount};
}

LimitEntry limit_entry(std::string name, double amount, const char* unit, Mechanism m, std::string detail) {
    return {std::move(name), fmt::format("{}", amount), m, std::move(detail), unit, amount};
}

namespace {

// The limits every jail gets, whatever the policy says (but the number of open files).
void plan_fixed_limits(LimitPlan& p, std::uint64_t nofile) {
    // Always: no core files, a bounded number of open files.
    p.rlimits.push_back({RLIMIT_CORE, 0, "RLIMIT_CORE"});
    p.rlimits.push_back({RLIMIT_NOFILE, nofile, "RLIMIT_NOFILE"});
    p.entries.push_back(limit_entry("nofile", nofile, "count", Mechanism::Rlimit, "RLIMIT_NOFILE"));
    // Never inherited from the invoker: no real-time scheduling (a SCHED_FIFO busy loop would
    // starve the host's CPUs), no raised priority (RLIMIT_NICE 0: no nice value below the
    // current one), and locked memory capped at 64 KiB (locked pages are out of reach of
    // the host's reclaim; CPython and numpy lock nothing).
    p.rlimits.push_back({RLIMIT_RTPRIO, 0, "RLIMIT_RTPRIO"});
    p.rlimits.push_back({RLIMIT_NICE, 0, "RLIMIT_NICE"});
    p.rlimits.push_back({RLIMIT_MEMLOCK, kMemlockLimit, "RLIMIT_MEMLOCK"});
    p.entries.push_back(limit_entry("rtprio", std::uint64_t{0}, "priority", Mechanism::Rlimit, "RLIMIT_RTPRIO"));
    p.entries.push_back(limit_entry("nice", std::uint64_t{0}, "priority", Mechanism::Rlimit, "RLIMIT_NICE"));
    p.entries.push_back(limit_entry("memlock", kMemlockLimit, "bytes", Mechanism::Rlimit, "RLIMIT_MEMLOCK"));
    // Queued signals (sigqueue, real-time signals, POSIX timers) count against the host
    // user's one budget, in every user namespace up the chain: a program that queued signals
    // until the kernel refused took it all, and the host user's own sigqueue() and
    // timer_create() failed. The jail's processes are the receivers, so their rlimit caps
    // what the jail can hold pending; 1024 is far more than a program waits on at once
    // (POSIX asks for 32).
    p.rlimits.push_back({RLIMIT_SIGPENDING, kSigpendingLimit, "RLIMIT_SIGPENDING"});
    p.entries.push_back(limit_entry("sigpending", kSigpendingLimit, "count", Mechanism::Rlimit, "RLIMIT_SIGPENDING"));
    // The jail's user namespace: inotify instances and watches are counted per host user
    // (128 instances by default), so without a cap of its own a jail could take them all and
    // break the host user's file watchers; every watch also pins kernel memory. Namespaces:
    // the filter already refuses to make any, this makes the kernel refuse too.
    p.userns_limits = {
        {"max_inotify_instances", kInotifyInstances, true},
        {"max_inotify_watches", kInotifyWatches, true},
        {"max_fanotify_groups", 0, false},
        {"max_fanotify_marks", 0, false},
        {"max_user_namespaces", 0, true},
        {"max_mnt_namespaces", 0, true},
        {"max_pid_namespaces", 0, true},
        {"max_net_namespaces", 0, true},
        {"max_ipc_namespaces", 0, true},
        {"max_uts_namespaces", 0, true},
        {"max_cgroup_namespaces", 0, true},
        {"max_time_namespaces", 0, false},
    };
    p.entries.push_back(limit_entry("inotify-instances", kInotifyInstances, "count", Mechanism::UserNamespace,
                                    "user.max_inotify_instances"));
    p.entries.push_back(limit_entry("inotify-watches", kInotifyWatches, "count", Mechanism::UserNamespace,
                                    "user.max_inotify_watches"));
    p.entries.push_back(
        limit_entry("namespaces", std::uint64_t{0}, "count", Mechanism::UserNamespace, "user.max_*_namespaces"));
}

// The limits the policy chose: each by the cgroup when there is one, else by an rlimit (a
// weaker one, per process) or the supervisor, or not at all (the entry says which).
void plan_chosen_limits(LimitPlan& p, const Limits& l, bool cgroup) {
    if (l.memory) {
        std::string v = std::to_string(*l.memory);
        if (cgroup) {
            p.cgroup_files.push_back({"memory.max", v});
            // No swap: a limit that can spill to swap is no limit on a loaded host. One OOM
            // kill takes the whole jail, so no half-dead process tree is left running.
            p.cgroup_files.push_back({"memory.swap.max", "0"});
            p.cgroup_files.push_back({"memory.oom.group", "1"});
            p.entries.push_back(limit_entry("memory", *l.memory, "bytes", Mechanism::CgroupV2, "memory.max, memory.swap.max=0"));
        } else {
            // The last resort: per process, and it counts private writable mappings rather
            // than address space, so runtimes that reserve address space still start.
            p.rlimits.push_back({RLIMIT_DATA, *l.memory, "RLIMIT_DATA"});
            p.entries.push_back(limit_entry("memory", *l.memory, "bytes", Mechanism::Rlimit, "RLIMIT_DATA (per process)"));
        }
    }
    if (l.pids) {
        std::string v = std::to_string(*l.pids);
        if (cgroup) {
            p.cgroup_files.push_back({"pids.max", v});
            p.entries.push_back(limit_entry("pids", *l.pids, "count", Mechanism::CgroupV2, "pids.max"));
        } else {
            p.rlimits.push_back({RLIMIT_NPROC, *l.pids, "RLIMIT_NPROC"});
            p.entries.push_back(limit_entry("pids", *l.pids, "count", Mechanism::Rlimit,
                                            "RLIMIT_NPROC (counted per user namespace: per jail)"));
        }
    }
    if (l.cpus) {
        if (cgroup) {
            p.cgroup_files.push_back({"cpu.max", cpu_max_value(*l.cpus)});
            p.entries.push_back(limit_entry("cpus", *l.cpus, "cpus", Mechanism::CgroupV2, "cpu.max"));
        } else {
            p.entries.push_back(limit_entry("cpus", *l.cpus, "cpus", Mechanism::NotEnforced, "needs cgroup v2"));
        }
    }
    if (l.cpu_time > 0) {
        if (cgroup) {
            p.entries.push_back(limit_entry("cpu-time", l.cpu_time, "seconds", Mechanism::CgroupV2,
                                            "cpu.stat usage, whole tree, checked by the supervisor"));
        } else {
            auto secs = static_cast<std::uint64_t>(std::ceil(l.cpu_time));
            // SIGXCPU at the soft limit says why the process ended; SIGKILL a second later
            // if it ignores that.
            p.rlimits.push_back({RLIMIT_CPU, secs, "RLIMIT_CPU", secs + 1});
            p.entries.push_back(limit_entry("cpu-time", l.cpu_time, "seconds", Mechanism::Rlimit,
                                            "RLIMIT_CPU (per process) and the supervisor's sum from /proc (per jail)"));
        }
    }
    if (l.fsize) {
        p.rlimits.push_back({RLIMIT_FSIZE, *l.fsize, "RLIMIT_FSIZE"});
        p.entries.push_back(limit_entry("fsize", *l.fsize, "bytes", Mechanism::Rlimit, "RLIMIT_FSIZE"));
    }
    if (l.output)
        p.entries.push_back(limit_entry("output", *l.output, "bytes", Mechanism::Supervisor,
                                        "stdout and stderr relayed and counted"));
}

}  // namespace

LimitPlan plan_limits(const Limits& l, bool cgroup) {
    LimitPlan p;
    plan_fixed_limits(p, l.nofile);
    plan_chosen_limits(p, l, cgroup);
    return p;
}

LimitEntry wall_time_entry(double seconds) {
    return limit_entry("wall-time", seconds, "seconds", Mechanism::Supervisor, "the whole jail killed at the deadline");
}

}  // namespace pyjail
