// A run from a template: the request's encoding (both ways, and every refusal of a malformed
// one) and which of a fresh jail's mounts a run from a template makes.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>

#include "error.hpp"
#include "mountplan.hpp"
#include "profile.hpp"
#include "fixtures.hpp"
#include "run_request.hpp"
#include "shipped_sets.hpp"
#include "template_protocol.hpp"

using namespace pyjail;
using pyjail::test::refusal;

namespace {

RunRequest sample() {
    RunRequest r;
    r.command = parse_python_command({"python", "-u", "-X", "dev", "-Wignore", "/work/job.py", "a b"});
    r.env = {"PATH=/usr/bin", "HOME=/tmp"};
    r.lockdown.hostname = "pyjail";
    r.lockdown.loopback_up = true;
    r.lockdown.rlimits = {{RLIMIT_NOFILE, 1024, "RLIMIT_NOFILE"}, {RLIMIT_CPU, 10, "RLIMIT_CPU", 11}};
    r.mounts.ops = {{OpKind::Tmpfs, "tmp", -1, "", MS_NOSUID, "size=1M", 0, false},
                {OpKind::Bind, "work", -1, "tmp/.work", MS_BIND, "", 0, false},
                {OpKind::Copy, "work/job.py", 1, "", 0, "", 0444, false},
                {OpKind::Bind, "proc/keys", -1, "/dev/null", MS_BIND, "", 0, true}};
    r.lockdown.seccomp_filter = {{0x20, 0, 0, 4}, {0x06, 0, 0, 0x7fff0000}};
    r.cgroup_files = {{"memory.max", "1048576"}};
    r.rootfs = "/usr/lib/pyjail/rootfs";
    r.has_script = true;
    r.seccomp_allow = {"read", "write"};
    r.net = 1;
    r.wall_time = 2.5;
    r.cpu_time = 1;
    r.output = 4096;
    return r;
}

}  // namespace

TEST_CASE("a run request survives its encoding whole") {
    RunRequest r = sample();
    RunRequest d = decode_request(encode_request(r));
    CHECK(d.command.kind == PythonKind::File);
    CHECK(d.command.target == "/work/job.py");
    CHECK(d.command.args == std::vector<std::string>{"a b"});
    CHECK(d.command.options == std::vector<PythonOption>{{'u', ""}, {'X', "dev"}, {'W', "ignore"}});
    CHECK(d.env == r.env);
    CHECK(d.mounts.cwd == "/work");
    CHECK(d.lockdown.loopback_up);
    REQUIRE(d.lockdown.rlimits.size() == 2);
    CHECK(std::string(d.lockdown.rlimits[1].name) == "RLIMIT_CPU");
    CHECK(d.lockdown.rlimits[1].hard == 11);
    REQUIRE(d.mounts.ops.size() == 4);
    CHECK(d.mounts.ops[1].source_path == "tmp/.work");
    CHECK(d.mounts.ops[2].kind == OpKind::Copy);
    CHECK(d.mounts.ops[2].mode == 0444);
    CHECK(d.mounts.ops[3].if_exists);
    REQUIRE(d.lockdown.seccomp_filter.size() == 2);
    CHECK(d.lockdown.seccomp_filter[1].k == 0x7fff0000u);
    CHECK(d.cgroup_files == r.cgroup_files);
    CHECK(d.has_script);
    CHECK_FALSE(d.into_cgroup);
    CHECK(request_fd_count(d) == 5);
    CHECK(d.seccomp_allow == r.seccomp_allow);
    CHECK(d.net == 1);
    CHECK(d.wall_time == 2.5);
    CHECK(d.cpu_time == 1);
    CHECK(d.output == 4096);
}

