// The result report: one JSON object per run, for cron jobs and agent frameworks. Pure: the
// facts are gathered by the supervisor, the status and the text are decided here. The field
// names are stable; see README.md ("The result report").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "egress_plan.hpp"
#include "exitstatus.hpp"
#include "limits.hpp"
#include "seccomp.hpp"
#include "stdio.hpp"
#include "sys.hpp"
#include "writable_place.hpp"

namespace pyjail {

// How the jail ended, as the supervisor saw it (supervise.hpp).
struct JailEnd {
    Outcome outcome;
    bool cpu_timeout = false;                // the supervisor killed it for --cpu-time
    bool output_limit = false;               // ... for --output-limit
    DeniedCounts denied;                     // syscalls the filter refused
    std::uint64_t denied_throttled = 0;      // times answering refused syscalls was paused
    int relayed_signal = 0;                  // the first SIGTERM/SIGHUP/SIGINT/SIGQUIT relayed
    double setup_ms = 0;                     // clone to "ready"
    double wall_s = 0;                       // clone to the end of pid 1
    EgressReport egress;                     // --net allow: what was relayed or refused
};

// What the jail used, read after it ended: from its cgroup, or what the kernel accounted to
// pyjail's reaped children.
struct Usage {
    std::optional<double> user_s, system_s;
    std::optional<std::uint64_t> memory_peak;
    std::string memory_peak_source;          // "memory.peak", "ru_maxrss (largest process)"
    std::uint64_t oom_kills = 0;             // memory.events oom_kill (cgroup only)
    std::uint64_t pids_limit_hits = 0;       // pids.events max (cgroup only)
    // CPU and memory figures that miss some of the jail's processes (see usage_is_partial).
    bool usage_partial = false;
};

// Everything the report says: how the jail ended and what it used, as gathered (not copied
// field by field), and what pyjail adds.
struct RunFacts : JailEnd, Usage {
    int exit_code = 0;                       // pyjail's own exit status
    // When pyjail began the run (the realtime clock, milliseconds since the epoch), or none.
    std::optional<std::int64_t> started_unix_ms;
    // The streams the relay stopped writing at a limit (a regular file's --fsize, or
    // --output-limit): the program may end well after, of EPIPE, or not at all.
    std::vector<StreamCut> streams_cut;
    std::vector<LimitEntry> limits;
    std::string cgroup;                      // the jail's cgroup path, or ""
    // The jail's host identity (hostid.hpp): its ids, where they came from, and whose per-uid
    // kernel budgets it shares ("" when none: ids of its own).
    std::optional<std::uint32_t> host_uid, host_gid;
    std::string host_ids;
    std::string budgets_shared_with, budgets_shared_why;
    // The counts the kernel keeps per user namespace (processes, pending signals, inotify,
    // message queues) add up, at the top, to the namespace's creator: pyjail's own uid.
    std::optional<std::uint32_t> counts_charged_to_uid;
    // Set-up errors, or (record_error) a failure to keep the run's record once it was over:
    // the status stays the program's, the error says what failed.
    bool setup_error = false;
    bool record_error = false;
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

// RFC 3339 in UTC with milliseconds: "2026-12-03T18:45:12.345Z".
std::string utc_timestamp_ms(std::int64_t unix_ms);

// Where the report goes (--report FILE, --report-fd N), checked before anything runs so that
// an unwritable report fails the run up front. A FILE is written when the run is over, as a
// new file renamed over FILE: the jail may have had the old one (hostopen.hpp). Not pure:
// report_target.cpp, in the binary.
class ReportTarget {
public:
    // `path` ("" for none) or `fd` (-1 for none). Throws JailError (step "report").
    static ReportTarget open(const std::string& path, int fd);
    // Refuses (JailError, step "report") a FILE the jail could reach through one of
    // `places`, now and again when it is written.
    void keep_out_of(const std::vector<WritablePlace>& places);
    bool wanted() const { return fd_ >= 0 || !path_.empty(); }
    // Failures are said on stderr; returns whether the report was written.
    bool write(const RunFacts& facts) const;

private:
    int fd_ = -1;
    std::string path_;
    std::vector<WritablePlace> places_;
};

}  // namespace pyjail
