// What `pyjail serve` holds its runs to: a request within the server's own settings is
// accepted, each way of asking for more is refused with a reason naming the setting.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <string>

#include "fixtures.hpp"
#include "profile.hpp"
#include "serve_bounds.hpp"

using namespace pyjail;
using pyjail::test::policy_with;

namespace {

const std::vector<std::string> kTemplateSeccompAllow = {"exit", "mmap", "read", "write"};

ServeBounds bounds_of(const Policy& p, bool cgroup) {
    return serve_bounds(p, plan_limits(p.limits, cgroup), kTemplateSeccompAllow);
}

// The request a client with this policy sends (as spawn.cpp's make_run_request makes it).
RunRequest request_of(const Policy& p, bool cgroup) {
    RunRequest r;
    r.command = parse_python_command({"python", "-c", "pass"});
    LimitPlan l = plan_limits(p.limits, cgroup);
    r.lockdown.rlimits = l.rlimits;
    r.cgroup_files = l.cgroup_files;
    r.mounts.ops = {{OpKind::Tmpfs, "tmp", -1, "", MS_NOSUID,
                 "mode=0755,size=" + std::to_string(p.tmpfs_size) +
                     ",nr_inodes=" + std::to_string(tmpfs_inodes_for(p.tmpfs_size)),
                 0, false},
                {OpKind::Tmpfs, "proc/acpi", -1, "", MS_RDONLY, "mode=0555,size=4k,nr_inodes=1", 0, true}};
    r.lockdown.seccomp_filter = {{0x06, 0, 0, 0x7fff0000}};
    r.seccomp_allow = kTemplateSeccompAllow;
    r.net = static_cast<std::uint32_t>(p.net);
    r.wall_time = p.wall_time;
    r.cpu_time = p.limits.cpu_time;
    r.output = p.limits.output.value_or(0);
    return r;
}

std::string why(const RunRequest& r, const ServeBounds& b) { return beyond_bounds(r, b).value_or(""); }

}  // namespace

TEST_CASE("a run with the server's own settings, or smaller ones, is within its bounds") {
    const std::vector<std::pair<std::string, std::string>> server = {
        {"memory", "64M"}, {"wall-time", "3"}, {"pids", "8"}, {"cpu-time", "5"}, {"output-limit", "1M"},
        {"cpus", "1"},     {"fsize", "1M"}};
    for (bool cgroup : {false, true}) {
        INFO("cgroup: " << cgroup);
        ServeBounds b = bounds_of(policy_with(server), cgroup);
        CHECK(why(request_of(policy_with(server), cgroup), b) == "");
        Policy smaller = policy_with({{"memory", "32M"}, {"wall-time", "1"}, {"pids", "4"}, {"cpu-time", "0.5"},
                                      {"output-limit", "1K"}, {"cpus", "0.5"}, {"fsize", "1K"},
                                      {"tmpfs-size", "1M"}, {"nofile", "64"}});
        RunRequest r = request_of(smaller, cgroup);
        r.seccomp_allow = {"read", "write"};  // a filter allowing less
        CHECK(why(r, b) == "");
    }
    // A server with no limit of a kind takes any value of it, and a run may set one anyway.
    ServeBounds open = bounds_of(policy_with({{"memory", ""}, {"pids", ""}, {"wall-time", "0"}, {"cpu-time", "0"}}),
                                 true);
    CHECK(why(request_of(policy_with({{"memory", "8G"}, {"wall-time", "100000"}}), true), open) == "");
}

