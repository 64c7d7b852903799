#include "exitstatus.hpp"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>

#include "size_text.hpp"

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

std::string_view status_name(RunStatus s) {
    switch (s) {
        case RunStatus::Ok: return "ok";
        case RunStatus::Exit: return "exit";
        case RunStatus::Signal: return "signal";
        case RunStatus::WallTimeout: return "wall-timeout";
        case RunStatus::GraceTimeout: return "grace-timeout";
        case RunStatus::CpuTimeout: return "cpu-timeout";
        case RunStatus::Oom: return "oom";
        case RunStatus::PidsLimit: return "pids-limit";
        case RunStatus::OutputLimit: return "output-limit";
        case RunStatus::SeccompDenied: return "seccomp-denied";
        case RunStatus::SetupError: return "setup-error";
    }
    return "setup-error";
}

int exit_code_for(RunStatus s, const Outcome& o) {
    switch (s) {
        case RunStatus::CpuTimeout: return kExitWallTimeout;
        case RunStatus::SetupError: return kExitJailError;
        // The supervisor killed the jail: as after SIGKILL, whatever pid 1's end looked like
        // (it was reported as a jail that died, which read as pyjail's own error, 125).
        case RunStatus::OutputLimit: return 128 + SIGKILL;
        default: return exit_code_for(o);
    }
}

namespace {
bool segv_under_memory_rlimit(RunStatus s, const Outcome& o, const EndLimits& l) {
    return s == RunStatus::Signal && o.signal == SIGSEGV && l.memory_rlimit.has_value();
}
}  // namespace

std::string status_message(RunStatus s, const Outcome& o, const EndLimits& l) {
    switch (s) {
        case RunStatus::CpuTimeout:
            return fmt::format("CPU time limit of {}s reached; the jail was killed", l.cpu_time);
        case RunStatus::OutputLimit:
            return fmt::format("output limit reached (--output-limit {}); the jail was killed",
                               format_size(l.output.value_or(0)));
        case RunStatus::Oom:
            return "out of memory: the jail reached its memory limit and was killed";
        case RunStatus::SeccompDenied:
            return "the program was killed by the syscall filter (SIGSYS): it made a system call "
                   "through another architecture's entry point (int 0x80 or x32)";
        case RunStatus::Signal:
            if (segv_under_memory_rlimit(s, o, l))
                return fmt::format("{}; --memory {} is a per-process RLIMIT_DATA here (no cgroup v2), "
                                   "which the program may have run out of",
                                   describe(o, l.wall_time, l.kill_grace), format_size(*l.memory_rlimit));
            return describe(o, l.wall_time, l.kill_grace);
        default: return describe(o, l.wall_time, l.kill_grace);
    }
}

bool status_message_wanted(RunStatus s, const Outcome& o, bool verbose, const EndLimits& l) {
    return verbose || s != RunStatus::Signal || o.signal == SIGKILL || segv_under_memory_rlimit(s, o, l);
}

std::string stream_cut_message(const StreamCut& cut, const std::string& chosen_by) {
    if (cut.limit != "fsize") return "";
    // A file is capped as the program's own writes to it would be (RLIMIT_FSIZE); its next
    // write fails (EPIPE), which a program may not report, or not as a limit.
    return fmt::format("{} reached --fsize {}{}; the rest was not written (--fsize SIZE raises it, "
                       "--fsize= lifts it)",
                       cut.stream, format_size(cut.bytes), chosen_by.empty() ? "" : " (" + chosen_by + ")");
}

bool is_terminating_signal(int signal) {
    return signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT;
}

}  // namespace pyjail
