// The jail's pid 1 once the program runs: a tiny reaper. It forwards the signals the
// supervisor relays, reaps orphans, and reports the program's wait status. When the program
// ends, or when the supervisor asks (a kill without a cgroup: --wall-time, --kill-grace,
// ...), it kills every other process of the jail and waits for each before it exits: waited
// for, their CPU time and peak memory add up in pid 1's own accounting, and from there in
// what pyjail reads with RUSAGE_CHILDREN. (Left to the kernel, which kills and reaps them
// when a pid namespace's init exits, their usage would be lost.)
#pragma once

#include <sys/types.h>

#include <csignal>

namespace pyjail {

namespace pid1 {

// pid 1 once the program runs (as `program`): relays signals, reaps, reports the program's
// wait status on `report_fd`, and exits.
[[noreturn]] void run_reaper(pid_t program, int report_fd) noexcept;

}  // namespace pid1

// The signals the supervisor relays to the program.
inline constexpr int kForwardedSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};

// How pid 1 hears the supervisor's requests (protocol.hpp: SupervisorRequest) on its report
// socket: the kernel signals it when one arrives (O_ASYNC; steps.cpp, lock_down), and the
// reaper, which waits for signals, then reads them. SIGIO is sent by the kernel as a
// privileged signal, which a full pending-signal queue does not drop. A program's own
// kill(1, SIGIO) only makes pid 1 find nothing to read.
inline constexpr int kRequestSignal = SIGIO;

// pid 1's exit status when it waited for every process of the jail.
inline constexpr int kInitReapedAll = 0;
// When some were still there after kReapAllMs (the kernel kills them as pid 1 exits).
inline constexpr int kInitLeftSome = 3;
inline constexpr int kReapAllMs = 1000;

}  // namespace pyjail
