#include "terminal.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <cstring>

namespace pyjail::supervisor {

namespace {

bool same_modes(const termios& a, const termios& b) {
    return a.c_iflag == b.c_iflag && a.c_oflag == b.c_oflag && a.c_cflag == b.c_cflag &&
           a.c_lflag == b.c_lflag && std::memcmp(a.c_cc, b.c_cc, sizeof a.c_cc) == 0 &&
           cfgetispeed(&a) == cfgetispeed(&b) && cfgetospeed(&a) == cfgetospeed(&b);
}

}  // namespace

TerminalSettings::TerminalSettings() {
    std::vector<dev_t> seen;
    for (int fd = 0; fd < 3; ++fd) {
        Saved s{};
        struct stat st {};
        if (::tcgetattr(fd, &s.modes) != 0 || ::fstat(fd, &st) != 0) continue;
        bool dup = false;
        for (dev_t d : seen) dup = dup || d == st.st_rdev;
        if (dup) continue;
        seen.push_back(st.st_rdev);
        s.fd = fd;
        s.has_size = ::ioctl(fd, TIOCGWINSZ, &s.size) == 0;
        saved_.push_back(s);
    }
}

void TerminalSettings::restore() noexcept {
    if (saved_.empty()) return;
    // From a background process group, changing the terminal raises SIGTTOU, which would stop
    // pyjail: with the signal blocked, the kernel lets the change through instead.
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    ::sigprocmask(SIG_BLOCK, &ttou, &old);
    for (const Saved& s : saved_) {
        termios now{};
        // TCSANOW, never TCSADRAIN: a stopped terminal (^S) would make us wait forever.
        if (::tcgetattr(s.fd, &now) == 0 && !same_modes(now, s.modes))
            (void)::tcsetattr(s.fd, TCSANOW, &s.modes);
        winsize size{};
        if (s.has_size && ::ioctl(s.fd, TIOCGWINSZ, &size) == 0 &&
            std::memcmp(&size, &s.size, sizeof size) != 0)
            (void)::ioctl(s.fd, TIOCSWINSZ, &s.size);
    }
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace pyjail::supervisor
