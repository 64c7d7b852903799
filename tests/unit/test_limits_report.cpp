#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>

#include <nlohmann/json.hpp>

#include "limits.hpp"
#include "report.hpp"

using namespace pyjail;

namespace {
const LimitEntry* entry(const LimitPlan& p, const std::string& name) {
    for (const auto& e : p.entries)
        if (e.name == name) return &e;
    return nullptr;
}
bool has_rlimit(const LimitPlan& p, int resource, std::uint64_t value) {
    for (const auto& r : p.rlimits)
        if (r.resource == resource && r.value == value) return true;
    return false;
}
}  // namespace

TEST_CASE("with cgroup v2, limits are cgroup files") {
    Limits l;
    l.memory = 512ULL << 20;
    l.pids = 64;
    l.cpus = 1.5;
    l.cpu_time = 10;
    LimitPlan p = plan_limits(l, true);
    CHECK(p.cgroup_files == std::vector<std::pair<std::string, std::string>>{
                                {"memory.max", "536870912"},
                                {"memory.swap.max", "0"},
                                {"memory.oom.group", "1"},
                                {"pids.max", "64"},
                                {"cpu.max", "150000 100000"}});
    CHECK(entry(p, "memory")->mechanism == Mechanism::CgroupV2);
    CHECK(entry(p, "cpu-time")->mechanism == Mechanism::CgroupV2);
    CHECK_FALSE(has_rlimit(p, RLIMIT_DATA, 512ULL << 20));
    CHECK_FALSE(has_rlimit(p, RLIMIT_NPROC, 64));
    // Always: no core dumps, bounded open files.
    CHECK(has_rlimit(p, RLIMIT_CORE, 0));
    CHECK(has_rlimit(p, RLIMIT_NOFILE, 1024));
}

TEST_CASE("without cgroup v2, the rlimit fallback, and what it cannot do") {
    Limits l;
    l.memory = 1ULL << 30;
    l.pids = 32;
    l.cpus = 2;
    l.cpu_time = 2.5;
    l.fsize = 1 << 20;
    LimitPlan p = plan_limits(l, false);
    CHECK(p.cgroup_files.empty());
    CHECK(has_rlimit(p, RLIMIT_DATA, 1ULL << 30));
    CHECK(has_rlimit(p, RLIMIT_NPROC, 32));
    CHECK(has_rlimit(p, RLIMIT_CPU, 3));  // rounded up
    CHECK(has_rlimit(p, RLIMIT_FSIZE, 1 << 20));
    CHECK(entry(p, "memory")->mechanism == Mechanism::Rlimit);
    CHECK(entry(p, "pids")->detail == "RLIMIT_NPROC (counted per user namespace: per jail)");
    CHECK(entry(p, "cpus")->mechanism == Mechanism::NotEnforced);
}

TEST_CASE("cpu.max") {
    CHECK(cpu_max_value(1) == "100000 100000");
    CHECK(cpu_max_value(0.5) == "50000 100000");
    CHECK(cpu_max_value(0.001) == "1000 100000");  // the kernel's minimum quota
}

TEST_CASE("status of a run") {
    RunFacts f;
    CHECK(run_status(f) == "ok");
    f.outcome.code = 3;
    CHECK(run_status(f) == "exit");
    f.outcome = outcome_from_wait_status(SIGSEGV);
    CHECK(run_status(f) == "signal");
    f.outcome = outcome_from_wait_status(SIGXCPU);
    CHECK(run_status(f) == "cpu-timeout");  // RLIMIT_CPU
    f.outcome = outcome_from_wait_status(SIGKILL);
    f.oom_kills = 1;
    CHECK(run_status(f) == "oom");
    f.oom_kills = 0;
    f.pids_limit_hits = 2;
    CHECK(run_status(f) == "pids-limit");
    f.outcome = outcome_from_wait_status(0);
    CHECK(run_status(f) == "ok");  // it hit the pids limit and coped
    f.pids_limit_hits = 0;
    f.denied.add("socket(AF_INET)");
    CHECK(run_status(f) == "ok");  // refused, and coped
    f.outcome.code = 3;
    CHECK(run_status(f) == "exit");  // refused, then exited: the status says how it ended
    f.outcome = outcome_from_wait_status(SIGSEGV);
    CHECK(run_status(f) == "signal");
    f.outcome = outcome_from_wait_status(SIGSYS);
    CHECK(run_status(f) == "seccomp-denied");  // killed by the filter itself
    f.denied = {};
    CHECK(run_status(f) == "seccomp-denied");  // the kill action reports no refusal
    f.outcome = outcome_from_wait_status(1 << 8);
    f.output_limit = true;
    CHECK(run_status(f) == "output-limit");
    f.cpu_timeout = true;
    CHECK(run_status(f) == "cpu-timeout");
    f.outcome.kind = Outcome::Kind::GraceTimeout;
    CHECK(run_status(f) == "grace-timeout");
    f.outcome.kind = Outcome::Kind::WallTimeout;
    CHECK(run_status(f) == "wall-timeout");
    f.setup_error = true;
    CHECK(run_status(f) == "setup-error");
}

