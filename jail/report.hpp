// The result report: one JSON object per run, for cron jobs and agent frameworks. Pure: the
// facts are gathered by the supervisor, the status and the text are decided here. The field
// names are stable; see README.md ("The result report").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exitstatus.hpp"
#include "limits.hpp"
#include "seccomp.hpp"

namespace pyjail {

struct RunFacts {
    Outcome outcome;
    int exit_code = 0;                       // pyjail's own exit status
    bool cpu_timeout = false;
    bool output_limit = false;
    std::uint64_t oom_kills = 0;             // memory.events oom_kill (cgroup only)
    std::uint64_t pids_limit_hits = 0;       // pids.events max (cgroup only)
    DeniedCounts denied;
    std::uint64_t denied_throttled = 0;      // times answering refused syscalls was paused
    int relayed_signal = 0;                  // the first SIGTERM/SIGHUP/SIGINT/SIGQUIT relayed
    double wall_s = 0;
    std::optional<double> user_s, system_s;
    std::optional<std::uint64_t> memory_peak;
    std::string memory_peak_source;          // "memory.peak", "ru_maxrss (largest process)"
    // CPU and memory figures that miss some of the jail's processes (see usage_is_partial).
    bool usage_partial = false;
    double setup_ms = 0;
    std::vector<LimitEntry> limits;
    std::string cgroup;                      // the jail's cgroup path, or ""
    // Set-up errors.
    bool setup_error = false;
    std::string error_step, error_message, error_hint;
    int error_errno = 0;
    std::string profile;
    std::vector<std::string> command;
};

// How the run ended: the one place that decides it. A set-up error wins; then what the
// supervisor did (a time limit's kill); then what the limits saw (RLIMIT_CPU ends a process
// with SIGXCPU); then, for a program that failed, what was refused on the way.
RunStatus classify_run(const RunFacts& facts);

// The report's `status` field: status_name(classify_run(facts)).
std::string run_status(const RunFacts& facts);

// Whether the CPU and memory figures miss processes of the jail. With a cgroup they cover
// the whole jail. Without one they are what the kernel added up over the processes reaped
// by wait(): the jail's pid 1 waits for every process of the jail before it exits (and
// exits 0 then), but the processes the kernel kills and reaps with a pid namespace whose
// init is gone are never accounted anywhere -- when pid 1 was killed, or gave up.
bool usage_is_partial(bool from_cgroup, bool setup_error, bool pid1_exited, int pid1_code);

std::string report_json(const RunFacts& facts);

std::string json_string(const std::string& s);

}  // namespace pyjail
