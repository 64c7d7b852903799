#include <doctest/doctest.h>

#include <csignal>

#include "exitstatus.hpp"
#include "net_hint.hpp"

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
    for (int s : {SIGTERM, SIGHUP, SIGQUIT}) CHECK(is_terminating_signal(s));
    // SIGINT interrupts: a program that handles KeyboardInterrupt goes on running.
    for (int s : {SIGINT, SIGUSR1, SIGUSR2, SIGCHLD, SIGWINCH, 0})
        CHECK_FALSE(is_terminating_signal(s));
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

TEST_CASE("a run's status decides its report name, exit code and message") {
    Outcome exited3 = outcome_from_wait_status(3 << 8);
    Outcome killed = outcome_from_wait_status(SIGKILL);
    Outcome xcpu = outcome_from_wait_status(SIGXCPU);
    Outcome term = outcome_from_wait_status(SIGTERM);
    Outcome wall;
    wall.kind = Outcome::Kind::WallTimeout;
    Outcome grace;
    grace.kind = Outcome::Kind::GraceTimeout;
    grace.signal = SIGTERM;
    EndLimits limits{2, 1.5, 3, 4096, std::nullopt};
    struct Row {
        RunStatus status;
        Outcome outcome;
        const char* name;
        int exit_code;
        const char* message;
        bool shown_quietly;  // printed without --verbose
    };
    const Row rows[] = {
        {RunStatus::Ok, outcome_from_wait_status(0), "ok", 0, "", true},
        {RunStatus::Exit, exited3, "exit", 3, "", true},
        {RunStatus::Signal, term, "signal", 128 + SIGTERM,
         "the program was killed by signal 15 (SIGTERM)", false},
        {RunStatus::Signal, killed, "signal", 137, "the program was killed by signal 9 (SIGKILL)",
         true},
        {RunStatus::WallTimeout, wall, "wall-timeout", 124,
         "wall time limit of 2s reached; the jail and every process in it were killed", true},
        {RunStatus::GraceTimeout, grace, "grace-timeout", 137,
         "the jail was still running 1.5s after SIGTERM (--kill-grace); it and every process in "
         "it were killed",
         true},
        // The cgroup's count (the jail was killed) and RLIMIT_CPU's SIGXCPU end alike.
        {RunStatus::CpuTimeout, killed, "cpu-timeout", 124,
         "CPU time limit of 3s reached; the jail was killed", true},
        {RunStatus::CpuTimeout, xcpu, "cpu-timeout", 124,
         "CPU time limit of 3s reached; the jail was killed", true},
        {RunStatus::Oom, killed, "oom", 137,
         "out of memory: the jail reached its memory limit and was killed", true},
        {RunStatus::PidsLimit, exited3, "pids-limit", 3, "", true},
        {RunStatus::OutputLimit, killed, "output-limit", 137,
         "output limit reached (--output-limit 4K); the jail was killed", true},
        // Only a death by the filter's kill action is seccomp-denied (classify_run).
        {RunStatus::SeccompDenied, outcome_from_wait_status(SIGSYS), "seccomp-denied",
         128 + SIGSYS,
         "the program was killed by the syscall filter (SIGSYS): it made a system call through "
         "another architecture's entry point (int 0x80 or x32)",
         true},
        {RunStatus::SetupError, Outcome{}, "setup-error", 125, "", true},
    };
    for (const Row& r : rows) {
        CAPTURE(r.name);
        CHECK(status_name(r.status) == r.name);
        CHECK(exit_code_for(r.status, r.outcome) == r.exit_code);
        CHECK(status_message(r.status, r.outcome, limits) == r.message);
        CHECK(status_message_wanted(r.status, r.outcome, false) == r.shown_quietly);
        CHECK(status_message_wanted(r.status, r.outcome, true));
    }
}

