// Which of the host's standard streams the jail may hold as they are, and which go through the
// supervisor's relay (relay.cpp); and how the supervisor writes to each host descriptor without
// ever waiting on its reader. Pure: the kinds come from classify_host_fd (relay.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace pyjail {

// A standard stream the relay stopped writing for the program at a limit: the rest of what
// the program wrote there was dropped.
struct StreamCut {
    std::string stream;     // "stdout", "stderr", or "stdout and stderr" (one file, `> f 2>&1`)
    std::string limit;      // "fsize" (a regular file's size) or "output" (--output-limit)
    std::uint64_t bytes = 0;  // the limit's value
};

// What a host descriptor is, as far as handing it to a jail goes.
enum class StdioKind {
    Closed,
    Pipe,         // a pipe or FIFO
    Socket,
    Tty,
    DevNull,
    Regular,      // a regular file
    Directory,
    CharDevice,   // any character device but a tty or /dev/null
    BlockDevice,
    Other,
};

// How the supervisor writes to a relayed output's host descriptor. None of them changes the
// caller's open file description (O_NONBLOCK there would be seen by every process sharing it).
enum class WriteMethod {
    Plain,    // regular files, block devices: a write never waits for a reader
    NoWait,   // pipes, FIFOs, sockets: pwritev2(RWF_NOWAIT) on the shared description
    Private,  // ttys, other devices: a private description opened O_NONBLOCK through
              // /proc/self/fd (or, where that is refused, writes cut short by a timer)
};

struct StdioStream {
    bool relay = false;  // the jail gets a pipe the supervisor relays; else the host's own fd
    WriteMethod method = WriteMethod::Plain;  // fds 1 and 2, when relayed
};

struct StdioPlan {
    std::array<StdioStream, 3> fd;  // 0, 1, 2
    // fds 1 and 2 are one file (`> log 2>&1`), both relayed: the jail gets one pipe for both,
    // so its writes keep their order; fd 1's relay carries them.
    bool stderr_joins_stdout = false;
    bool any_relay() const { return fd[0].relay || fd[1].relay || fd[2].relay; }
};

// Only pipes, sockets, ttys and /dev/null reach the jail as they are: through a regular file
// the jail could rewrite or truncate the host file (reopening /proc/self/fd/N, ftruncate), a
// directory would lead out of its mount namespace (fchdir), and a device would take its
// ioctls. With an output limit, fds 1 and 2 are always relayed, to count what they carry.
// `stdout_is_stderr`: fds 1 and 2 name the same file, pipe or terminal.
StdioPlan plan_stdio(const std::array<StdioKind, 3>& kinds, bool output_limit,
                     bool stdout_is_stderr = false);

WriteMethod write_method_for(StdioKind kind);

const char* stdio_kind_name(StdioKind kind);

}  // namespace pyjail
