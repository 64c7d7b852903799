// How a run ends, and the exit status pyjail returns for it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stdio.hpp"

namespace pyjail {

inline constexpr int kExitWallTimeout = 124;  // as timeout(1)
inline constexpr int kExitJailError = 125;
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;
// `pyjail serve` stopped because the reader of its stdout is gone (its owner died), not because
// it was asked to: 128 + SIGPIPE, what a program whose reader went away ends with, so that a
// supervisor (systemd's Restart=on-failure, a pipeline's pipefail) counts it as a failure.
inline constexpr int kExitServeOwnerGone = 141;

struct Outcome {
    enum class Kind {
        Exited,       // the program exited with `code`
        Signaled,     // the program died of `signal`
        WallTimeout,  // --wall-time expired and the jail was killed
        GraceTimeout, // pyjail relayed `signal` (SIGTERM, ...), the jail outlived --kill-grace
                      // and was killed (SIGKILL)
        JailDied,     // the jail's init died without reporting (killed from outside)
    };
    Kind kind = Kind::Exited;
    int code = 0;
    int signal = 0;
};

// How a run ended: the one decision (classify_run, report.hpp) the report's `status`, pyjail's
// exit code and the line pyjail prints all follow from.
enum class RunStatus {
    Ok,             // the program exited 0
    Exit,           // the program exited non-zero
    Signal,         // the program died of a signal
    WallTimeout,    // --wall-time expired
    GraceTimeout,   // the jail outlived --kill-grace after a relayed SIGTERM/SIGHUP/...
    CpuTimeout,     // --cpu-time: the cgroup's count, or RLIMIT_CPU's SIGXCPU
    Oom,            // the cgroup's memory limit killed a process
    PidsLimit,      // the program failed after the cgroup refused a fork
    OutputLimit,    // --output-limit reached
    SeccompDenied,  // the program was killed by the filter (SIGSYS: a foreign ABI's syscall)
    SetupError,     // the jail could not be set up; the program never ran
};

// The report's `status` value: "ok", "exit", "signal", "wall-timeout", "grace-timeout",
// "cpu-timeout", "oom", "pids-limit", "output-limit", "seccomp-denied", "setup-error".
std::string_view status_name(RunStatus status);

// pyjail's exit status for a run that ended with `status` and the program's `outcome`. Both
// time limits end like timeout(1). (A set-up error exits with its error's own code.)
int exit_code_for(RunStatus status, const Outcome& outcome);

// The limits the message names.
struct EndLimits {
    double wall_time = 0;
    double kill_grace = 0;
    double cpu_time = 0;
    std::optional<std::uint64_t> output;
    // --memory, when it is a per-process RLIMIT_DATA (no cgroup v2): a program that outgrows
    // it often dies of SIGSEGV (its allocator's failure unchecked), which then names it.
    std::optional<std::uint64_t> memory_rlimit;
};

// The one line pyjail prints about how the run ended, or "" for a plain exit.
std::string status_message(RunStatus status, const Outcome& outcome, const EndLimits& limits);

// Whether that line is printed (not under --quiet): a program that died of a signal it may
// have meant (SIGTERM, SIGINT, ...) says so itself, or its shell does; SIGKILL and every
// limit are ours to explain, as is a SIGSEGV that --memory's RLIMIT_DATA may have caused.
bool status_message_wanted(RunStatus status, const Outcome& outcome, bool verbose,
                           const EndLimits& limits = {});

// The line pyjail prints when its relay stopped writing a stream at --fsize, e.g. "stdout
// reached --fsize 64M (the strict profile's); the rest was not written"; `chosen_by` is
// chosen_by (policy.hpp) of the fsize setting. "" for --output-limit, which status_message
// names.
std::string stream_cut_message(const StreamCut& cut, const std::string& chosen_by);

// From the raw wait status of the program (as reported by the jail's init).
Outcome outcome_from_wait_status(int status);

int exit_code_for(const Outcome& outcome);

// For the one line pyjail prints when the program did not simply exit, e.g.
// "killed: wall time limit of 2s reached". Empty for plain exits.
std::string describe(const Outcome& outcome, double wall_time_limit, double kill_grace = 0);

// The signals that ask a program to end (SIGTERM, SIGHUP, SIGQUIT): relaying one starts
// --kill-grace. SIGINT is an interrupt, not a request to end: an interactive interpreter (a
// Session's server, the REPL) catches KeyboardInterrupt and carries on, so it must not be
// killed a grace later. SIGUSR1/2 are relayed without it too (programs use them for other
// things).
bool is_terminating_signal(int signal);

}  // namespace pyjail
