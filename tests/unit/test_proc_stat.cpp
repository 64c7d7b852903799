#include <doctest/doctest.h>

#include "proc_stat.hpp"

using namespace pyjail;

TEST_CASE("/proc/PID/stat: the CPU time of a process and of the children it reaped") {
    // proc(5): fields 14-17 are utime, stime, cutime, cstime, in clock ticks.
    auto st = parse_proc_stat("4242 (python3) R 4241 4242 1 0 -1 4194304 120 7 0 0 150 25 300 40 20 0 1 0 99 "
                              "1000 10 18446744073709551615");
    REQUIRE(st);
    REQUIRE(st->has_times);
    CHECK(st->utime == 150);
    CHECK(st->stime == 25);
    CHECK(st->cutime == 300);
    CHECK(st->cstime == 40);
    CHECK(ticks_with_reaped(*st) == 515);
    // A name that looks like more fields does not shift them.
    st = parse_proc_stat("7 (a) 1 2 3 4 5 6 7 8 9 10 11 12) S 6 7 1 0 -1 0 0 0 0 0 5 6 7 8 20 0");
    REQUIRE(st);
    CHECK(st->ppid == 6);
    CHECK(ticks_with_reaped(*st) == 26);
    // Cut short, or a negative children's time: the parent and name, but no times.
    st = parse_proc_stat("4242 (cron) S 1 4242 4242 0 -1 4194560 ...");
    REQUIRE(st);
    CHECK_FALSE(st->has_times);
    st = parse_proc_stat("9 (x) S 1 9 9 0 -1 0 0 0 0 0 1 1 -5 0");
    REQUIRE(st);
    CHECK_FALSE(st->has_times);
}

TEST_CASE("/proc/PID/task/TID/children: the pids, bounded") {
    CHECK(parse_child_pids("", 10).empty());
    CHECK(parse_child_pids("12 13 ", 10) == std::vector<pid_t>{12, 13});
    CHECK(parse_child_pids("12 13 14", 2) == std::vector<pid_t>{12, 13});
    CHECK(parse_child_pids("0 -3 99999999999 15", 10) == std::vector<pid_t>{15});
    CHECK(parse_child_pids("12 x 13", 10) == std::vector<pid_t>{12});
}
