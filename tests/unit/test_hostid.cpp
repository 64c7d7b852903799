#include <doctest/doctest.h>

#include "error.hpp"
#include "hostid.hpp"

using namespace pyjail;

namespace {

HostIdFacts user_facts() {
    HostIdFacts f;
    f.invoker_uid = 1001;
    f.invoker_gid = 1002;
    f.invoker_name = "alice";
    f.subuid_text = "bob:100000:65536\nalice:165536:65536\n";
    f.subgid_text = "1001:300000:1000\n";
    f.newuidmap = "/usr/bin/newuidmap";
    f.newgidmap = "/usr/bin/newgidmap";
    f.runtime_dir = "/run/user/1001/pyjail-ids";
    return f;
}

}  // namespace

TEST_CASE("root's jails take one id each of the default range, binds idmapped to --host-user") {
    HostIdFacts f;
    f.host_binds = {"/srv/out"};
    HostIdPlan p = plan_host_ids(f);
    CHECK(p.kind == HostIdKind::OwnRange);
    CHECK(p.uids == kDefaultRootIdRange);
    CHECK(p.gids == kDefaultRootIdRange);
    CHECK(p.files_uid == 65534);
    CHECK(p.idmap_binds);
    CHECK(p.lock_dir == "/run/pyjail/ids");
    CHECK(p.shared_with.empty());
    IdMaps m = host_id_maps(p, 3);
    CHECK(m.uid_map == "1000 1879048195 1\n");
    CHECK(m.gid_map == "1000 1879048195 1\n");
    CHECK(idmapped_bind_map(65534, m.host_uid) == "65534 1879048195 1\n"
                                                  "0 0 65534\n"
                                                  "65535 65535 1878982660\n"
                                                  "1879048196 1879048196 2415919099\n");
    // below the files' owner, and next to it
    CHECK(idmapped_bind_map(500, 7) == "500 7 1\n0 0 7\n8 8 492\n501 501 4294966794\n");
    CHECK(idmapped_bind_map(0, 1) == "0 1 1\n2 2 4294967293\n");
    CHECK_THROWS_AS(host_id_maps(p, kDefaultRootIdRange.count), JailError);
    f.host_binds.clear();
    CHECK_FALSE(plan_host_ids(f).idmap_binds);
}

TEST_CASE("an explicit --host-user or --host-ids shared keeps root's jails one fixed user") {
    HostIdFacts f;
    f.host_user_explicit = true;
    f.host_user_uid = 12345;
    f.host_user_gid = 23456;
    HostIdPlan p = plan_host_ids(f);
    CHECK(p.kind == HostIdKind::HostUser);
    CHECK(host_id_maps(p, 0).uid_map == "1000 12345 1\n");
    CHECK(host_id_maps(p, 0).gid_map == "1000 23456 1\n");
    CHECK(p.shared_with == "host user uid 12345");
    f.host_user_explicit = false;
    f.setting = parse_host_ids("shared", "--host-ids");
    CHECK(plan_host_ids(f).kind == HostIdKind::HostUser);
}

TEST_CASE("--host-ids values") {
    CHECK(parse_host_ids("auto", "x").mode == HostIdsSetting::Mode::Auto);
    HostIdsSetting s = parse_host_ids("200000:10", "x");
    CHECK(s.mode == HostIdsSetting::Mode::Range);
    CHECK(s.range == IdRange{200000, 10});
    CHECK_THROWS_WITH_AS(parse_host_ids("0:10", "--host-ids"),
                         "--host-ids: 10 ids from 0 include uid 0 or pass 4294967294", UsageError);
    CHECK_THROWS_AS(parse_host_ids("4294967290:10", "x"), UsageError);
    CHECK_THROWS_AS(parse_host_ids("12", "x"), UsageError);
    CHECK_THROWS_AS(parse_host_ids("a:b", "x"), UsageError);
    CHECK_THROWS_AS(parse_host_ids("", "x"), UsageError);
}

TEST_CASE("a user with subordinate ranges: one id of them per jail, through newuidmap") {
    HostIdPlan p = plan_host_ids(user_facts());
    CHECK(p.kind == HostIdKind::Subordinate);
    CHECK(p.uids == IdRange{165536, 1000});  // as many as both ranges hold
    CHECK(p.gids == IdRange{300000, 1000});
    CHECK(p.files_uid == 1001);
    CHECK_FALSE(p.idmap_binds);
    CHECK(p.lock_dir == "/run/user/1001/pyjail-ids");
    IdMaps m = host_id_maps(p, 2);
    CHECK(m.uid_map == "1000 165538 1\n");
    CHECK(m.gid_map == "1000 300002 1\n");
    CHECK(newidmap_argv(p.newuidmap, 4321, m.uid_map) ==
          std::vector<std::string>{"/usr/bin/newuidmap", "4321", "1000", "165538", "1"});
    CHECK(newidmap_argv(p.newgidmap, 4321, m.gid_map) ==
          std::vector<std::string>{"/usr/bin/newgidmap", "4321", "1000", "300002", "1"});
}

