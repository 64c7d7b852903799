// pyjail-reaper: pid 1 of a run from a template, once the run is set up. The run's pid 1
// shares the template's memory while it sets the run up and forks the program (forked_run.cpp);
// then it execs this, so that it no longer holds the template's memory, and reaps as a fresh
// jail's pid 1 does (init.cpp).
//
//   pyjail-reaper PROGRAM_PID REPORT_FD RELEASE_FD
//
// Not for running by hand: it expects the signals init.cpp takes to be blocked already (they
// were, before the exec), and a program waiting on RELEASE_FD.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

#include "exitstatus.hpp"
#include "init.hpp"
#include "steps.hpp"

int main(int argc, char** argv) {
    using namespace pyjail;
    // The exec made us dumpable again: the program (same uid) must not read or write our
    // memory through /proc/1/mem, nor forge our report. It has not started: it waits for the
    // byte below.
    if (::prctl(PR_SET_DUMPABLE, 0) != 0 || argc != 4) return kExitJailError;
    pid_t program = static_cast<pid_t>(std::atoi(argv[1]));
    int report = std::atoi(argv[2]);
    int release = std::atoi(argv[3]);
    // The handlers were reset by the exec (the signals stayed blocked, so none was lost): pid 1
    // takes only the signals it has a handler for.
    pid1::install_init_signals();
    // The run's set-up sent without waiting (MSG_DONTWAIT: the template waited for it); the
    // reaper may wait, whatever the socket's open file says.
    int flags = ::fcntl(report, F_GETFL);
    if (flags >= 0) (void)::fcntl(report, F_SETFL, flags & ~O_NONBLOCK);
    (void)::write(release, "1", 1);
    ::close(release);
    pid1::run_reaper(program, report);
}
