// The jail's pid 1 once the program runs: a tiny reaper. It forwards the signals the
// supervisor relays, reaps orphans, reports the program's wait status, and exits when the
// program does -- which makes the kernel kill every process left in the jail.
#pragma once

#include <sys/types.h>

#include <csignal>

namespace pyjail {

[[noreturn]] void run_init_in_child(pid_t program, int report_fd) noexcept;

// The signals the supervisor relays to the program.
inline constexpr int kForwardedSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};

}  // namespace pyjail
