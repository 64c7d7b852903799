// The supervisor's wait: for the jail's messages, the relayed signals, the syscalls the
// filter refused, and the wall-time deadline, until the jail's pid 1 is gone.
#pragma once

#include <optional>

#include "exitstatus.hpp"
#include "protocol.hpp"
#include "seccomp.hpp"

namespace pyjail {

struct Supervised {
    Outcome outcome;
    std::optional<JailMessage> error;  // a set-up step failed
    double setup_ms = 0;               // clone to "ready"
    DeniedCounts denied;               // syscalls the filter refused
};

// `pidfd`: the jail's pid 1. `sync_fd`: the supervisor's end of the sync socket.
// `signal_fd`: a signalfd for the signals to relay. `wall_time`: seconds, 0 for none.
// `seccomp`: the set in force (decides the error for refused syscalls), or null.
// Reaps pid 1 before returning.
Supervised supervise_from_parent(int pidfd, int sync_fd, int signal_fd, double wall_time,
                                 double started_ms, const SeccompSet* seccomp);

double monotonic_ms();

}  // namespace pyjail
