// How a run ends, and the exit status pyjail returns for it.
#pragma once

#include <string>

namespace pyjail {

inline constexpr int kExitWallTimeout = 124;  // as timeout(1)
inline constexpr int kExitJailError = 125;
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

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

// From the raw wait status of the program (as reported by the jail's init).
Outcome outcome_from_wait_status(int status);

int exit_code_for(const Outcome& outcome);

// For the one line pyjail prints when the program did not simply exit, e.g.
// "killed: wall time limit of 2s reached". Empty for plain exits.
std::string describe(const Outcome& outcome, double wall_time_limit, double kill_grace = 0);

// The signals that ask a program to end (SIGTERM, SIGHUP, SIGINT, SIGQUIT): relaying one
// starts --kill-grace. SIGUSR1/2 are relayed without it (programs use them for other things).
bool is_terminating_signal(int signal);

}  // namespace pyjail
