#include "relay.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "error.hpp"
#include "sys.hpp"

namespace pyjail::supervisor {

namespace {

// How long one write to a descriptor that can be neither reopened non-blocking nor written
// with RWF_NOWAIT may wait before the timer cuts it short.
constexpr long kBoundedWriteUs = 20'000;

double now_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Our pipe ends live above 2, so that no dup2 onto fds 0-2 in the child can overwrite another
// of them, and so that none of them is mistaken for a host stream when one of those is closed.
int above_stdio(int fd) {
    if (fd > 2) return fd;
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    ::close(fd);
    errno = e;
    return moved;
}

// A write that the timer interrupts if it waits: the timer repeats, so even an expiry just
// before write() starts does not leave it blocked. Returns what write() returns (-1 with
// EINTR: nothing could be written in time).
ssize_t write_bounded(int fd, const char* data, std::size_t len) {
    itimerval tick{{0, kBoundedWriteUs}, {0, kBoundedWriteUs}};
    ::setitimer(ITIMER_REAL, &tick, nullptr);
    ssize_t n = ::write(fd, data, len);
    int e = errno;
    itimerval off{};
    ::setitimer(ITIMER_REAL, &off, nullptr);
    errno = e;
    return n;
}

}  // namespace

StdioKind classify_host_fd(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return StdioKind::Closed;
    switch (st.st_mode & S_IFMT) {
        case S_IFIFO: return StdioKind::Pipe;
        case S_IFSOCK: return StdioKind::Socket;
        case S_IFREG: return StdioKind::Regular;
        case S_IFDIR: return StdioKind::Directory;
        case S_IFBLK: return StdioKind::BlockDevice;
        case S_IFCHR: {
            termios t{};
            if (::tcgetattr(fd, &t) == 0) return StdioKind::Tty;
            if (st.st_rdev == ::makedev(1, 3)) return StdioKind::DevNull;
            return StdioKind::CharDevice;
        }
        default: return StdioKind::Other;
    }
}

void drop_own_stderr_if_stalled(int wait_ms) {
    pollfd p{2, POLLOUT, 0};
    int n;
    do n = ::poll(&p, 1, wait_ms);
    while (n < 0 && errno == EINTR);
    if (n != 0) return;  // writable, or not open at all
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null < 0) return;
    ::dup2(null, 2);
    ::close(null);
}

