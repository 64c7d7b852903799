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
    double wall_s = 0;
    std::optional<double> user_s, system_s;
    std::optional<std::uint64_t> memory_peak;
    std::string memory_peak_source;          // "memory.peak", "ru_maxrss (largest process)"
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

// ok, exit, signal, wall-timeout, cpu-timeout, oom, pids-limit, output-limit,
// seccomp-denied, setup-error.
std::string run_status(const RunFacts& facts);

std::string report_json(const RunFacts& facts);

std::string json_string(const std::string& s);

}  // namespace pyjail