TEST_CASE("a SIGSEGV under --memory's RLIMIT_DATA names the limit, also without --verbose") {
    Outcome segv = outcome_from_wait_status(SIGSEGV);
    EndLimits rlimit{0, 5, 0, std::nullopt, 1ULL << 20};
    CHECK(status_message(RunStatus::Signal, segv, rlimit) ==
          "the program was killed by signal 11 (SIGSEGV); --memory 1M is a per-process RLIMIT_DATA here "
          "(no cgroup v2), which the program may have run out of");
    CHECK(status_message_wanted(RunStatus::Signal, segv, false, rlimit));
    // With memory.max (or no --memory), a SIGSEGV is the program's own: said under --verbose only.
    EndLimits cgroup{0, 5, 0, std::nullopt, std::nullopt};
    CHECK(status_message(RunStatus::Signal, segv, cgroup) == "the program was killed by signal 11 (SIGSEGV)");
    CHECK_FALSE(status_message_wanted(RunStatus::Signal, segv, false, cgroup));
    // Another signal under RLIMIT_DATA: not the limit's.
    Outcome term = outcome_from_wait_status(SIGTERM);
    CHECK(status_message(RunStatus::Signal, term, rlimit) == "the program was killed by signal 15 (SIGTERM)");
    CHECK_FALSE(status_message_wanted(RunStatus::Signal, term, false, rlimit));
}

TEST_CASE("a stream cut at --fsize gets a line naming the limit and who chose it") {
    StreamCut cut{"stdout", "fsize", 64ULL << 20};
    CHECK(stream_cut_message(cut, "the strict profile's") ==
          "stdout reached --fsize 64M (the strict profile's); the rest was not written (--fsize SIZE "
          "raises it, --fsize= lifts it)");
    CHECK(stream_cut_message({"stdout and stderr", "fsize", 1000}, "") ==
          "stdout and stderr reached --fsize 1000; the rest was not written (--fsize SIZE raises it, "
          "--fsize= lifts it)");
    // --output-limit's cut is the run's status, whose line says it.
    CHECK(stream_cut_message({"stdout", "output", 4096}, "").empty());
}

TEST_CASE("a failed run that was refused network sockets under --net none gets one hint") {
    DeniedCounts denied;
    denied.add("socket(AF_INET)", 2);
    denied.add("socket(AF_NETLINK)");
    denied.add("socket(AF_INET6)");
    std::string hint = missing_network_hint(NetMode::None, denied, true, "the strict profile's");
    CHECK(hint == "the program was refused network sockets (socket(AF_INET) x2, socket(AF_INET6) x1): "
                  "if it failed for want of a network, this jail has none (--net none, the strict "
                  "profile's); --net allow "
                  "--allow-host HOST[:PORT] lets it reach one host through pyjail, --net loopback "
                  "gives it 127.0.0.1 only");
    CHECK(missing_network_hint(NetMode::None, denied, true, "").find("(--net none);") != std::string::npos);
    // A program that went on without the network, a network it has, or no inet socket: none.
    CHECK(missing_network_hint(NetMode::None, denied, false, "").empty());
    CHECK(missing_network_hint(NetMode::Loopback, denied, true, "").empty());
    DeniedCounts other;
    other.add("socket(AF_NETLINK)");
    other.add("ptrace");
    CHECK(missing_network_hint(NetMode::None, other, true, "").empty());
}

TEST_CASE("a failed run under --net allow names the hosts the jail refused, three at most") {
    EgressReport e;
    e.enabled = true;
    e.add({"pypi.org", 0, "allowed", "", 0, 0, 2});
    e.add({"www.python.org", 0, "refused", "not an allowed host", 0, 0, 2});
    CHECK(egress_refusals_hint(e, true) ==
          "the jail refused www.python.org (not an allowed host): --allow-host HOST[:PORT] names "
          "what the program may reach (--report's egress lists every decision)");
    CHECK(egress_refusals_hint(e, false).empty());  // it went on without them
    e.add({"example.com", 443, "refused", "example.com does not resolve (NXDOMAIN)", 0, 0, 1});
    e.add({"pypi.org", 443, "cut", "over --net-bytes", 10, 20, 1});
    e.add({"a.test", 0, "refused", "not an allowed host", 0, 0, 1});
    std::string hint = egress_refusals_hint(e, true);
    CHECK(hint.find("www.python.org (not an allowed host), example.com:443 (example.com does not "
                    "resolve (NXDOMAIN)), pypi.org:443 (cut: over --net-bytes), and 1 more:") !=
          std::string::npos);
    EgressReport only_allowed;
    only_allowed.enabled = true;
    only_allowed.add({"pypi.org", 443, "allowed", "", 1, 1, 1});
    CHECK(egress_refusals_hint(only_allowed, true).empty());
    CHECK(egress_refusals_hint(EgressReport{}, true).empty());
}