bool same_host_object(int a, int b) {
    struct stat sa {}, sb {};
    if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// One relayed stream. fd 0: the host's stdin -> `ours` (the write end of the jail's stdin
// pipe). fds 1, 2: `ours` (the read end of the jail's pipe) -> the host's fd 1 or 2.
struct StdioRelay::Pump {
    int index = 0;
    UniqueFd jail_end;      // handed to the jail, closed here once it holds it
    UniqueFd ours;          // O_NONBLOCK: this description is ours alone
    UniqueFd private_host;  // WriteMethod::Private: our own description of the host's fd
    WriteMethod method = WriteMethod::Plain;
    bool bounded = false;   // writes to the host's fd cut short by the timer
    bool capped_file = false;  // a regular file under --fsize
    bool appends = false;      // ... opened O_APPEND: writes go to its end
    const char* cut_by = nullptr;  // "fsize" or "output": a limit dropped some of its bytes
    std::unique_ptr<char[]> buf{new char[kBufferSize]};
    std::size_t start = 0, end = 0;
    bool source_done = false;  // EOF or an error on the side we read
    bool closed = false;

    bool input() const { return index == 0; }
    int source() const { return input() ? 0 : ours.get(); }
    int sink() const {
        if (input()) return ours.get();
        return private_host ? private_host.get() : index;
    }
    bool has_room() const { return end < kBufferSize || start > 0; }
    void close() {
        ours.reset();
        private_host.reset();
        start = end = 0;
        closed = true;
    }
};

StdioRelay::StdioRelay(const StdioPlan& plan, std::optional<std::uint64_t> output_limit,
                       std::optional<std::uint64_t> file_size_limit)
    : limit_(output_limit),
      file_size_limit_(file_size_limit),
      stderr_joins_stdout_(plan.stderr_joins_stdout) {
    for (int i = 0; i < 3; ++i) {
        const StdioStream& s = plan.fd[static_cast<std::size_t>(i)];
        if (!s.relay || (i == 2 && plan.stderr_joins_stdout)) continue;
        auto p = std::make_unique<Pump>();
        p->index = i;
        p->method = s.method;
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0)
            throw JailError("stdio", fmt::format("cannot create the pipe for fd {}", i), errno);
        UniqueFd r(above_stdio(fds[0])), w(above_stdio(fds[1]));
        if (!r || !w) throw JailError("stdio", fmt::format("cannot create the pipe for fd {}", i), errno);
        p->jail_end = i == 0 ? std::move(r) : std::move(w);
        p->ours = i == 0 ? std::move(w) : std::move(r);
        // Non-blocking on our end only: the two ends of a pipe are separate descriptions.
        if (::fcntl(p->ours.get(), F_SETFL, O_NONBLOCK) != 0)
            throw JailError("stdio", "cannot make the relay's pipe non-blocking", errno);
        if (i > 0 && p->method == WriteMethod::Private) {
            // A description of our own, opened anew through /proc: O_NONBLOCK on it is
            // invisible to the caller and everyone else sharing fd N's description (setting
            // it there would break a shell that reads the same terminal after us).
            p->private_host.reset(::open(fmt::format("/proc/self/fd/{}", i).c_str(),
                                         O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
            if (!p->private_host) use_bounded_writes(*p);  // e.g. another user's terminal
        }
        struct stat st {};
        if (i > 0 && file_size_limit_ && ::fstat(i, &st) == 0 && S_ISREG(st.st_mode)) {
            p->capped_file = true;
            int flags = ::fcntl(i, F_GETFL);
            p->appends = flags >= 0 && (flags & O_APPEND) != 0;
        }
        pumps_[static_cast<std::size_t>(i)] = std::move(p);
    }
}

StdioRelay::~StdioRelay() {
    if (alarm_installed_) ::sigaction(SIGALRM, &old_alarm_, nullptr);
}

void StdioRelay::use_bounded_writes(Pump& p) {
    p.bounded = true;
    if (alarm_installed_) return;
    // No SA_RESTART: the timer's signal must end a waiting write(), not restart it.
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGALRM, &sa, &old_alarm_);
    alarm_installed_ = true;
}

int StdioRelay::jail_end(int i) const {
    const auto& p = pumps_[static_cast<std::size_t>(i)];
    if (i == 2 && !p && stderr_joins_stdout_) return jail_end(1);
    return p ? p->jail_end.get() : -1;
}

void StdioRelay::close_jail_ends() {
    for (auto& p : pumps_)
        if (p) p->jail_end.reset();
}

void StdioRelay::fill_pollfds(pollfd* slots) const {
    for (std::size_t i = 0; i < 3; ++i) {
        pollfd& src = slots[2 * i];
        pollfd& dst = slots[2 * i + 1];
        src = {-1, 0, 0};
        dst = {-1, 0, 0};
        const auto& p = pumps_[i];
        if (!p || p->closed) continue;
        // A full buffer stops the reading: the program then waits in its own write.
        if (!p->source_done && p->has_room()) src = {p->source(), POLLIN, 0};
        if (p->start < p->end) dst = {p->sink(), POLLOUT, 0};
    }
}

void StdioRelay::read_some(Pump& p) {
    if (p.end == kBufferSize) {
        std::memmove(p.buf.get(), p.buf.get() + p.start, p.end - p.start);
        p.end -= p.start;
        p.start = 0;
    }
    // fd 0 is read only after poll said so (a regular file or device: no wait either).
    ssize_t n = ::read(p.source(), p.buf.get() + p.end, kBufferSize - p.end);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {  // EOF, or a source that cannot be read (a directory): EOF for the program
        p.source_done = true;
        return;
    }
    auto len = static_cast<std::uint64_t>(n);
    if (!p.input() && limit_) {
        // --output-limit: what is over it is never written; the supervisor kills the jail.
        if (total_ + len > *limit_) {
            len = *limit_ > total_ ? *limit_ - total_ : 0;
            over_ = true;
            p.cut_by = "output";
        }
        total_ += len;
    }
    p.end += static_cast<std::size_t>(len);
}

void StdioRelay::write_some(Pump& p) {
    const char* data = p.buf.get() + p.start;
    std::size_t len = p.end - p.start;
    if (p.capped_file) {
        // --fsize: the program's own writes to this file would stop at the limit (EFBIG); the
        // relay's stop there too, or the jail could fill the disk through a `>> log`. The
        // program's next write then fails (EPIPE).
        struct stat st {};
        off_t at = p.appends ? (::fstat(p.index, &st) == 0 ? st.st_size : -1)
                             : ::lseek(p.index, 0, SEEK_CUR);
        auto pos = static_cast<std::uint64_t>(at);
        if (at < 0 || pos >= *file_size_limit_) {
            if (at >= 0 && p.cut_by == nullptr) p.cut_by = "fsize";
            p.close();
            return;
        }
        if (len > *file_size_limit_ - pos) len = static_cast<std::size_t>(*file_size_limit_ - pos);
    }
    ssize_t n;
    if (p.input() || p.private_host || p.method == WriteMethod::Plain) {
        n = ::write(p.sink(), data, len);
    } else if (p.bounded) {
        n = write_bounded(p.sink(), data, len);
    } else {
        // A pipe or socket shared with others: this one write does not wait, the
        // description's flags stay as they are.
        iovec v{const_cast<char*>(data), len};
        n = ::pwritev2(p.sink(), &v, 1, -1, RWF_NOWAIT);
        if (n < 0 && errno == EOPNOTSUPP) {  // a kernel without RWF_NOWAIT for pipes
            use_bounded_writes(p);
            return;
        }
    }
    if (n > 0) {
        p.start += static_cast<std::size_t>(n);
        if (p.start == p.end) p.start = p.end = 0;
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // Our reader is gone (EPIPE), or the descriptor takes no writes: closing our end of the
    // pipe makes the program's next write fail, as it would without the jail. For fd 0, the
    // program closed its stdin: nothing more is read from ours.
    p.close();
}

void StdioRelay::handle(const pollfd* slots) {
    for (std::size_t i = 0; i < 3; ++i) {
        auto& p = pumps_[i];
        if (!p || p->closed) continue;
        short src = slots[2 * i].fd >= 0 ? slots[2 * i].revents : 0;
        short dst = slots[2 * i + 1].fd >= 0 ? slots[2 * i + 1].revents : 0;
        bool was_empty = p->start == p->end;
        if (src != 0) read_some(*p);
        // Fresh data is written at once (it usually fits, which saves a turn), except where a
        // write may wait for the timer: there only after poll said POLLOUT.
        if (p->start < p->end && (dst != 0 || (was_empty && src != 0 && !p->bounded)))
            write_some(*p);
        if (!p->closed && p->source_done && p->start == p->end) p->close();  // EOF passed on
    }
}

std::vector<StreamCut> StdioRelay::cuts() const {
    std::vector<StreamCut> out;
    for (const auto& p : pumps_) {
        if (!p || p->cut_by == nullptr) continue;
        const bool fsize = std::strcmp(p->cut_by, "fsize") == 0;
        const char* stream = p->index == 2 ? "stderr" : stderr_joins_stdout_ ? "stdout and stderr" : "stdout";
        out.push_back({stream, p->cut_by, fsize ? *file_size_limit_ : *limit_});
    }
    return out;
}

std::uint64_t StdioRelay::finish(double budget_ms) {
    if (pumps_[0] && !pumps_[0]->closed) pumps_[0]->close();  // nobody reads the stdin pipe now
    double until = now_ms() + budget_ms;
    auto busy = [&] {
        for (const auto& p : pumps_)
            if (p && !p->closed) return true;
        return false;
    };
    while (busy()) {
        double left = until - now_ms();
        if (left <= 0) break;
        pollfd slots[kPollSlots];
        fill_pollfds(slots);
        int n = ::poll(slots, kPollSlots, static_cast<int>(std::ceil(left)));
        if (n < 0 && errno != EINTR) break;
        if (n > 0) handle(slots);
    }
    std::uint64_t dropped = 0;
    for (auto& p : pumps_) {
        if (!p || p->closed) continue;
        dropped += p->end - p->start;
        int queued = 0;
        if (::ioctl(p->ours.get(), FIONREAD, &queued) == 0 && queued > 0)
            dropped += static_cast<std::uint64_t>(queued);
        p->close();
    }
    return dropped;
}

}  // namespace pyjail::supervisor
