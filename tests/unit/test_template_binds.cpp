// Host binds of a run from a template: which of a fresh jail's binds a run keeps and how it
// numbers them, how the request carries them (and refuses a malformed list), when a server
// takes them, and which opened sources a client refuses to hand over.
#include <doctest/doctest.h>
#include <linux/magic.h>
#include <sys/mount.h>

#include <algorithm>

#include "error.hpp"
#include "fixtures.hpp"
#include "mountplan.hpp"
#include "profile.hpp"
#include "run_request.hpp"
#include "serve_bounds.hpp"
#include "template_binds.hpp"

using namespace pyjail;
using pyjail::test::refusal;

namespace {

Policy policy_in_project(const std::vector<std::pair<std::string, std::string>>& options) {
    return test::policy_with(options, "/home/u/proj");
}

MountFacts facts_for(const Policy& p) {
    MountFacts facts;
    facts.rootfs_top = {{"dev", RootfsEntry::Kind::Dir, ""}, {"etc", RootfsEntry::Kind::Dir, ""},
                        {"proc", RootfsEntry::Kind::Dir, ""}, {"tmp", RootfsEntry::Kind::Dir, ""},
                        {"usr", RootfsEntry::Kind::Dir, ""},  {"work", RootfsEntry::Kind::Dir, ""}};
    for (const auto& b : all_binds(p)) {
        BindFacts f;
        f.real_source = b.source;
        facts.binds.push_back(f);
    }
    return facts;
}

// The request a client plans for `p` (run_plans.cpp: plan_run_request's mounts).
RunRequest request_for(const Policy& p) {
    MountPlan plan = plan_mounts(p, "/r", facts_for(p), std::nullopt);
    RunRequest r;
    r.command = parse_python_command({"python", "-c", "pass"});
    r.mounts.ops = plan_forked_mounts(plan);
    r.mounts.cwd = plan.cwd;
    plan_handed_binds(r, plan);
    return r;
}

const MountOp* op_at(const RunRequest& r, OpKind kind, const std::string& target) {
    for (const auto& op : r.mounts.ops)
        if (op.kind == kind && op.target == target) return &op;
    return nullptr;
}

}  // namespace

TEST_CASE("a run keeps its binds below /work and /tmp, numbered as they are handed over") {
    Policy p = policy_in_project({{"workdir", "/srv/job"}, {"ro-bind", "/srv/in:/tmp/in"}});
    RunRequest r = request_for(p);
    CHECK(r.binds == 2);
    REQUIRE(r.mounts.sources.size() == kFirstHandedSlot + 2);
    const MountOp* work = op_at(r, OpKind::Bind, "work");
    const MountOp* in = op_at(r, OpKind::Bind, "tmp/in");
    REQUIRE(work != nullptr);
    REQUIRE(in != nullptr);
    CHECK(r.mounts.sources[static_cast<std::size_t>(work->source_slot)].host_path == "/srv/job");
    CHECK(r.mounts.sources[static_cast<std::size_t>(in->source_slot)].host_path == "/srv/in");
    // Read-only as asked: the plan's remount follows each bind.
    CHECK(bound_writable(r.mounts, work->source_slot));
    CHECK_FALSE(bound_writable(r.mounts, in->source_slot));
    CHECK(request_fd_count(r) == 4 + 2);

    // The template and the server see no host path, only which op mounts which tree.
    RunRequest d = decode_request(encode_request(r));
    CHECK(d.binds == 2);
    REQUIRE(d.mounts.sources.size() == kFirstHandedSlot + 2);
    for (const auto& src : d.mounts.sources) CHECK(src.host_path.empty());
    CHECK(op_at(d, OpKind::Bind, "work")->source_slot == work->source_slot);
    CHECK(op_at(d, OpKind::Bind, "tmp/in")->source_slot == in->source_slot);
    CHECK(bound_writable(d.mounts, work->source_slot));
    CHECK_FALSE(bound_writable(d.mounts, in->source_slot));
    CHECK(request_fd_count(d) == 4 + 2);
}