TEST_CASE("the report is JSON with stable fields") {
    RunFacts f;
    f.outcome = outcome_from_wait_status(SIGKILL);
    f.exit_code = 137;
    f.wall_s = 1.5;
    f.user_s = 0.25;
    f.system_s = 0.125;
    f.memory_peak = 1024;
    f.memory_peak_source = "memory.peak";
    f.limits = {limit_entry("memory", std::uint64_t{1024}, "bytes", Mechanism::CgroupV2, "memory.max"),
                wall_time_entry(2.5)};
    f.started_unix_ms = 1764787512345;
    f.denied.add("ptrace", 2);
    f.denied_throttled = 3;
    f.relayed_signal = SIGTERM;
    f.usage_partial = true;
    f.command = {"python3", "-c", "print(\"x\")\n"};
    f.profile = "strict";
    f.streams_cut = {{"stdout", "fsize", 64ULL << 20}};
    auto j = nlohmann::ordered_json::parse(report_json(f));
    CHECK(j["status"] == "signal");  // killed, refusals or not
    CHECK(j["exit_code"] == 137);
    CHECK(j["program_exit_code"].is_null());
    CHECK(j["signal"] == 9);
    CHECK(j["signal_name"] == "SIGKILL");
    CHECK(j["wall_time_s"] == 1.5);
    CHECK(j["cpu_user_s"] == 0.25);
    CHECK(j["cpu_system_s"] == 0.125);
    CHECK(j["memory_peak_bytes"] == 1024);
    // The text as ever, then the same value as a number: whole for bytes, fractional for seconds.
    CHECK(j["limits"]["memory"] == nlohmann::ordered_json{{"value", "1024"}, {"mechanism", "cgroup-v2"},
                                                          {"detail", "memory.max"}, {"amount", 1024},
                                                          {"unit", "bytes"}});
    CHECK(j["limits"]["memory"]["amount"].is_number_unsigned());
    CHECK(j["limits"]["wall-time"]["value"] == "2.5");
    CHECK(j["limits"]["wall-time"]["amount"] == 2.5);
    CHECK(j["limits"]["wall-time"]["unit"] == "seconds");
    CHECK(j["started_at"] == "2025-12-03T18:45:12.345Z");
    CHECK(j["denied_syscalls"] == nlohmann::ordered_json::parse(R"([{"syscall": "ptrace", "count": 2}])"));
    CHECK(j["denied_syscalls_throttled"] == 3);
    CHECK(j["relayed_signal"] == "SIGTERM");
    CHECK(j["usage_partial"] == true);
    CHECK(j["streams_cut"] ==
          nlohmann::ordered_json::parse(R"([{"stream": "stdout", "limit": "fsize", "limit_bytes": 67108864}])"));
    CHECK(j["command"] == nlohmann::json{"python3", "-c", "print(\"x\")\n"});
    CHECK(j["error"].is_null());
    // The documented fields, in the documented order.
    std::vector<std::string> keys;
    for (const auto& item : j.items()) keys.push_back(item.key());
    CHECK(keys == std::vector<std::string>{
                      "pyjail_version", "status", "exit_code", "program_exit_code", "signal",
                      "signal_name", "relayed_signal", "started_at", "wall_time_s", "cpu_user_s",
                      "cpu_system_s", "memory_peak_bytes", "memory_peak_source",
                      "usage_partial", "setup_time_ms", "limits", "cgroup", "host_uid", "host_gid",
                      "host_ids", "budgets_shared_with", "budgets_shared_why",
                      "counts_charged_to_uid", "oom_kills",
                      "pids_limit_hits", "streams_cut", "denied_syscalls", "denied_syscalls_throttled",
                      "egress", "error", "profile", "command"});
}

TEST_CASE("the start time is RFC 3339 in UTC with milliseconds, or null") {
    CHECK(utc_timestamp_ms(0) == "1970-01-01T00:00:00.000Z");
    CHECK(utc_timestamp_ms(951782400007) == "2000-02-29T00:00:00.007Z");  // a leap day
    CHECK(utc_timestamp_ms(-1) == "1969-12-31T23:59:59.999Z");
    CHECK(nlohmann::json::parse(report_json(RunFacts{}))["started_at"].is_null());
}