TEST_CASE("a malformed run request is refused, never half read") {
    std::string good = encode_request(sample());
    CHECK(refusal(good) == "");
    CHECK(refusal("") != "");
    CHECK(refusal(good.substr(0, good.size() - 1)) != "");
    for (std::size_t cut : {std::size_t{3}, std::size_t{20}, good.size() / 2})
        CHECK(refusal(good.substr(0, cut)) != "");
    CHECK(refusal(good + "x").find("bytes after the end") != std::string::npos);
    std::string wrong = good;
    wrong[4] = 'X';  // inside the magic
    CHECK(refusal(wrong).find("not a run request") != std::string::npos);

    // Mounts only over the run's own directories; no "..", no symlinks, no bind from "..".
    for (auto target : {"usr", "", "/tmp", "tmp/../etc", "work/", "procfoo", "dev"}) {
        RunRequest r = sample();
        r.mounts.ops[0].target = target;
        INFO(target);
        CHECK(refusal(encode_request(r)) != "");
    }
    RunRequest up = sample();
    up.mounts.ops[1].source_path = "tmp/../../x";
    CHECK(refusal(encode_request(up)).find("unusable source") != std::string::npos);
    RunRequest link = sample();
    link.mounts.ops[0].kind = OpKind::Symlink;
    CHECK(refusal(encode_request(link)) != "");
    RunRequest nul = sample();
    nul.command.args[0] = std::string("a\0b", 3);
    CHECK(refusal(encode_request(nul)).find("NUL") != std::string::npos);
    RunRequest no_script = sample();
    no_script.has_script = false;
    CHECK(refusal(encode_request(no_script)).find("without a script") != std::string::npos);
    RunRequest cg = sample();
    cg.cgroup_files = {{"../cgroup.procs", "0"}};
    CHECK(refusal(encode_request(cg)) != "");
    RunRequest limit = sample();
    limit.lockdown.rlimits = {{12345, 1, "x"}};
    CHECK(refusal(encode_request(limit)).find("unknown rlimit") != std::string::npos);
    // A time that no bound can order (NaN passes every comparison) or a negative one.
    for (double t : {std::nan(""), -1.0, HUGE_VAL}) {
        RunRequest timed = sample();
        timed.wall_time = t;
        CHECK(refusal(encode_request(timed)).find("not a number of seconds") != std::string::npos);
        timed = sample();
        timed.cpu_time = t;
        CHECK(refusal(encode_request(timed)).find("not a number of seconds") != std::string::npos);
    }
    // The command: a kind the template runs, with the target that kind has, and only the
    // interpreter options a run from a template honours.
    RunRequest kind = sample();
    kind.command.kind = static_cast<PythonKind>(4);
    CHECK(refusal(encode_request(kind)) == "an unknown kind of command");
    RunRequest nameless = sample();
    nameless.command.target.clear();
    CHECK(refusal(encode_request(nameless)) == "a script or module without a name");
    RunRequest stdin_target = sample();
    stdin_target.command.kind = PythonKind::Stdin;
    CHECK(refusal(encode_request(stdin_target)) == "a program from stdin with a target");
    for (PythonOption o : {PythonOption{'O', ""}, PythonOption{'X', "importtime"}, PythonOption{'S', ""},
                           PythonOption{'c', "x"}, PythonOption{'-', "help"}, PythonOption{'\x7f', ""}}) {
        RunRequest opt = sample();
        opt.command.options.push_back(o);
        INFO(o.letter, o.value);
        CHECK(refusal(encode_request(opt)) == "an interpreter option a run from a template cannot honour");
    }
    RunRequest valued = sample();
    valued.command.options.push_back({'u', "x"});
    CHECK(refusal(encode_request(valued)) == "a value for an interpreter option that takes none");
}

