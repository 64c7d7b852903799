// The two ways into a jail -- a fresh jail's ChildPlan and a run from a template's RunRequest --
// carry one lock-down, planned once: whatever the RunPlan asks of it reaches both, and the
// request carries it through its encoding to the template unchanged.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include "lockdown.hpp"
#include "profile.hpp"
#include "run_plans.hpp"
#include "run_request.hpp"

using namespace pyjail;

namespace {

RunPlan sample_plan() {
    Settings s = default_settings();
    apply_profile(s, parse_profile("", "p.toml"));
    RunPlan p;
    p.policy = make_policy(s, {"python3", "-c", "pass"}, "/home/u");
    p.policy.hostname = "box";
    p.policy.net = NetMode::Loopback;
    p.argv = {"python3", "-c", "pass"};
    p.env = {"PATH=/usr/bin"};
    p.mounts.ops = {{OpKind::Tmpfs, "tmp", -1, "", 0, "size=1M", 0, false}};
    p.mounts.cwd = "/tmp";
    Limits l;
    l.memory = 1 << 30;
    l.cpu_time = 3;
    p.limits = plan_limits(l, false);
    p.seccomp_filter = {{0x20, 0, 0, 4}, {0x06, 0, 0, 0x7fff0000}};
    return p;
}

// A run from a template's lock-down differs from a fresh jail's in two planned ways: the run
// enters a user namespace of its own (a fresh jail's pid 1 is in one from its clone), and it
// keeps the template's empty keyring (lockdown.hpp). This is the rest of it.
Lockdown but_for_the_user_namespace(Lockdown l) {
    CHECK(l.own_user_namespace);
    CHECK_FALSE(l.new_keyring);
    l.own_user_namespace = false;
    l.new_keyring = true;
    return l;
}

// The lock-down the template executes: the client's, through the request's encoding.
Lockdown as_template_gets(const RunPlan& p) {
    return but_for_the_user_namespace(decode_request(encode_request(plan_run_request(p, false))).lockdown);
}

bool has_rlimit(const Lockdown& l, int resource) {
    for (const auto& r : l.rlimits)
        if (r.resource == resource) return true;
    return false;
}

}  // namespace

TEST_CASE("a fresh jail and a run from a template carry the same lock-down") {
    RunPlan p = sample_plan();
    const Lockdown planned = plan_lockdown(p);
    CHECK(plan_child(p).lockdown == planned);
    CHECK(but_for_the_user_namespace(plan_run_request(p, false).lockdown) == planned);
    CHECK(as_template_gets(p) == planned);
    CHECK_FALSE(planned.own_user_namespace);
    CHECK(planned.hostname == "box");
    CHECK(planned.loopback_up);
    CHECK(planned.seccomp_filter.size() == 2);
    CHECK(planned.filter_notifies);
    CHECK_FALSE(planned.template_capabilities);
    // The fixed limits of every jail, and the run's own.
    for (int resource : {RLIMIT_CORE, RLIMIT_NOFILE, RLIMIT_RTPRIO, RLIMIT_NICE, RLIMIT_MEMLOCK,
                         RLIMIT_SIGPENDING, RLIMIT_DATA, RLIMIT_CPU}) {
        INFO(rlimit_name(resource));
        CHECK(has_rlimit(planned, resource));
    }
}

TEST_CASE("what the plan adds to the lock-down reaches both doors") {
    RunPlan p = sample_plan();
    p.limits.rlimits.push_back({RLIMIT_FSIZE, 4096, "RLIMIT_FSIZE"});
    p.policy.net = NetMode::None;
    p.policy.hostname = "other";
    p.seccomp_filter.push_back({0x06, 0, 0, 0});
    const Lockdown planned = plan_lockdown(p);
    CHECK(has_rlimit(planned, RLIMIT_FSIZE));
    CHECK(plan_child(p).lockdown == planned);
    CHECK(as_template_gets(p) == planned);
    // --seccomp off reaches both as no filter.
    p.seccomp_filter.clear();
    CHECK(plan_child(p).lockdown.seccomp_filter.empty());
    CHECK(as_template_gets(p).seccomp_filter.empty());
    // And the comparison sees every field.
    Lockdown other = planned;
    other.filter_notifies = false;
    CHECK_FALSE(other == planned);
    other = planned;
    other.rlimits.back().hard = 1;
    CHECK_FALSE(other == planned);
}

TEST_CASE("a template keeps its runs' capabilities and only the limits every run shares") {
    RunPlan p = sample_plan();
    p.is_template = true;
    p.template_filter = {{0x06, 0, 0, 0x7fff0000}};
    const Lockdown t = plan_lockdown(p);
    CHECK(plan_child(p).lockdown == t);
    CHECK(t.template_capabilities);
    // Its own filter, not the profile's (which each run installs), and without a listener.
    REQUIRE(t.seccomp_filter.size() == 1);
    CHECK(t.seccomp_filter[0].k == 0x7fff0000u);
    CHECK_FALSE(t.filter_notifies);
    CHECK(has_rlimit(t, RLIMIT_NOFILE));
    CHECK(has_rlimit(t, RLIMIT_SIGPENDING));  // the template holds no more than a run
    CHECK_FALSE(has_rlimit(t, RLIMIT_DATA));  // a run's own limit: it could not be raised again
    CHECK_FALSE(has_rlimit(t, RLIMIT_CPU));
}