TEST_CASE("a run binds nowhere but below /work and /tmp, and at most kMaxRunBinds paths") {
    CHECK_THROWS_WITH_AS(request_for(policy_in_project({{"ro-bind", "/srv/in:/data"}})),
                         "--via: a run from a template binds host paths only below /work and /tmp, not at /data",
                         UsageError);
    std::vector<std::pair<std::string, std::string>> many;
    for (std::uint32_t i = 0; i <= kMaxRunBinds; ++i)
        many.push_back({"ro-bind", "/srv/d" + std::to_string(i) + ":/tmp/d" + std::to_string(i)});
    CHECK_THROWS_AS(request_for(policy_in_project(many)), UsageError);
    many.pop_back();
    CHECK(request_for(policy_in_project(many)).binds == kMaxRunBinds);
}

TEST_CASE("a request's list of handed-over binds is checked") {
    RunRequest r = request_for(policy_in_project({{"workdir", "/srv/job"}}));
    REQUIRE(r.binds == 1);
    std::string good = encode_request(r);
    CHECK(refusal(good) == "");
    // The list comes after the two ids: count, then op indices; then the egress part, which
    // for a run without --net allow is 32 bytes (host, pin counts, the byte limit's flag and
    // value, an empty resolver, its port, the socket count).
    REQUIRE(r.egress.hosts.empty());
    const std::size_t egress_part = 32;
    auto with_tail = [&](std::vector<std::uint32_t> tail) {
        std::size_t list_end = good.size() - egress_part;
        std::string b = good.substr(0, list_end - 4 * (2 + 1 + r.binds));
        for (std::uint32_t v : tail) b.append(reinterpret_cast<const char*>(&v), sizeof v);
        return b + good.substr(list_end);
    };
    std::uint32_t work_index = 0;
    for (std::size_t i = 0; i < r.mounts.ops.size(); ++i)
        if (r.mounts.ops[i].kind == OpKind::Bind && r.mounts.ops[i].target == "work") work_index = static_cast<std::uint32_t>(i);
    CHECK(refusal(with_tail({0, 0, 1, work_index})) == "");
    // A bind from nothing that no tree comes for.
    CHECK(refusal(with_tail({0, 0, 0})) == "a bind from nothing: /work");
    // More trees than a run may have (their descriptors could not all come with it).
    CHECK(refusal(with_tail({0, 0, kMaxRunBinds + 1})) == "too many host binds");
    // A tree for an op that is no bind from nothing, for one twice, or past the ops.
    CHECK(refusal(with_tail({0, 0, 1, 0})).find("not a bind from nothing") != std::string::npos);
    CHECK(refusal(with_tail({0, 0, 2, work_index, work_index})).find("of one twice") != std::string::npos);
    CHECK(refusal(with_tail({0, 0, 1, 100000})) == "a host bind of no mount op");
}

TEST_CASE("a server takes a run's binds only with --allow-binds, and its own fixed ids") {
    Policy plain = policy_in_project({});
    RunRequest r = request_for(policy_in_project({{"workdir", "/srv/job"}}));
    r.files_uid = r.files_gid = 1000;
    ServeBounds b = serve_bounds(plain, plan_limits(plain.limits, false), std::nullopt);
    r.lockdown.rlimits = plan_limits(plain.limits, false).rlimits;
    r.output = plain.limits.output.value_or(0);
    r.wall_time = plain.wall_time;
    r.cpu_time = plain.limits.cpu_time;
    CHECK(beyond_bounds(r, b).value_or("").find("start pyjail serve with --allow-binds") != std::string::npos);

    Policy allowing = policy_in_project({{"allow-binds", "true"}});
    b = serve_bounds(allowing, plan_limits(allowing.limits, false), std::nullopt);
    CHECK(b.allow_binds);
    // A template with ids of a range: what runs write would not be the client's.
    HostIdPlan range;
    range.kind = HostIdKind::OwnRange;
    range.uids = range.gids = {1879048192u, 65536u};
    bind_ids_of(b, range);
    CHECK(beyond_bounds(r, b).value_or("").find("hold files of uid 1000, and this server's runs write as uid of a range") !=
          std::string::npos);
    HostIdPlan user;
    user.kind = HostIdKind::Invoker;
    user.uids = user.gids = {1000, 1};
    bind_ids_of(b, user);
    CHECK(beyond_bounds(r, b).value_or("") == "");
    r.files_uid = 65534;  // root's client, with --host-user nobody
    CHECK(beyond_bounds(r, b).value_or("").find("hold files of uid 65534") != std::string::npos);
    // A run without binds asks nothing of it.
    RunRequest none = r;
    none.binds = 0;
    CHECK(beyond_bounds(none, serve_bounds(plain, plan_limits(plain.limits, false), std::nullopt)).value_or("") == "");
}