TEST_CASE("every limit's number is the value its text says, in its unit") {
    Limits l;
    l.memory = 512ULL << 20;
    l.pids = 64;
    l.cpus = 1.5;
    l.cpu_time = 10;
    l.fsize = 1 << 20;
    l.output = 4096;
    for (bool cgroup : {true, false}) {
        LimitPlan p = plan_limits(l, cgroup);
        p.entries.push_back(wall_time_entry(30));
        auto limits = nlohmann::json::parse(report_json([&] {
                          RunFacts f;
                          f.limits = p.entries;
                          return f;
                      }()))["limits"];
        CHECK(limits.size() == 15);
        for (const auto& [name, e] : limits.items()) {
            CAPTURE(name);
            const std::string unit = e["unit"];
            const bool whole = unit == "bytes" || unit == "count" || unit == "priority";
            CHECK((whole || unit == "seconds" || unit == "cpus"));
            CHECK(e["amount"].is_number_unsigned() == whole);
            CHECK(e["amount"].get<double>() == std::stod(e["value"].get<std::string>()));
        }
        CHECK(limits["memory"]["amount"] == 512ULL << 20);
        CHECK(limits["memory"]["unit"] == "bytes");
        CHECK(limits["pids"]["unit"] == "count");
        CHECK(limits["cpus"]["amount"] == 1.5);
        CHECK(limits["cpu-time"]["amount"] == 10.0);
        CHECK(limits["cpu-time"]["unit"] == "seconds");
        CHECK(limits["wall-time"]["amount"] == 30.0);
        CHECK(limits["nofile"]["amount"] == 1024);
    }
}

TEST_CASE("a grace timeout: killed with SIGKILL after the relayed signal") {
    RunFacts f;
    f.outcome.kind = Outcome::Kind::GraceTimeout;
    f.outcome.signal = SIGHUP;
    f.relayed_signal = SIGHUP;
    auto j = nlohmann::ordered_json::parse(report_json(f));
    CHECK(j["status"] == "grace-timeout");
    CHECK(j["signal_name"] == "SIGKILL");
    CHECK(j["relayed_signal"] == "SIGHUP");
    CHECK(j["program_exit_code"].is_null());
}

TEST_CASE("usage is partial only when pid 1 did not wait for the whole jail") {
    CHECK_FALSE(usage_is_partial(true, false, false, 0));   // a cgroup counts everything
    CHECK_FALSE(usage_is_partial(false, false, true, 0));   // pid 1 reaped all, exited 0
    CHECK(usage_is_partial(false, false, false, 0));        // pid 1 killed
    CHECK(usage_is_partial(false, false, true, 3));         // pid 1 gave up on some
    CHECK_FALSE(usage_is_partial(false, true, true, 125));  // a set-up error: nothing ran
}

TEST_CASE("setup errors carry step, errno and message; bad UTF-8 does not break the report") {
    RunFacts f;
    f.setup_error = true;
    f.exit_code = 125;
    f.error_step = "bind";
    f.error_errno = 2;
    f.error_message = "--ro-bind: cannot use /x";
    f.command = {"python3", "\xff\xfe.py"};
    auto j = nlohmann::json::parse(report_json(f));
    CHECK(j["status"] == "setup-error");
    CHECK(j["error"]["errno_name"] == "ENOENT");
    CHECK(j["error"]["step"] == "bind");
    CHECK(j["program_exit_code"].is_null());
    CHECK(j["command"][1].get<std::string>().size() > 0);
}

TEST_CASE("json strings escape control characters") {
    CHECK(json_string("a\"b\\c\n\x01") == "\"a\\\"b\\\\c\\n\\u0001\"");
}

TEST_CASE("every jail: no real-time or raised priority, little locked memory, capped inotify") {
    for (bool cgroup : {true, false}) {
        LimitPlan p = plan_limits(Limits{}, cgroup);
        CHECK(has_rlimit(p, RLIMIT_RTPRIO, 0));
        CHECK(has_rlimit(p, RLIMIT_NICE, 0));
        CHECK(has_rlimit(p, RLIMIT_MEMLOCK, 64 * 1024));
        auto userns = [&](const std::string& name) -> const UsernsLimit* {
            for (const auto& u : p.userns_limits)
                if (name == u.name) return &u;
            return nullptr;
        };
        REQUIRE(userns("max_inotify_instances"));
        CHECK(userns("max_inotify_instances")->value == 16);
        CHECK(userns("max_inotify_instances")->required);
        CHECK(userns("max_inotify_watches")->value == 8192);
        for (const char* ns : {"max_user_namespaces", "max_mnt_namespaces", "max_net_namespaces"})
            CHECK_MESSAGE(userns(ns)->value == 0, ns);
        // The report and --explain show them, with the mechanism.
        CHECK(entry(p, "rtprio")->value == "0");
        CHECK(entry(p, "memlock")->value == "65536");
        CHECK(entry(p, "sigpending")->value == "1024");
        CHECK(has_rlimit(p, RLIMIT_SIGPENDING, 1024));
        CHECK(entry(p, "inotify-instances")->mechanism == Mechanism::UserNamespace);
        CHECK(std::string(mechanism_name(Mechanism::UserNamespace)) == "user-namespace");
    }
}