TEST_CASE("a run asking for more than the server's settings is refused, naming the setting") {
    const std::vector<std::pair<std::string, std::string>> server = {
        {"memory", "64M"}, {"wall-time", "3"}, {"pids", "8"}, {"cpu-time", "5"}, {"output-limit", "1M"}, {"cpus", "1"}};
    struct Case {
        std::vector<std::pair<std::string, std::string>> asked;
        bool cgroup;
        const char* reason;
    };
    const Case cases[] = {
        // The profile's (strict) limits where the server was given smaller ones.
        {{{"memory", "512M"}}, false, "--memory (RLIMIT_DATA) 512M; this server's runs have at most 64M"},
        {{{"memory", "512M"}}, true, "--memory (memory.max) 512M; this server's runs have 64M"},
        {{{"memory", ""}}, false, "the run sets no --memory (RLIMIT_DATA)"},
        {{{"memory", ""}}, true, "the run sets no --memory (memory.max)"},
        {{{"pids", "128"}}, false, "--pids (RLIMIT_NPROC) 128"},
        {{{"pids", "128"}}, true, "--pids (pids.max) 128"},
        {{{"cpus", "2"}}, true, "--cpus (cpu.max) 200000 100000"},
        {{{"cpu-time", "120"}}, false, "--cpu-time (RLIMIT_CPU) 120"},
        {{{"cpu-time", "120"}}, true, "--cpu-time 120"},
        {{{"cpu-time", "0"}}, true, "--cpu-time 0 (no limit)"},
        {{{"wall-time", "300"}}, false, "--wall-time 300; this server's runs have at most 3"},
        {{{"wall-time", "0"}}, false, "--wall-time 0 (no limit)"},
        {{{"output-limit", "2M"}}, false, "--output-limit 2M; this server's runs have at most 1M"},
        {{{"output-limit", ""}}, false, "--output-limit none"},
        {{{"nofile", "4096"}}, false, "--nofile (RLIMIT_NOFILE) 4096; this server's runs have at most 1024"},
        {{{"tmpfs-size", "1G"}}, false, "a tmpfs at /tmp of 1G; this server's runs have at most 64M"},
        {{{"net", "loopback"}}, false, "another network than this server's runs have (--net none)"},
    };
    for (const auto& c : cases) {
        std::vector<std::pair<std::string, std::string>> asked = server;
        for (const auto& a : c.asked) asked.push_back(a);
        INFO(c.reason << " (cgroup: " << c.cgroup << ")");
        std::string reason = why(request_of(policy_with(asked), c.cgroup), bounds_of(policy_with(server), c.cgroup));
        CHECK(reason.find(c.reason) != std::string::npos);
        CHECK(reason.find('\n') == std::string::npos);
        CHECK(reason.find("ask for") != std::string::npos);  // and what to do
    }

    ServeBounds b = bounds_of(policy_with(server), false);
    RunRequest off = request_of(policy_with(server), false);
    off.lockdown.seccomp_filter.clear();
    off.seccomp_allow.clear();
    CHECK(why(off, b).find("--seccomp off") != std::string::npos);
    RunRequest wider = request_of(policy_with(server), false);
    wider.seccomp_allow.push_back("ptrace");
    CHECK(why(wider, b) == "the run's filter allows ptrace, which this server's does not: ask for less, or start "
                           "pyjail serve with more");
    // A tmpfs without a size is one without a limit; a size in a form not understood is not a smaller one.
    RunRequest unsized = request_of(policy_with(server), false);
    unsized.mounts.ops[1].data = "mode=0555";
    CHECK(why(unsized, b).find("a tmpfs at /proc/acpi of no size") != std::string::npos);
    unsized.mounts.ops[1].data = "size=50%,nr_inodes=1";
    CHECK(why(unsized, b).find("of no size") != std::string::npos);
    // cgroup files: one the server does not write is refused; a limit the server has no
    // value for may be set (a stricter run); unreadable values are never smaller.
    ServeBounds cb = bounds_of(policy_with(server), true);
    RunRequest odd = request_of(policy_with(server), true);
    odd.cgroup_files.push_back({"cgroup.subtree_control", "+memory"});
    CHECK(why(odd, cb).find("cgroup file cgroup.subtree_control, which this server's runs do not set") !=
          std::string::npos);
    RunRequest junk = request_of(policy_with(server), true);
    junk.cgroup_files[0].second = "64M";
    CHECK(why(junk, cb).find("--memory (memory.max) 64M") != std::string::npos);
    RunRequest max = request_of(policy_with(server), true);
    max.cgroup_files[0].second = "max";
    CHECK(why(max, cb).find("--memory (memory.max) max") != std::string::npos);
    // A server with a filter off takes any filter, and no filter.
    ServeBounds unfiltered = serve_bounds(policy_with(server), plan_limits(policy_with(server).limits, false), {});
    CHECK(why(off, unfiltered) == "");
    CHECK(why(wider, unfiltered) == "");
}