TEST_CASE("a client hands over no kernel file system, and nothing a fresh jail would refuse") {
    Policy p = policy_in_project({{"ro-bind", "/srv/in:/tmp/in"}});
    const BindSpec& b = p.binds.at(0);
    const std::vector<std::string> homes = {"/home/u"};
    CHECK_FALSE(opened_source_refusal(p, b, "/srv/in", 0xEF53, {}, homes).has_value());
    CHECK(opened_source_refusal(p, b, "/proc", PROC_SUPER_MAGIC, {}, homes).value_or("") ==
          "--ro-bind: /proc is on procfs, the host's kernel state: a run from a template binds none of it");
    CHECK(opened_source_refusal(p, b, "/sys/fs/cgroup", CGROUP2_SUPER_MAGIC, {}, homes).has_value());
    // The name was /srv/in when planned; what was opened is judged by where it is now.
    CHECK(opened_source_refusal(p, b, "/", 0xEF53, {}, homes).value_or("").find("the whole host file system") !=
          std::string::npos);
    CHECK(opened_source_refusal(p, b, "/home/u", 0xEF53, {}, homes).value_or("").find("your home directory") !=
          std::string::npos);
    CHECK(opened_source_refusal(p, b, "/srv/keys", 0xEF53, {".ssh"}, homes).value_or("").find("credentials") !=
          std::string::npos);
    // Named on the command line with --allow-sensitive-bind, as a fresh jail allows it.
    Policy allowed = policy_in_project({{"ro-bind", "/srv/in:/tmp/in"}, {"allow-sensitive-bind", "true"}});
    CHECK_FALSE(opened_source_refusal(allowed, allowed.binds.at(0), "/home/u", 0xEF53, {}, homes).has_value());
    CHECK(opened_source_refusal(allowed, allowed.binds.at(0), "/proc", PROC_SUPER_MAGIC, {}, homes).has_value());
}

TEST_CASE("a run whose /work is a host directory gets its script in its own /tmp") {
    Policy p = policy_in_project({{"workdir", "/srv/job"}});
    MountFacts facts = facts_for(p);
    facts.script_real_path = "/srv/code/x.py";
    MountPlan plan = plan_mounts(p, "/r", facts, std::string("/srv/code/x.py"));
    REQUIRE(plan.script_jail_path == std::optional<std::string>("/script/x.py"));
    RunRequest r;
    r.command = parse_python_command({"python", "/script/x.py", "/script/x.py"});
    r.has_script = true;
    r.mounts.ops = plan_forked_mounts(plan);
    r.mounts.cwd = plan.cwd;
    plan_handed_binds(r, plan);
    relocate_run_script(r, plan);
    CHECK(r.command.target == "/tmp/.script/x.py");
    CHECK(r.command.args == std::vector<std::string>{"/script/x.py"});  // only the script's
    const MountOp* copy = op_at(r, OpKind::Copy, "tmp/.script/x.py");
    REQUIRE(copy != nullptr);
    CHECK(copy->mode == 0444);
    CHECK(op_at(r, OpKind::Mkdir, "tmp/.script") != nullptr);
    CHECK(refusal(encode_request(r)) == "");
}
