#include <doctest/doctest.h>

#include <csignal>

#include "exitstatus.hpp"

using namespace pyjail;

TEST_CASE("wait status to exit status") {
    CHECK(exit_code_for(outcome_from_wait_status(0)) == 0);
    CHECK(exit_code_for(outcome_from_wait_status(3 << 8)) == 3);
    CHECK(exit_code_for(outcome_from_wait_status(SIGKILL)) == 137);
    CHECK(exit_code_for(outcome_from_wait_status(SIGSEGV | 0x80)) == 128 + SIGSEGV);  // core
    Outcome t;
    t.kind = Outcome::Kind::WallTimeout;
    CHECK(exit_code_for(t) == 124);
    Outcome d;
    d.kind = Outcome::Kind::JailDied;
    d.signal = SIGKILL;
    CHECK(exit_code_for(d) == 137);
    d.signal = 0;
    CHECK(exit_code_for(d) == 125);
    Outcome g;
    g.kind = Outcome::Kind::GraceTimeout;
    g.signal = SIGTERM;  // the one it ignored; it was killed with SIGKILL
    CHECK(exit_code_for(g) == 137);
}

TEST_CASE("the signals that start --kill-grace") {
    for (int s : {SIGTERM, SIGHUP, SIGINT, SIGQUIT}) CHECK(is_terminating_signal(s));
    for (int s : {SIGUSR1, SIGUSR2, SIGCHLD, SIGWINCH, 0}) CHECK_FALSE(is_terminating_signal(s));
}

TEST_CASE("descriptions") {
    CHECK(describe(outcome_from_wait_status(0), 0).empty());
    CHECK(describe(outcome_from_wait_status(SIGTERM), 0) ==
          "the program was killed by signal 15 (SIGTERM)");
    Outcome t;
    t.kind = Outcome::Kind::WallTimeout;
    CHECK(describe(t, 2) ==
          "wall time limit of 2s reached; the jail and every process in it were killed");
    Outcome g;
    g.kind = Outcome::Kind::GraceTimeout;
    g.signal = SIGTERM;
    CHECK(describe(g, 0, 1.5) == "the jail was still running 1.5s after SIGTERM (--kill-grace); "
                                 "it and every process in it were killed");
}