TEST_CASE("a server refuses a writable bind, its runs would all share it") {
    CHECK_FALSE(serve_policy_refusal(policy_with({})).has_value());
    CHECK_FALSE(serve_policy_refusal(policy_with({{"ro-bind", "/srv/data"}})).has_value());
    CHECK(serve_policy_refusal(policy_with({{"bind", "/srv/shared"}})).value_or("") ==
          "--bind: a writable bind (/srv/shared) would be shared by every run of the server, at once and one "
          "after another");
}

TEST_CASE("under --net allow, a run's allowlist, pins, resolver and --net-bytes are within the server's") {
    const std::vector<std::pair<std::string, std::string>> server = {
        {"net", "allow"},         {"allow-host", "web.test:8080"}, {"allow-host", "*.svc.test:443"},
        {"allow-host", "@pypi"},  {"net-resolve", "web.test:127.0.0.1"}, {"net-bytes", "10M"}};
    ServeBounds b = bounds_of(policy_with(server), false);
    auto with = [&](std::vector<std::pair<std::string, std::string>> asked) {
        asked.insert(asked.begin(), {"net", "allow"});
        RunRequest r = request_of(policy_with(asked), false);
        r.egress = policy_with(asked).egress;
        return why(r, b);
    };
    CHECK(with({{"allow-host", "web.test:8080"}, {"allow-host", "*.svc.test:443"}, {"allow-host", "@pypi"},
                {"net-resolve", "web.test:127.0.0.1"}, {"net-bytes", "10M"}}) == "");
    // Less: one host, a name under the wildcard, a narrower wildcard, fewer bytes, no pin.
    CHECK(with({{"allow-host", "a.svc.test:443"}, {"net-bytes", "1M"}}) == "");
    CHECK(with({{"allow-host", "*.b.svc.test:443"}, {"allow-host", "pypi.org:443"}, {"net-bytes", "10M"}}) == "");

    CHECK(with({{"allow-host", "other.test:8080"}, {"net-bytes", "1M"}}) ==
          "the run asks for --allow-host other.test:8080, beyond this server's runs' allowlist (web.test:8080 "
          "*.svc.test:443 pypi.org:443 files.pythonhosted.org:443): ask for less, or start pyjail serve with that "
          "--allow-host");
    CHECK(with({{"allow-host", "web.test"}, {"net-bytes", "1M"}}).find("--allow-host web.test:80,443, beyond") !=
          std::string::npos);
    CHECK(with({{"allow-host", "*.other.test:443"}, {"net-bytes", "1M"}}).find("--allow-host *.other.test:443, beyond") !=
          std::string::npos);
    CHECK(with({{"allow-host", "svc.test:443"}, {"net-bytes", "1M"}}).find("beyond") != std::string::npos);
    // A name pinned to an address the server never pinned (a host's loopback service).
    CHECK(with({{"allow-host", "a.svc.test:443"}, {"net-resolve", "a.svc.test:127.0.0.1"}, {"net-bytes", "1M"}}) ==
          "the run asks for --net-resolve a.svc.test:127.0.0.1, which this server's runs do not have: ask for "
          "less, or start pyjail serve with it");
    CHECK(with({{"allow-host", "web.test:8080"}, {"net-resolve", "web.test:10.0.0.1"}, {"net-bytes", "1M"}})
              .find("--net-resolve web.test:10.0.0.1") != std::string::npos);
    CHECK(with({{"allow-host", "web.test:8080"}, {"net-dns", "127.0.0.1:5353"}, {"net-bytes", "1M"}}) ==
          "the run asks for --net-dns 127.0.0.1:5353; this server's runs have none (the host's resolver): ask for "
          "the same");
    CHECK(with({{"allow-host", "web.test:8080"}}).find("the run asks for --net-bytes none; this server's runs have "
                                                       "at most 10M") == 0);
    CHECK(with({{"allow-host", "web.test:8080"}, {"net-bytes", "11M"}}).find("--net-bytes 11M") !=
          std::string::npos);
    // Another network altogether is refused as before.
    RunRequest loopback = request_of(policy_with({{"net", "loopback"}}), false);
    CHECK(why(loopback, b).find("another network") != std::string::npos);
}
