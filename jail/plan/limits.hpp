// Resource limits: which kernel mechanism enforces each limit, and with what values. Pure:
// the cgroup files and rlimits are computed here and written by cgroup.cpp and the child.
//
// cgroup v2 is the real mechanism: memory.max (no swap, the whole tree killed on OOM),
// pids.max, cpu.max, counted over the whole jail. Where no delegated cgroup v2 can be had,
// rlimits are the documented fallback: per process (RLIMIT_DATA for memory, RLIMIT_CPU) or
// per user namespace, i.e. per jail (RLIMIT_NPROC, since Linux 5.14), and CPU share cannot be
// limited at all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace pyjail {

struct Limits {
    std::optional<std::uint64_t> memory;       // bytes
    std::optional<std::uint64_t> pids;         // processes and threads
    std::optional<double> cpus;                // CPUs' worth of time per period
    double cpu_time = 0;                       // seconds of CPU, whole tree; 0: none
    std::optional<std::uint64_t> fsize;        // bytes per file written
    std::optional<std::uint64_t> output;       // bytes of stdout+stderr
    std::uint64_t nofile = 1024;               // open files per process
};

enum class Mechanism { CgroupV2, Rlimit, Supervisor, UserNamespace, NotEnforced };
const char* mechanism_name(Mechanism m);

struct RlimitValue {
    int resource;
    std::uint64_t value;  // soft limit, and hard unless `hard` is set
    const char* name;     // "RLIMIT_NOFILE"
    std::uint64_t hard = 0;
};

struct LimitEntry {
    std::string name;      // "memory", "pids", ... as in the report
    std::string value;     // as the report shows it (bytes, count, seconds), text
    Mechanism mechanism;
    std::string detail;    // "memory.max", "RLIMIT_DATA (per process)", ...
    // The same value as a number, for the report's readers to compare without parsing text:
    // whole for "bytes", "count" and "priority", fractional for "seconds" and "cpus".
    const char* unit = "count";
    std::variant<std::uint64_t, double> amount = std::uint64_t{0};
};

// An entry whose text and number are the same value.
LimitEntry limit_entry(std::string name, std::uint64_t amount, const char* unit, Mechanism m, std::string detail);
LimitEntry limit_entry(std::string name, double amount, const char* unit, Mechanism m, std::string detail);

// A limit of the jail's own user namespace: /proc/sys/user/<name>, written by the child while
// it holds CAP_SYS_RESOURCE there. The kernel checks these counts in every namespace up the
// chain, so they cap the jail and leave the host user's own counts to the host user.
struct UsernsLimit {
    const char* name;    // "max_inotify_instances"
    std::uint64_t value;
    bool required;       // false: a kernel without this counter has nothing to count
};

struct LimitPlan {
    std::vector<std::pair<std::string, std::string>> cgroup_files;  // file -> value, in order
    std::vector<RlimitValue> rlimits;                                // set in the child
    std::vector<UsernsLimit> userns_limits;                          // set in the child
    std::vector<LimitEntry> entries;                                 // for the report/explain
};

// Fixed limits of every jail (see plan_fixed_limits in limits.cpp for why each).
constexpr std::uint64_t kMemlockLimit = 64 * 1024;
constexpr std::uint64_t kSigpendingLimit = 1024;
constexpr std::uint64_t kInotifyInstances = 16;
constexpr std::uint64_t kInotifyWatches = 8192;

// `cgroup`: whether a delegated cgroup v2 leaf with the needed controllers is available.
LimitPlan plan_limits(const Limits& limits, bool cgroup);

// The wall-time limit as the report and --explain list it (the supervisor enforces it).
LimitEntry wall_time_entry(double seconds);

// "200000 100000" for 2 CPUs (quota and period in microseconds).
std::string cpu_max_value(double cpus);

}  // namespace pyjail