TEST_CASE("every run from a template gets a user namespace of its own, whatever its client sent") {
    RunRequest r = plan_run_request(sample_plan(), false);
    r.lockdown.own_user_namespace = false;
    CHECK(decode_request(encode_request(r)).lockdown.own_user_namespace);
}

TEST_CASE("a fresh jail joins a new keyring; every run from a template keeps the template's, whatever its client sent") {
    RunPlan p = sample_plan();
    CHECK(plan_lockdown(p).new_keyring);
    CHECK(plan_child(p).lockdown.new_keyring);
    RunRequest r = plan_run_request(p, false);
    r.lockdown.new_keyring = true;
    CHECK_FALSE(decode_request(encode_request(r)).lockdown.new_keyring);
}

TEST_CASE("--net allow's sockets reach both doors; a template binds none, and may bind port 53 for its runs") {
    RunPlan p = sample_plan();
    p.policy.net = NetMode::Allow;
    p.policy.egress.hosts = {parse_allow_host("pypi.org", "--allow-host")};
    p.egress = plan_egress(p.policy.egress);
    const Lockdown planned = plan_lockdown(p);
    REQUIRE(planned.egress_sockets.size() == 3);  // the resolver, pypi.org:80 and :443
    CHECK(planned.egress_sockets[0].udp);
    CHECK(plan_child(p).lockdown == planned);
    CHECK(as_template_gets(p) == planned);
    CHECK_FALSE(planned.template_binds_low_ports);
    // The request carries what the server holds to its allowlist (serve_bounds.hpp).
    RunRequest r = plan_run_request(p, false);
    REQUIRE(r.egress.hosts.size() == 1);
    CHECK(r.egress.hosts[0].name == "pypi.org");

    p.is_template = true;
    const Lockdown t = plan_lockdown(p);
    CHECK(t.egress_sockets.empty());
    CHECK(t.template_binds_low_ports);
    p.policy.net = NetMode::Loopback;
    CHECK_FALSE(plan_lockdown(p).template_binds_low_ports);
    Lockdown other = t;
    other.template_binds_low_ports = false;
    CHECK_FALSE(other == t);
}

TEST_CASE("a fresh jail writes only the user-namespace counts its program could reach; a template all") {
    auto names = [](const std::vector<UsernsLimit>& ls) {
        std::vector<std::string> out;
        for (const auto& l : ls) out.push_back(l.name);
        return out;
    };
    RunPlan p = sample_plan();
    // A fresh jail: no capability anywhere and no user namespace of its own to make, so of the
    // namespace counts only user.max_user_namespaces (0) is written.
    const std::vector<std::string> fresh = {"max_inotify_instances", "max_inotify_watches", "max_fanotify_groups",
                                            "max_fanotify_marks", "max_user_namespaces"};
    CHECK(names(plan_child(p).userns_limits) == fresh);
    for (const auto& l : plan_child(p).userns_limits)
        if (std::string(l.name) == "max_user_namespaces") CHECK(l.value == 0);
    // A template keeps CAP_SYS_ADMIN for its runs: every count is written, the namespaces'
    // raised to what its runs need (but time namespaces: none).
    p.is_template = true;
    auto t = plan_child(p).userns_limits;
    CHECK(names(t).size() == p.limits.userns_limits.size());
    for (const auto& l : t) {
        std::string n = l.name;
        if (n == "max_time_namespaces") CHECK(l.value == 0);
        else if (n.find("_namespaces") != std::string::npos) CHECK(l.value > 0);
    }
}

TEST_CASE("a fresh jail leaves the other namespace counts out only while it writes max_user_namespaces=0") {
    // Attack: a plan whose program could make a user namespace (and hold CAP_SYS_ADMIN in it);
    // the mount, pid, net, ... counts of 0 are then what caps it, and must all be written.
    const std::vector<UsernsLimit> some_allowed = {{"max_inotify_instances", 128, true},
                                                   {"max_user_namespaces", 1, true},
                                                   {"max_mnt_namespaces", 0, true},
                                                   {"max_net_namespaces", 0, true},
                                                   {"max_time_namespaces", 0, false}};
    CHECK(userns_limits_to_write(some_allowed, false).size() == some_allowed.size());
    std::vector<UsernsLimit> unwritten = some_allowed;
    unwritten.erase(unwritten.begin() + 1);  // no user.max_user_namespaces at all
    CHECK(userns_limits_to_write(unwritten, false).size() == unwritten.size());
    std::vector<UsernsLimit> optional = some_allowed;
    optional[1] = {"max_user_namespaces", 0, false};  // skipped on a kernel without it
    CHECK(userns_limits_to_write(optional, false).size() == optional.size());
    std::vector<UsernsLimit> none = some_allowed;
    none[1].value = 0;
    CHECK(userns_limits_to_write(none, false).size() == 2);  // inotify and the user namespaces
}
