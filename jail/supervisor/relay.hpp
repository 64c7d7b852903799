// The supervisor's relay of the program's standard streams that do not reach the jail as they
// are (stdio.hpp decides which): each goes through a pipe of ours, and the supervisor copies
// between that pipe and its own fd 0, 1 or 2 in the same poll loop as the deadlines.
//
// Nothing in it can block the loop: the supervisor reads its ends of the pipes non-blocking,
// writes to the host only in ways that cannot wait for a reader (stdio.hpp's WriteMethod), and
// holds at most kBufferSize bytes per stream. While a stream's buffer is full it stops reading
// that pipe, so a program that outruns its reader blocks in its own write (backpressure), and
// a stalled reader of pyjail's output never holds up a deadline.
#pragma once

#include <poll.h>
#include <signal.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "stdio.hpp"

namespace pyjail::supervisor {

// What the supervisor's descriptor `fd` is.
StdioKind classify_host_fd(int fd);

// Whether fds `a` and `b` name the same file, pipe, socket or terminal.
bool same_host_object(int a, int b);

// After the run, pyjail's own messages go to its fd 2. A stderr nobody reads (a pipe the
// program's output filled, a stopped terminal) would make such a write wait forever: if fd 2
// takes nothing within `wait_ms`, pyjail's fd 2 becomes /dev/null and they are dropped. Only
// pyjail's own descriptor table changes; the caller's description stays as it was.
void drop_own_stderr_if_stalled(int wait_ms);

class StdioRelay {
public:
    static constexpr int kPollSlots = 6;                 // two per stream
    static constexpr std::size_t kBufferSize = 64 * 1024;  // per stream
    // After the jail's end, what its output left is written for at most this long.
    static constexpr double kFinalFlushMs = 2000;

    // Creates the pipes of the relayed streams (before the jail exists). `output_limit`
    // counts the bytes of fds 1 and 2 together; `file_size_limit` (--fsize) caps a regular
    // file the relay writes for the program, as RLIMIT_FSIZE would the program's own writes.
    // Throws JailError.
    StdioRelay(const StdioPlan& plan, std::optional<std::uint64_t> output_limit,
               std::optional<std::uint64_t> file_size_limit);
    ~StdioRelay();
    StdioRelay(const StdioRelay&) = delete;
    StdioRelay& operator=(const StdioRelay&) = delete;

    // The jail's end of the pipe for fd `i` (0-2), or -1 when the host's own descriptor passes.
    int jail_end(int i) const;
    // In the supervisor once the jail holds its ends: ours must not keep the pipes open.
    void close_jail_ends();

    // One turn of the supervisor's loop: the descriptors to poll (kPollSlots entries, unused
    // ones -1), then what poll said about them. Never blocks.
    void fill_pollfds(pollfd* slots) const;
    void handle(const pollfd* slots);
    bool over_limit() const { return over_; }
    // The streams whose output was dropped at --output-limit or --fsize so far.
    std::vector<StreamCut> cuts() const;

    // The jail is gone: writes what can be written within `budget_ms`, drops the rest, and
    // closes every pipe. Returns the bytes dropped.
    std::uint64_t finish(double budget_ms);

private:
    struct Pump;
    void read_some(Pump& p);
    void write_some(Pump& p);
    void use_bounded_writes(Pump& p);

    std::array<std::unique_ptr<Pump>, 3> pumps_;
    std::optional<std::uint64_t> limit_;
    std::optional<std::uint64_t> file_size_limit_;
    bool stderr_joins_stdout_ = false;
    std::uint64_t total_ = 0;
    bool over_ = false;
    bool alarm_installed_ = false;
    struct sigaction old_alarm_ {};
};

}  // namespace pyjail::supervisor