TEST_CASE("a run from a template makes the fresh jail's own directories, and no host bind") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("", "p.toml"));
    Policy policy = make_policy(s, {"python3", "x.py"}, "/home/u");
    MountFacts facts;
    facts.rootfs_top = {{"bin", RootfsEntry::Kind::Symlink, "usr/bin"}, {"dev", RootfsEntry::Kind::Dir, ""},
                        {"etc", RootfsEntry::Kind::Dir, ""},          {"proc", RootfsEntry::Kind::Dir, ""},
                        {"tmp", RootfsEntry::Kind::Dir, ""},          {"usr", RootfsEntry::Kind::Dir, ""},
                        {"work", RootfsEntry::Kind::Dir, ""}};
    facts.script_real_path = "/home/u/x.py";
    MountPlan plan = plan_mounts(policy, "/r", facts, std::string("/home/u/x.py"));
    std::vector<MountOp> ops = plan_forked_mounts(plan);
    auto has = [&](OpKind kind, const std::string& target) {
        return std::any_of(ops.begin(), ops.end(), [&](const MountOp& o) { return o.kind == kind && o.target == target; });
    };
    CHECK(has(OpKind::Tmpfs, "tmp"));
    CHECK(has(OpKind::Proc, "proc"));
    CHECK(has(OpKind::Bind, "work"));
    CHECK(has(OpKind::Bind, "dev/shm"));
    CHECK(has(OpKind::Devpts, "dev/pts"));
    CHECK(has(OpKind::Copy, "work/x.py"));
    CHECK(has(OpKind::Bind, "proc/keys"));  // the masks too
    // The masked directories' source made read-only before them: each mask copies its flags.
    auto at = [&](OpKind kind, const std::string& target) {
        return std::find_if(ops.begin(), ops.end(), [&](const MountOp& o) { return o.kind == kind && o.target == target; }) -
               ops.begin();
    };
    CHECK(at(OpKind::Remount, "tmp/.empty") < at(OpKind::Bind, "proc/acpi"));
    CHECK(at(OpKind::Bind, "tmp/.empty") < at(OpKind::Remount, "tmp/.empty"));
    CHECK(at(OpKind::Mkdir, "tmp/.empty") < at(OpKind::Bind, "tmp/.empty"));
    for (const auto& op : ops) {
        INFO(op.target);
        CHECK_FALSE(op.target.empty());  // never the root
        CHECK(op.target != "dev");       // the template's /dev stays
        CHECK((op.kind != OpKind::Bind || op.source_slot < 0));
    }
    // Every op it plans passes the template's own check.
    RunRequest r = sample();
    r.mounts.ops = ops;
    CHECK_NOTHROW(decode_request(encode_request(r)));

    Settings with_bind = s;
    with_bind["ro-bind"].push_back({"/srv/data:/data", Source::CommandLine, "--ro-bind"});
    Policy bound = make_policy(with_bind, {"python3", "x.py"}, "/home/u");
    BindFacts data;
    data.real_source = "/srv/data";
    facts.binds = {data};
    CHECK_THROWS_AS(plan_forked_mounts(plan_mounts(bound, "/r", facts, std::string("/home/u/x.py"))), UsageError);

    // --net allow: the resolver files are the template's (it serves --net allow too); the
    // run stages none of them in its /tmp, and its plan passes the template's check.
    Settings allow = s;
    allow["net"] = {{"allow", Source::CommandLine, "--net"}};
    allow["allow-host"].push_back({"pypi.org", Source::CommandLine, "--allow-host"});
    MountFacts etc = facts;
    etc.binds.clear();
    etc.rootfs_etc_files = {"resolv.conf", "hosts", "nsswitch.conf"};
    MountPlan egress_plan = plan_mounts(make_policy(allow, {"python3", "x.py"}, "/home/u"), "/r", etc,
                                        std::string("/home/u/x.py"));
    CHECK(std::any_of(egress_plan.ops.begin(), egress_plan.ops.end(),
                      [](const MountOp& o) { return o.kind == OpKind::Write; }));
    RunRequest via = sample();
    via.mounts.ops = plan_forked_mounts(egress_plan);
    for (const auto& op : via.mounts.ops) {
        INFO(op.target);
        CHECK(op.kind != OpKind::Write);
        CHECK(op.target.rfind("tmp/.net", 0) != 0);
    }
    CHECK_NOTHROW(decode_request(encode_request(via)));
}

TEST_CASE("the fuzz corpus's seed requests are ones a template accepts") {
    for (auto name : {"plain", "script", "masks", "egress", "python-options"}) {
        std::string bytes = slurp(std::string(PYJAIL_SOURCE_DIR) + "/tests/fuzz/corpus/run_request/" + name);
        INFO(name);
        REQUIRE_FALSE(bytes.empty());
        CHECK_NOTHROW(decode_request(bytes));
    }
}

