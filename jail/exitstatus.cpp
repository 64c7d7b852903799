#include "exitstatus.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>

namespace pyjail {

Outcome outcome_from_wait_status(int status) {
    Outcome o;
    if (WIFEXITED(status)) {
        o.kind = Outcome::Kind::Exited;
        o.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        o.kind = Outcome::Kind::Signaled;
        o.signal = WTERMSIG(status);
    }
    return o;
}

int exit_code_for(const Outcome& o) {
    switch (o.kind) {
        case Outcome::Kind::Exited: return o.code;
        case Outcome::Kind::Signaled: return 128 + o.signal;
        case Outcome::Kind::WallTimeout: return kExitWallTimeout;
        // As a process killed with SIGKILL (timeout(1) --kill-after does the same).
        case Outcome::Kind::GraceTimeout: return 128 + SIGKILL;
        case Outcome::Kind::JailDied: return o.signal != 0 ? 128 + o.signal : kExitJailError;
    }
    return kExitJailError;
}

std::string describe(const Outcome& o, double wall_time_limit, double kill_grace) {
    switch (o.kind) {
        case Outcome::Kind::Exited: return {};
        case Outcome::Kind::Signaled:
            return fmt::format("the program was killed by signal {} (SIG{})", o.signal,
                               sigabbrev_np(o.signal) ? sigabbrev_np(o.signal) : "?");
        case Outcome::Kind::WallTimeout:
            return fmt::format("wall time limit of {}s reached; the jail and every process in it "
                               "were killed",
                               wall_time_limit);
        case Outcome::Kind::GraceTimeout:
            return fmt::format("the jail was still running {}s after SIG{} (--kill-grace); it "
                               "and every process in it were killed",
                               kill_grace, sigabbrev_np(o.signal) ? sigabbrev_np(o.signal) : "?");
        case Outcome::Kind::JailDied:
            return fmt::format("the jail was killed from outside (signal {})", o.signal);
    }
    return {};
}

bool is_terminating_signal(int signal) {
    return signal == SIGTERM || signal == SIGHUP || signal == SIGINT || signal == SIGQUIT;
}

}  // namespace pyjail