TEST_CASE("a user's jail shares the user's ids, and says why, without a range, helpers, or with a bind") {
    HostIdFacts f = user_facts();
    f.subgid_text = "bob:1:2\n";
    HostIdPlan p = plan_host_ids(f);
    CHECK(p.kind == HostIdKind::Invoker);
    CHECK(host_id_maps(p, 0).uid_map == "1000 1001 1\n");
    CHECK(host_id_maps(p, 0).gid_map == "1000 1002 1\n");
    CHECK(p.shared_with == "the invoking user (uid 1001)");
    CHECK(p.why_shared.find("usermod --add-subuids") != std::string::npos);
    CHECK(p.why_shared.find("/etc/subgid") != std::string::npos);

    f = user_facts();
    f.newgidmap.clear();
    CHECK(plan_host_ids(f).why_shared.find("uidmap package") != std::string::npos);

    f = user_facts();
    f.host_binds = {"/home/alice/out"};
    p = plan_host_ids(f);
    CHECK(p.kind == HostIdKind::Invoker);
    CHECK(p.why_shared.find("/home/alice/out") != std::string::npos);

    f = user_facts();
    f.setting = parse_host_ids("shared", "x");
    CHECK(plan_host_ids(f).kind == HostIdKind::Invoker);
    f.setting = parse_host_ids("5000:10", "x");
    CHECK_THROWS_AS(plan_host_ids(f), UsageError);
}

TEST_CASE("subordinate ranges: by name or uid; ranges holding root or wrapping are skipped") {
    CHECK(find_subordinate_range("alice:0:10\nalice:5:10\n", "alice", 7) == IdRange{5, 10});
    CHECK(find_subordinate_range("7:4294967290:100\n7:9:1", "x", 7) == IdRange{9, 1});
    CHECK_FALSE(find_subordinate_range("alice:1:x\nalic:1:1\n:1:1\n", "alice", 7));
    CHECK_FALSE(find_subordinate_range("", "", 7));
    CHECK(passwd_name("root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n", 65534) == "nobody");
    CHECK(passwd_name("broken\n", 0).empty());
}

TEST_CASE("a user's lock directory") {
    CHECK(user_lock_dir("/run/user/7", 7) == "/run/user/7/pyjail-ids");
    CHECK(user_lock_dir(nullptr, 7) == "/tmp/pyjail-ids-7");
    CHECK(user_lock_dir("relative", 7) == "/tmp/pyjail-ids-7");
    // A run with a runtime directory locks in /tmp too, where the user's other runs lock.
    CHECK(user_lock_dir_also("/run/user/7", 7) == "/tmp/pyjail-ids-7");
    CHECK(user_lock_dir_also(nullptr, 7).empty());
    CHECK(user_lock_dir_also("relative", 7).empty());
}

TEST_CASE("a lock directory not the user's alone is refused, saying whose it is and the ways out") {
    using Kind = LockDirFacts::Kind;
    const std::string dir = "/tmp/pyjail-ids-1001";
    auto refusal = [&](LockDirFacts f, uid_t euid = 1001) {
        auto e = lock_dir_refusal(dir, f, euid);
        return e ? e->one_line() : std::string("none");
    };
    CHECK(refusal({Kind::Directory, 1001, "uid 1001 (alice)", 0700}) == "none");
    CHECK(refusal({Kind::Directory, 0, "uid 0 (root)", 0755}, 0) == "none");
    // Made first by another user, in the shared /tmp.
    CHECK(refusal({Kind::Directory, 65534, "uid 65534 (nobody)", 0700}) ==
          "host ids: /tmp/pyjail-ids-1001, where your jails lock their host ids, belongs to uid 65534 "
          "(nobody), not to you, so that user could hold or forge your jails' locks (another user made "
          "it first: root or its owner can remove it (rm -r /tmp/pyjail-ids-1001); until then --host-ids "
          "shared runs your jails as you, without a lock, or set XDG_RUNTIME_DIR to a directory of your "
          "own to lock there)");
    CHECK(refusal({Kind::Link, 65534, "uid 65534 (nobody)", 0777}).find(
              "belongs to uid 65534 (nobody), not to you (and is a symbolic link), so") != std::string::npos);
    CHECK(refusal({Kind::Other, 1001, "uid 1001 (alice)", 0600}) ==
          "host ids: /tmp/pyjail-ids-1001, where your jails lock their host ids, is not a directory "
          "(remove it (rm /tmp/pyjail-ids-1001): pyjail makes the directory again)");
    CHECK(refusal({Kind::Directory, 1001, "uid 1001 (alice)", 0755}) ==
          "host ids: /tmp/pyjail-ids-1001, where your jails lock their host ids, is open to others "
          "(mode 755), who could hold or forge your jails' locks (chmod 700 /tmp/pyjail-ids-1001)");
    CHECK(refusal({Kind::Directory, 0, "uid 0 (root)", 0775}, 0).find("(chmod go-w ") != std::string::npos);
}

TEST_CASE("root in a container keeps --host-user when its namespace lacks the range") {
    HostIdFacts f;
    f.own_uid_map = "         0     100000      65536\n";
    f.own_gid_map = f.own_uid_map;
    HostIdPlan p = plan_host_ids(f);
    CHECK(p.kind == HostIdKind::HostUser);
    CHECK(p.why_shared == "the ids 1879048192:65536 are not mapped in pyjail's user namespace (a container?)");
    f.setting = parse_host_ids("60000:100", "x");
    CHECK(plan_host_ids(f).kind == HostIdKind::OwnRange);
    f.setting = parse_host_ids("65500:100", "x");
    CHECK(plan_host_ids(f).kind == HostIdKind::HostUser);
    CHECK(range_is_mapped("", {5, 5}));
    CHECK(range_is_mapped("0 1000 10\n20 2000 10\n", {22, 8}));
    CHECK_FALSE(range_is_mapped("0 1000 10\n20 2000 10\n", {8, 4}));
    CHECK_FALSE(range_is_mapped("garbage\n", {1, 1}));
}