TEST_CASE("a wiped request holds none of its bytes") {
    RunRequest r = sample();
    r.command.kind = PythonKind::Code;
    r.command.target = std::string(200, 'c');           // on the heap
    r.env.push_back("T=short");                         // in the string itself
    wipe_request(r);
    auto zeros = [](const std::string& s) {
        return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c == '\0'; });
    };
    CHECK(zeros(r.command.target));
    for (const auto& s : r.command.args) CHECK(zeros(s));
    for (const auto& o : r.command.options)
        if (!o.value.empty()) CHECK(zeros(o.value));
    for (const auto& s : r.env) CHECK(zeros(s));
    CHECK(zeros(r.mounts.cwd));
    CHECK(zeros(r.lockdown.hostname));
    CHECK(zeros(r.rootfs));
    for (const auto& op : r.mounts.ops) CHECK(zeros(op.target));
    for (const auto& [file, value] : r.cgroup_files) CHECK((zeros(file) && zeros(value)));
}

TEST_CASE("a serve connection's other end is trusted only if it is the same user or root") {
    CHECK(trusted_serve_peer(1000, 1000));
    CHECK(trusted_serve_peer(0, 1000));          // root's server, or root as a client
    CHECK(trusted_serve_peer(0, 0));
    CHECK_FALSE(trusted_serve_peer(1001, 1000)); // another user's server or client
    CHECK_FALSE(trusted_serve_peer(1000, 0));    // root gives nothing to a user's server
}

TEST_CASE("a run request carries --net allow's policy, and only the sockets it plans") {
    RunRequest r = sample();
    r.net = 2;  // NetMode::Allow
    r.egress.hosts = {parse_allow_host("pypi.org", "--allow-host"), parse_allow_host("*.svc.test:8080", "x")};
    r.egress.pins = {parse_net_resolve("pypi.org:127.0.0.1", "--net-resolve")};
    r.egress.bytes = 1 << 20;
    parse_net_dns("127.0.0.1:5353", "--net-dns", r.egress);
    r.lockdown.egress_sockets = egress_socket_specs(plan_egress(r.egress));
    r.lockdown.own_user_namespace = true;  // as decoding sets it
    r.lockdown.new_keyring = false;        // likewise
    RunRequest d = decode_request(encode_request(r));
    REQUIRE(d.egress.hosts.size() == 2);
    CHECK(d.egress.hosts[0].name == "pypi.org");
    CHECK(d.egress.hosts[0].ports == std::vector<std::uint16_t>{80, 443});
    CHECK(d.egress.hosts[1].name == "*.svc.test");
    REQUIRE(d.egress.pins.size() == 1);
    CHECK(dns::format_ipv4(d.egress.pins[0].address) == "127.0.0.1");
    CHECK(d.egress.bytes == std::optional<std::uint64_t>(1 << 20));
    CHECK(d.egress.dns_port == 5353);
    CHECK(d.lockdown.egress_sockets.size() == 1 + 2 + 8);
    CHECK(d.lockdown == r.lockdown);

    // Sockets that are not the policy's own: one more, one moved, or any without --net allow.
    RunRequest more = r;
    more.lockdown.egress_sockets.push_back({0x7f640063u, 22, false});
    CHECK(refusal(encode_request(more)) == "egress sockets that are not the allowed hosts' own");
    RunRequest moved = r;
    moved.lockdown.egress_sockets[1].address = 0x0a000001u;
    CHECK(refusal(encode_request(moved)) == "egress sockets that are not the allowed hosts' own");
    RunRequest loopback = r;
    loopback.net = 1;
    CHECK(refusal(encode_request(loopback)) == "egress settings without --net allow");
    RunRequest none = r;
    none.egress.hosts.clear();
    none.lockdown.egress_sockets = egress_socket_specs(plan_egress(none.egress));
    CHECK(refusal(encode_request(none)) == "--net allow without an allowed host");
    RunRequest address = r;
    address.egress.hosts[0].name = "10.0.0.1";
    CHECK(refusal(encode_request(address)).find("is not a host name with a domain") != std::string::npos);
    RunRequest port = r;
    port.egress.hosts[0].ports = {0};
    CHECK(refusal(encode_request(port)) == "an allowed host's port out of range");
}
