// The supervisor's wait: for the jail's messages, the relayed signals, the syscalls the
// filter refused, and the wall-time deadline, until the jail's pid 1 is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "exitstatus.hpp"
#include "protocol.hpp"
#include "seccomp.hpp"

namespace pyjail {

class StdioRelay;

struct Supervised {
    Outcome outcome;
    std::optional<JailMessage> error;  // a set-up step failed
    double setup_ms = 0;               // clone to "ready"
    double wall_s = 0;                 // clone to the end of pid 1
    DeniedCounts denied;               // syscalls the filter refused
    bool cpu_timeout = false;
    bool output_limit = false;
};

struct SuperviseArgs {
    int pidfd = -1;      // the jail's pid 1
    int sync_fd = -1;    // the supervisor's end of the sync socket
    int signal_fd = -1;  // a signalfd of the signals to relay
    double started_ms = 0;
    double wall_time = 0;                 // seconds; 0: none
    const SeccompSet* seccomp = nullptr;  // decides the error for refused syscalls
    // --cpu-time over the whole jail (cgroup v2): the jail's CPU seconds so far.
    double cpu_time = 0;
    std::function<std::optional<double>()> cpu_usage;
    // The relay of the program's standard streams, if any go through it (relay.hpp): polled
    // in the loop, so a stalled reader never holds up a deadline; --output-limit counts there.
    StdioRelay* relay = nullptr;
    std::function<void()> kill_all;  // besides SIGKILL to pid 1 (cgroup.kill)
};

// Reaps pid 1 before returning.
Supervised supervise_from_parent(const SuperviseArgs& args);

double monotonic_ms();

}  // namespace pyjail
