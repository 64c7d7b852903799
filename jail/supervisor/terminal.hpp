// The host terminal's settings across a run. A jail that holds the caller's terminal as its
// stdin, stdout or stderr can change its modes (echo off, raw mode) and its window size, and
// may be killed before it puts them back: the supervisor saves them before the jail starts and
// restores them when the jail has ended, whichever way it ended (not when pyjail itself is
// killed by SIGKILL, which nothing can catch).
#pragma once

#include <sys/ioctl.h>
#include <sys/types.h>
#include <termios.h>

#include <vector>

namespace pyjail::supervisor {

class TerminalSettings {
public:
    // Saves the settings of each terminal among fds 0-2 (each terminal once).
    TerminalSettings();
    ~TerminalSettings() { restore(); }
    TerminalSettings(const TerminalSettings&) = delete;
    TerminalSettings& operator=(const TerminalSettings&) = delete;

    // Puts back what changed; harmless to call more than once.
    void restore() noexcept;

private:
    struct Saved {
        int fd;
        termios modes;
        bool has_size;
        winsize size;
    };
    std::vector<Saved> saved_;
};

}  // namespace pyjail::supervisor
