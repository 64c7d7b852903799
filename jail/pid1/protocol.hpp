// Messages from the jail to the supervisor over the sync socket (SOCK_SEQPACKET, so each
// message arrives whole). Fixed-size and trivially copyable: the child sends them without
// allocating, and the supervisor never trusts their text to be terminated.
#pragma once

#include <cstdint>

#include "child_step.hpp"

namespace pyjail {

enum class MsgKind : std::uint32_t {
    Error = 1,   // a set-up step failed: step, err, text, exit_code
    Ready = 2,   // the jail is set up; the program is being started. Carries the seccomp
                 // notification fd (SCM_RIGHTS) when there is a filter
    Status = 3,  // the program ended: wait_status
    Reaped = 4,  // pid 1 is about to exit: exit_code (kInitReapedAll or kInitLeftSome) and
                 // the usage of every process it waited for. Read by a supervisor that is not
                 // pid 1's parent (a run from a template) and so cannot wait for it; with
                 // kInitReapedAll it ends that run (supervise.hpp, ends_when_reaped).
    Egress = 5,  // before "ready", --net allow: sockets of the jail's network namespace
                 // (SCM_RIGHTS, up to kMaxPassedFds), the first one's index among the
                 // lock-down's egress_sockets in exit_code
};

// The supervisor's requests to the jail's pid 1, on the same socket (once pid 1 has sent
// "ready"). Not a signal: signals a program can send pid 1 too, and with the pending-signal
// queue full the kernel delivers one without the sender's identity (as if from outside the
// pid namespace), so pid 1 could not tell the program's from the supervisor's. Only the
// supervisor holds the socket's other end.
enum class Pid1Request : std::uint32_t {
    ReapAll = 1,  // kill every process of the jail, wait for each, exit (init.hpp)
};

struct SupervisorRequest {
    Pid1Request kind;
};

// From the supervisor's side, before "ready": the jail's network namespace (SCM_RIGHTS), made
// while pid 1 mounts (network_maker.hpp), or in `err` why there is none (pid 1 then makes
// its own).
struct NetworkHandoff {
    std::int32_t err;
    // Never the size of a SupervisorRequest: a handoff pid 1 did not read (a second one, sent
    // by the supervisor when its helper died just after sending) cannot be taken for one.
    std::int32_t padding = 0;
};
static_assert(sizeof(NetworkHandoff) != sizeof(SupervisorRequest));

struct JailMessage {
    MsgKind kind;
    std::int32_t err;
    std::int32_t wait_status;
    std::int32_t exit_code;
    ChildStep step;  // for Error: the step that failed
    std::int64_t user_us, system_us;  // Reaped: CPU time of the processes pid 1 waited for
    std::int64_t maxrss_kb;           // Reaped: the largest of them
    char text[400];
};

}  // namespace pyjail
