// The supervisor's wait: for the jail's messages, the relayed signals, the syscalls the
// filter refused, and the deadlines (--wall-time, --cpu-time, --kill-grace), until the jail's
// pid 1 is gone.
//
// What the jail makes the supervisor do is bounded: refused syscalls go into a fixed-size
// table (DeniedCounts) and are answered at most kDeniedAnswersPerSecond a second. Past that
// the supervisor stops polling the filter's listener until the bucket refills: the jail's
// calling thread sleeps in the kernel, costing nobody CPU, and only the jail is slowed down.
// The loop keeps its timeouts, so no deadline waits for the jail.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "exitstatus.hpp"
#include "protocol.hpp"
#include "report.hpp"
#include "seccomp.hpp"

namespace pyjail {

namespace supervisor {
class StdioRelay;
class EgressRelay;
}

struct Supervised {
    JailEnd end;
    std::optional<JailMessage> error;  // a set-up step failed
    // How pid 1 ended: exited on its own with `pid1_code` (kInitReapedAll: after waiting for
    // every process of the jail), or not (killed).
    bool pid1_exited = false;
    int pid1_code = 0;
    // pid 1's last message: how it ended and the usage of what it waited for.
    std::optional<JailMessage> reaped;
};

struct SuperviseArgs {
    int pidfd = -1;      // the jail's pid 1
    int sync_fd = -1;    // the supervisor's end of the sync socket
    int signal_fd = -1;  // a signalfd of the signals to relay
    double started_ms = 0;
    // A run from a template: over once pid 1 says it reaped every process of the jail
    // (MsgKind::Reaped, kInitReapedAll), not when pid 1 is gone. pid 1 is the template's
    // child: its exit (the run's namespaces torn down) is the template's and the server's to
    // wait for, and the server removes the run's cgroup after it (serve.cpp). Only pid 1
    // holds the socket's other end (the program has none of its descriptors and cannot
    // trace the reaper); a forged Reaped would only end this client, and the server kills a
    // run whose client is gone.
    bool ends_when_reaped = false;
    double wall_time = 0;                 // seconds; 0: none
    // After relaying SIGTERM, SIGHUP or SIGQUIT: seconds until the jail is killed if
    // it is still there (0: at once).
    double kill_grace = 5;
    // pyjail's stdin is a terminal: Ctrl-C three times within two seconds asks the jail to
    // end (interrupts.hpp); `quiet` keeps pyjail's line about it off stderr.
    bool interactive = false;
    bool quiet = false;
    const SeccompSet* seccomp = nullptr;  // decides the error for refused syscalls
    // --cpu-time over the whole jail (cgroup v2): the jail's CPU seconds so far.
    double cpu_time = 0;
    std::function<std::optional<double>()> cpu_usage;
    // The relay of the program's standard streams, if any go through it (relay.hpp): polled
    // in the loop, so a stalled reader never holds up a deadline; --output-limit counts there.
    supervisor::StdioRelay* relay = nullptr;
    // --net allow (egress_relay.hpp): the jail's resolver and connections, polled here too.
    supervisor::EgressRelay* egress = nullptr;
    // cgroup.kill, when there is a cgroup: a kill is then SIGKILL to pid 1 and this. Without
    // one, a kill asks pid 1 to kill and wait for every process of the jail (so that their
    // usage is accounted) and SIGKILLs pid 1 if it is still there kReapAllMs later.
    std::function<void()> kill_all;
};

// Refused syscalls answered a second, on average, and at once.
inline constexpr double kDeniedAnswersPerSecond = 2000;
inline constexpr double kDeniedAnswersBurst = 200;

namespace supervisor {

// Until the jail's pid 1 is gone; reaps it before returning.
Supervised supervise(const SuperviseArgs& args);

}  // namespace supervisor

double monotonic_ms();

}  // namespace pyjail
