#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "error.hpp"
#include "mountplan.hpp"
#include "profile.hpp"

using namespace pyjail;

namespace {

// A bind's facts as planning finds them: the rest as for a plain bind.
BindFacts bind_facts(bool is_dir, std::string source, unsigned long locked_flags, bool target_in_rootfs) {
    BindFacts f;
    f.is_dir = is_dir;
    f.real_source = std::move(source);
    f.locked_flags = locked_flags;
    f.target_in_rootfs = target_in_rootfs;
    return f;
}

}  // namespace

namespace {

Policy policy_from(std::string_view profile) {
    Settings s = default_settings();
    apply_profile(s, parse_profile(profile, "p.toml"));
    return make_policy(s, {"python3", "x.py"}, "/home/u/proj");
}

MountFacts rootfs_facts() {
    MountFacts f;
    f.rootfs_top = {{"bin", RootfsEntry::Kind::Symlink, "usr/bin"},
                    {"etc", RootfsEntry::Kind::Dir, ""},
                    {"proc", RootfsEntry::Kind::Dir, ""},
                    {"tmp", RootfsEntry::Kind::Dir, ""},
                    {"usr", RootfsEntry::Kind::Dir, ""}};
    return f;
}

std::vector<std::string> lines(const MountPlan& plan) {
    std::vector<std::string> out;
    for (const auto& op : plan.ops) out.push_back(describe_op(op, plan));
    return out;
}

bool has(const std::vector<std::string>& v, const std::string& line) {
    return std::find(v.begin(), v.end(), line) != v.end();
}

std::size_t index_of(const std::vector<std::string>& v, const std::string& line) {
    return static_cast<std::size_t>(std::find(v.begin(), v.end(), line) - v.begin());
}

}  // namespace

TEST_CASE("strict: rootfs read-only, private /tmp and /work, the script copied in") {
    Policy p = policy_from("tmpfs-size = \"1M\"\n");
    MountFacts f = rootfs_facts();
    f.script_real_path = "/home/u/proj/x.py";
    MountPlan plan = plan_mounts(p, "/rootfs", f, std::string("/home/u/proj/x.py"));
    auto l = lines(plan);

    CHECK(l.front() == "tmpfs    / (nosuid,nodev,mode=0755,size=1048576,nr_inodes=1024)");
    CHECK(has(l, "bind     /usr <- /rootfs/usr"));
    CHECK(has(l, "remount  /usr (ro,nosuid,nodev)"));
    CHECK(has(l, "bind     /etc <- /rootfs/etc"));
    CHECK(has(l, "symlink  /bin -> usr/bin"));
    // The rootfs's own /proc and /tmp are replaced by the jail's.
    CHECK_FALSE(has(l, "bind     /proc <- /rootfs/proc"));
    CHECK_FALSE(has(l, "bind     /tmp <- /rootfs/tmp"));
    CHECK(has(l, "proc     /proc (nosuid,nodev,noexec)"));
    // One scratch tmpfs with an inode cap: /tmp, /dev/shm and /work are its directories, so
    // the size is the jail's total.
    CHECK(has(l, "tmpfs    /tmp (nosuid,nodev,mode=0755,size=1048576,nr_inodes=1024)"));
    CHECK(has(l, "bind     /work <- jail:/tmp/.work"));
    CHECK(has(l, "bind     /dev/shm <- jail:/tmp/.shm"));
    CHECK(l.back() != "bind     /tmp <- jail:/tmp/.tmp");
    CHECK(index_of(l, "bind     /work <- jail:/tmp/.work") < index_of(l, "bind     /tmp <- jail:/tmp/.tmp"));
    CHECK(index_of(l, "bind     /dev/shm <- jail:/tmp/.shm") < index_of(l, "bind     /tmp <- jail:/tmp/.tmp"));
    CHECK(std::count_if(l.begin(), l.end(), [](const std::string& s) {
              return s.rfind("tmpfs", 0) == 0 && s.find("size=1048576") != std::string::npos;
          }) == 2);  // the root (read-only at the end) and the scratch space
    CHECK(has(l, "bind     /dev/null <- /dev/null"));
    CHECK_FALSE(has(l, "bind     /dev/tty <- /dev/tty"));
    CHECK(l.back() == "copy     /work/x.py <- /home/u/proj/x.py (mode 444)");
    CHECK(plan.script_jail_path == "/work/x.py");
    CHECK(plan.cwd == "/work");
    // /dev is made read-only after it is filled and before /dev/shm is mounted on it.
    CHECK(index_of(l, "remount  /dev (ro,nosuid,noexec)") <
          index_of(l, "bind     /dev/shm <- jail:/tmp/.shm"));
    // Nothing from the host is bound but the rootfs and the devices.
    for (const auto& line : l)
        if (line.rfind("bind", 0) == 0)
            CHECK_MESSAGE((line.find("<- /rootfs/") != std::string::npos ||
                           line.find("<- /dev/") != std::string::npos ||
                           line.find("<- jail:/") != std::string::npos),
                          line);
}

TEST_CASE("the rootfs mount's locked flags are kept") {
    Policy p = policy_from("");
    MountFacts f = rootfs_facts();
    f.rootfs_locked_flags = locked_mount_flags(ST_NOEXEC | ST_NOATIME);
    CHECK(f.rootfs_locked_flags == (MS_NOEXEC | MS_NOATIME));
    auto l = lines(plan_mounts(p, "/rootfs", f, std::nullopt));
    CHECK(has(l, "remount  /usr (ro,nosuid,nodev,noexec,noatime)"));
}

TEST_CASE("standard: the current directory read-only at /work; a script there runs in place") {
    Policy p = policy_from("ro-bind = [\".:/work\"]\n");
    MountFacts f = rootfs_facts();
    f.binds = {bind_facts(true, "/home/u/proj", 0, false)};
    f.script_real_path = "/home/u/proj/sub/x.py";
    MountPlan plan = plan_mounts(p, "/rootfs", f, std::string("/home/u/proj/sub/x.py"));
    auto l = lines(plan);
    CHECK_FALSE(has(l, "bind     /work <- jail:/tmp/.work"));
    CHECK_FALSE(has(l, "mkdir    /tmp/.work"));
    CHECK(has(l, "bind     /work <- /home/u/proj"));
    CHECK(has(l, "remount  /work (ro,nosuid,nodev)"));
    CHECK(plan.script_jail_path == "/work/sub/x.py");
    CHECK(std::none_of(l.begin(), l.end(), [](const std::string& s) { return s.rfind("copy", 0) == 0; }));
}

TEST_CASE("a script outside every bind is copied into the read-only root when /work is a host dir") {
    Policy p = policy_from("workdir = \"out\"\n");
    MountFacts f = rootfs_facts();
    // The rootfs has its own (empty) /work: the jail owns that name, so the mount point must
    // still be made in the new root.
    f.rootfs_top.push_back({"work", RootfsEntry::Kind::Dir, ""});
    f.binds = {bind_facts(true, "/home/u/proj/out", 0, true)};
    f.script_real_path = "/opt/jobs/x.py";
    MountPlan plan = plan_mounts(p, "/rootfs", f, std::string("/opt/jobs/x.py"));
    auto l = lines(plan);
    CHECK(has(l, "mkdir    /work"));
    CHECK(has(l, "bind     /work <- /home/u/proj/out"));
    CHECK(has(l, "remount  /work (nosuid,nodev)"));  // writable
    CHECK(has(l, "copy     /script/x.py <- /opt/jobs/x.py (mode 444)"));
    CHECK(plan.script_jail_path == "/script/x.py");
}

TEST_CASE("binds: parents before children, mount points created unless the rootfs has them") {
    Policy p = policy_from("ro-bind = [\"/data/a:/mnt/a/b\", \"/data/b:/mnt/a\", \"/etc/x.conf:/etc/x.conf\"]\n");
    MountFacts f = rootfs_facts();
    f.binds = {bind_facts(true, "/data/a", 0, false), bind_facts(true, "/data/b", 0, false), bind_facts(false, "/etc/x.conf", 0, true)};
    f.binds[0].target_in_enclosing = true;  // /data/b/b: /mnt/a/b's mount point, in /mnt/a's source
    auto l = lines(plan_mounts(p, "/rootfs", f, std::nullopt));
    CHECK(index_of(l, "bind     /mnt/a <- /data/b") < index_of(l, "bind     /mnt/a/b <- /data/a"));
    CHECK(has(l, "mkdir    /mnt/a"));
    CHECK_FALSE(has(l, "mkdir    /mnt/a/b"));
    CHECK(has(l, "bind     /etc/x.conf <- /etc/x.conf"));
    CHECK_FALSE(has(l, "mkfile   /etc/x.conf"));
}

TEST_CASE("a bind inside another: its mount point is that bind's, refused at plan time where it cannot be made") {
    // standard's read-only /work: a missing mount point could only fail in the jail, with
    // "mkfile: cannot create mount point /work/data: Read-only file system".
    Policy p = policy_from("ro-bind = [\".:/work\", \"/d/data.csv:/work/data\"]\n");
    CHECK(enclosing_bind(all_binds(p), 1) == std::optional<std::size_t>(0));
    CHECK(enclosing_bind(all_binds(p), 0) == std::nullopt);
    MountFacts f = rootfs_facts();
    f.binds = {bind_facts(true, "/home/u/proj", 0, false), bind_facts(false, "/d/data.csv", 0, false)};
    CHECK_THROWS_WITH_AS(plan_mounts(p, "/rootfs", f, std::nullopt),
                         "p.toml:1: key 'ro-bind': /work/data lies inside /work, the read-only bind of "
                         "/home/u/proj (p.toml:1: key 'ro-bind'), which has no file to mount it on",
                         UsageError);
    try {
        (void)plan_mounts(p, "/rootfs", f, std::nullopt);
    } catch (const UsageError& e) {
        CHECK(e.one_line().find("(bind it elsewhere, e.g. /data, or create the file /home/u/proj/data "
                                "beforehand)") != std::string::npos);
    }
    // Where the host directory has it: bound onto it, nothing made.
    f.binds[1].target_in_enclosing = true;
    auto l = lines(plan_mounts(p, "/rootfs", f, std::nullopt));
    CHECK(has(l, "bind     /work/data <- /d/data.csv"));
    CHECK_FALSE(has(l, "mkfile   /work/data"));

    // A writable /work the jail's host user cannot write: nor can its pid 1 make the mount point.
    Policy w = policy_from("workdir = \"out\"\nro-bind = [\"/d/in:/work/in\"]\n");
    MountFacts g = rootfs_facts();
    g.binds = {bind_facts(true, "/d/in", 0, false), bind_facts(true, "/home/u/proj/out", 0, false)};
    g.binds[1].writable_by_host_user = false;
    CHECK_THROWS_WITH_AS(plan_mounts(w, "/rootfs", g, std::nullopt),
                         "p.toml:2: key 'ro-bind': /work/in lies inside /work, the bind of /home/u/proj/out "
                         "(p.toml:1: key 'workdir'), where its mount point would be made, but the jail's "
                         "host user cannot write that directory",
                         UsageError);
    g.binds[1].writable_by_host_user = true;
    g.binds[0].missing_in_enclosing = "in";
    MountPlan made = plan_mounts(w, "/rootfs", g, std::nullopt);
    CHECK(has(lines(made), "mkdir    /work/in"));
    REQUIRE(made.host_mount_points.size() == 1);
    CHECK(made.host_mount_points[0].host_dir == "/home/u/proj/out");
    CHECK(made.host_mount_points[0].made == std::vector<std::string>{"in"});
}

TEST_CASE("what pid 1 makes in a writable bind's host directory is listed, deepest first, for removal") {
    Policy w = policy_from("workdir = \"out\"\nro-bind = [\"/d/x:/work/a/b/in\", \"/d/y:/work/keep/in\", "
                           "\"/d/z:/work/there\"]\n");
    MountFacts g = rootfs_facts();
    g.binds = {bind_facts(true, "/d/x", 0, false), bind_facts(true, "/d/y", 0, false), bind_facts(false, "/d/z", 0, false),
               bind_facts(true, "/home/u/proj/out", 0, false)};
    g.binds[0].missing_in_enclosing = "a";        // neither a nor a/b is there: pid 1 makes both
    g.binds[1].missing_in_enclosing = "keep/in";  // keep is the user's: it stays
    g.binds[2].target_in_enclosing = true;        // there already: nothing made, nothing removed
    MountPlan plan = plan_mounts(w, "/rootfs", g, std::nullopt);
    REQUIRE(plan.host_mount_points.size() == 2);  // in the order pid 1 makes them: the shallower first
    CHECK(plan.host_mount_points[0].made == std::vector<std::string>{"keep/in"});
    CHECK(plan.host_mount_points[1].made == std::vector<std::string>{"a/b/in", "a/b", "a"});
    CHECK_FALSE(has(lines(plan), "mkfile   /work/there"));
    // Nothing is made on the host without a bind around the target.
    Policy s = policy_from("ro-bind = [\"/d/x:/mnt/x\"]\n");
    MountFacts h = rootfs_facts();
    h.binds = {bind_facts(true, "/d/x", 0, false)};
    CHECK(plan_mounts(s, "/rootfs", h, std::nullopt).host_mount_points.empty());
}

TEST_CASE("binds that cannot be placed fail at plan time") {
    Policy p = policy_from("ro-bind = [\"/data:/usr/data\"]\n");
    MountFacts f = rootfs_facts();
    f.binds = {bind_facts(true, "/data", 0, false)};
    CHECK_THROWS_WITH_AS(plan_mounts(p, "/rootfs", f, std::nullopt),
                         "p.toml:1: key 'ro-bind': /usr/data does not exist in the rootfs, and "
                         "/usr is read-only, so it cannot be created",
                         UsageError);

    Policy w = policy_from("bind = [\"/ro:/mnt/ro\"]\n");
    MountFacts g = rootfs_facts();
    g.binds = {bind_facts(true, "/ro", MS_RDONLY, false)};
    CHECK_THROWS_WITH_AS(plan_mounts(w, "/rootfs", g, std::nullopt),
                         "p.toml:1: key 'bind': /ro is on a read-only filesystem, so it cannot "
                         "be bound writable",
                         UsageError);
}

namespace {
// A rootfs like the default one: it has the jail's own mount points.
MountFacts full_rootfs_facts() {
    MountFacts f = rootfs_facts();
    f.rootfs_top.push_back({"dev", RootfsEntry::Kind::Dir, ""});
    f.rootfs_top.push_back({"work", RootfsEntry::Kind::Dir, ""});
    return f;
}
bool tmpfs_root(const std::vector<std::string>& l) {
    return l.front().rfind("tmpfs    / (", 0) == 0;
}
}  // namespace

TEST_CASE("a rootfs with the jail's mount points is the root itself: one bind, read-only") {
    Policy p = policy_from("");
    MountFacts f = full_rootfs_facts();
    f.rootfs_locked_flags = MS_NOATIME;
    f.script_real_path = "/home/u/proj/x.py";
    MountPlan plan = plan_mounts(p, "/rootfs", f, std::string("/home/u/proj/x.py"));
    auto l = lines(plan);
    CHECK(l.front() == "bind     / <- /rootfs");
    CHECK(plan.root_flags == (MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOATIME));
    // No mount point is made (the root will be read-only): the rootfs has them all.
    CHECK(std::none_of(l.begin(), l.end(), [](const std::string& s) {
        return s.rfind("mkdir    /proc", 0) == 0 || s == "mkdir    /tmp" ||
               s.rfind("mkdir    /work", 0) == 0 || s.rfind("mkdir    /dev ", 0) == 0 ||
               s == "mkdir    /dev";
    }));
    CHECK_FALSE(has(l, "bind     /usr <- /rootfs/usr"));
    CHECK(has(l, "proc     /proc (nosuid,nodev,noexec)"));
    CHECK(has(l, "bind     /work <- jail:/tmp/.work"));
    CHECK(l.back() == "copy     /work/x.py <- /home/u/proj/x.py (mode 444)");
    // Binds onto paths the rootfs has, or inside the jail's tmpfs mounts, keep it so.
    Policy b = policy_from("ro-bind = [\"/etc/x.conf:/etc/x.conf\", \"/data:/tmp/data\"]\nbind = [\"/out:/work\"]\n");
    f.binds = {bind_facts(false, "/etc/x.conf", 0, true), bind_facts(true, "/data", 0, false), bind_facts(true, "/out", 0, false)};
    f.script_real_path = "/out/x.py";
    auto lb = lines(plan_mounts(b, "/rootfs", f, std::string("/out/x.py")));
    CHECK(lb.front() == "bind     / <- /rootfs");
    CHECK(has(lb, "mkdir    /tmp/data"));
    CHECK_FALSE(has(lb, "mkdir    /work"));
    CHECK(has(lb, "bind     /work <- /out"));
}

TEST_CASE("a mount point the rootfs lacks makes the root a tmpfs") {
    MountFacts f = full_rootfs_facts();
    // A bind to a new top-level path.
    Policy mnt = policy_from("ro-bind = [\"/data:/mnt/data\"]\n");
    f.binds = {bind_facts(true, "/data", 0, false)};
    auto l = lines(plan_mounts(mnt, "/rootfs", f, std::nullopt));
    CHECK(tmpfs_root(l));
    CHECK(has(l, "mkdir    /mnt/data"));
    CHECK(has(l, "bind     /usr <- /rootfs/usr"));
    // A script outside every bind while /work is a host directory: it goes to /script.
    Policy w = policy_from("workdir = \"out\"\n");
    f.binds = {bind_facts(true, "/home/u/proj/out", 0, true)};
    f.script_real_path = "/opt/jobs/x.py";
    CHECK(tmpfs_root(lines(plan_mounts(w, "/rootfs", f, std::string("/opt/jobs/x.py")))));
    // A rootfs without /work.
    MountFacts no_work = rootfs_facts();
    no_work.rootfs_top.push_back({"dev", RootfsEntry::Kind::Dir, ""});
    CHECK(tmpfs_root(lines(plan_mounts(policy_from(""), "/rootfs", no_work, std::nullopt))));
}

TEST_CASE("/proc: keys, the kernel command line and host internals are masked; /proc/sys read-only") {
    auto l = lines(plan_mounts(policy_from(""), "/rootfs", rootfs_facts(), std::nullopt));
    auto after_proc = [&](const std::string& line) {
        CHECK_MESSAGE(has(l, line), line);
        CHECK_MESSAGE(index_of(l, "proc     /proc (nosuid,nodev,noexec)") < index_of(l, line), line);
    };
    for (const char* f : {"keys", "key-users", "cmdline", "kallsyms", "timer_list", "sched_debug",
                          "sysrq-trigger", "latency_stats"})
        after_proc(fmt::format("bind     /proc/{} <- /dev/null (if present)", f));
    // Masked directories show one empty directory of the scratch tmpfs (covered by /tmp later),
    // made a read-only mount before the first mask: each bind copies its flags.
    CHECK(index_of(l, "mkdir    /tmp/.empty") < index_of(l, "bind     /tmp/.empty <- jail:/tmp/.empty"));
    CHECK(index_of(l, "bind     /tmp/.empty <- jail:/tmp/.empty") + 1 ==
          index_of(l, "remount  /tmp/.empty (ro,nosuid,nodev,noexec)"));
    CHECK(index_of(l, "remount  /tmp/.empty (ro,nosuid,nodev,noexec)") <
          index_of(l, "bind     /proc/acpi <- jail:/tmp/.empty (if present)"));
    CHECK(index_of(l, "bind     /proc/driver <- jail:/tmp/.empty (if present)") <
          index_of(l, "bind     /tmp <- jail:/tmp/.tmp"));
    for (const char* d : {"acpi", "asound", "scsi", "driver"}) {
        after_proc(fmt::format("bind     /proc/{} <- jail:/tmp/.empty (if present)", d));
        CHECK_FALSE(has(l, fmt::format("remount  /proc/{} (ro,nosuid,nodev,noexec) (if present)", d)));
    }
    for (const char* d : {"sys", "bus", "fs", "irq"}) {
        after_proc(fmt::format("bind     /proc/{0} <- jail:/proc/{0} (if present)", d));
        after_proc(fmt::format("remount  /proc/{} (ro,nosuid,nodev,noexec) (if present)", d));
    }
    // What Python and numpy read stays.
    for (const char* keep : {"self", "cpuinfo", "meminfo", "stat"})
        for (const auto& line : l) CHECK_MESSAGE(line.find(fmt::format("/proc/{} ", keep)) == std::string::npos, line);
}

TEST_CASE("tmpfs inode caps scale with the size") {
    CHECK(tmpfs_inodes_for(1 << 20) == 1024);
    CHECK(tmpfs_inodes_for(64ULL << 20) == 8192);
    CHECK(tmpfs_inodes_for(1ULL << 30) == 131072);
    auto l = lines(plan_mounts(policy_from("tmpfs-size = \"64M\"\n"), "/rootfs", rootfs_facts(), std::nullopt));
    CHECK(has(l, "tmpfs    /dev (nosuid,noexec,mode=0755,size=64k,nr_inodes=64)"));
    CHECK(has(l, "tmpfs    /tmp (nosuid,nodev,mode=0755,size=67108864,nr_inodes=8192)"));
}

TEST_CASE("--net allow: the jail's resolver files cover the rootfs's, read-only, before /tmp is covered") {
    Policy p = policy_from("net = \"allow\"\nallow-host = [\"pypi.org\"]\n");
    MountFacts f = rootfs_facts();
    f.rootfs_etc_files = {"hosts", "nsswitch.conf"};  // this rootfs has no resolv.conf
    MountPlan plan = plan_mounts(p, "/rootfs", f, std::nullopt);
    auto l = lines(plan);
    CHECK(has(l, "write    /tmp/.net/nsswitch.conf (44 bytes, mode 444)"));
    CHECK(has(l, "bind     /etc/nsswitch.conf <- jail:/tmp/.net/nsswitch.conf"));
    CHECK(has(l, "remount  /etc/nsswitch.conf (ro,nosuid,nodev,noexec)"));
    CHECK(has(l, "bind     /etc/hosts <- jail:/tmp/.net/hosts"));
    CHECK_FALSE(has(l, "bind     /etc/resolv.conf <- jail:/tmp/.net/resolv.conf"));
    CHECK(index_of(l, "bind     /etc/hosts <- jail:/tmp/.net/hosts") > index_of(l, "bind     /etc <- /rootfs/etc"));
    CHECK(index_of(l, "bind     /etc/hosts <- jail:/tmp/.net/hosts") < index_of(l, "bind     /tmp <- jail:/tmp/.tmp"));
    for (const auto& op : plan.ops)
        if (op.kind == OpKind::Write && op.target == "tmp/.net/nsswitch.conf")
            CHECK(op.data.find("hosts: files dns\n") != std::string::npos);
    // Without --net allow, none of it.
    MountPlan none = plan_mounts(policy_from(""), "/rootfs", f, std::nullopt);
    for (const auto& line : lines(none)) CHECK(line.find("/tmp/.net") == std::string::npos);
}

TEST_CASE("bound_writable: a source is writable where no read-only remount follows its bind") {
    MountPlan plan;
    plan.sources = {{"/rootfs", false}, {"/data", false}, {"/out", false}, {"/both", false}};
    const unsigned long ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
    const unsigned long rw = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
    plan.ops = {
        {OpKind::Bind, "mnt/data", 1, "", MS_BIND, "", 0},
        {OpKind::Remount, "mnt/data", -1, "", ro, "", 0},
        {OpKind::Bind, "mnt/out", 2, "", MS_BIND, "", 0},
        {OpKind::Remount, "mnt/out", -1, "", rw, "", 0},
        {OpKind::Bind, "mnt/both-ro", 3, "", MS_BIND, "", 0},
        {OpKind::Remount, "mnt/both-ro", -1, "", ro, "", 0},
        {OpKind::Bind, "mnt/both-rw", 3, "", MS_BIND, "", 0},
    };
    CHECK_FALSE(bound_writable(plan, 0));  // not bound at all
    CHECK_FALSE(bound_writable(plan, 1));
    CHECK(bound_writable(plan, 2));
    CHECK(bound_writable(plan, 3));  // one of its binds has no read-only remount
}

namespace {

Policy shipped_policy(const std::string& name) {
    std::string path = std::string(PYJAIL_SOURCE_DIR) + "/profiles/" + name + ".toml";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    Settings s = default_settings();
    apply_profile(s, parse_profile(text.str(), path));
    return make_policy(s, name == "repl" ? std::vector<std::string>{"python3"} : std::vector<std::string>{"python3", "x.py"},
                       "/home/u/proj");
}

// The shipped rootfs's top level: every mount point the jail needs, so it is the root itself.
MountFacts shipped_rootfs_facts(const Policy& p) {
    MountFacts f = rootfs_facts();
    f.rootfs_top.push_back({"dev", RootfsEntry::Kind::Dir, ""});
    f.rootfs_top.push_back({"work", RootfsEntry::Kind::Dir, ""});
    for (const auto& b : all_binds(p)) f.binds.push_back(bind_facts(true, b.source, 0, true));
    f.script_real_path = "/home/u/proj/x.py";
    return f;
}

std::vector<std::string> shipped_plan(const std::string& name) {
    Policy p = shipped_policy(name);
    std::optional<std::string> script;
    if (name != "repl") script = "/home/u/proj/x.py";
    return lines(plan_mounts(p, "/rootfs", shipped_rootfs_facts(p), script));
}

}  // namespace

TEST_CASE("the plan per shipped profile: strict in full, the others by what differs") {
    // /proc and /dev are the same for every profile (kDev, plan_proc).
    const std::vector<std::string> proc_and_dev = {
        "proc     /proc (nosuid,nodev,noexec)",
        "bind     /proc/keys <- /dev/null (if present)",
        "bind     /proc/key-users <- /dev/null (if present)",
        "bind     /proc/cmdline <- /dev/null (if present)",
        "bind     /proc/config.gz <- /dev/null (if present)",
        "bind     /proc/kallsyms <- /dev/null (if present)",
        "bind     /proc/sysrq-trigger <- /dev/null (if present)",
        "bind     /proc/latency_stats <- /dev/null (if present)",
        "bind     /proc/timer_list <- /dev/null (if present)",
        "bind     /proc/timer_stats <- /dev/null (if present)",
        "bind     /proc/sched_debug <- /dev/null (if present)",
        "bind     /proc/iomem <- /dev/null (if present)",
        "bind     /proc/ioports <- /dev/null (if present)",
        "bind     /proc/vmallocinfo <- /dev/null (if present)",
        "bind     /tmp/.empty <- jail:/tmp/.empty",
        "remount  /tmp/.empty (ro,nosuid,nodev,noexec)",
        "bind     /proc/acpi <- jail:/tmp/.empty (if present)",
        "bind     /proc/asound <- jail:/tmp/.empty (if present)",
        "bind     /proc/scsi <- jail:/tmp/.empty (if present)",
        "bind     /proc/driver <- jail:/tmp/.empty (if present)",
        "bind     /proc/sys <- jail:/proc/sys (if present)",
        "remount  /proc/sys (ro,nosuid,nodev,noexec) (if present)",
        "bind     /proc/bus <- jail:/proc/bus (if present)",
        "remount  /proc/bus (ro,nosuid,nodev,noexec) (if present)",
        "bind     /proc/fs <- jail:/proc/fs (if present)",
        "remount  /proc/fs (ro,nosuid,nodev,noexec) (if present)",
        "bind     /proc/irq <- jail:/proc/irq (if present)",
        "remount  /proc/irq (ro,nosuid,nodev,noexec) (if present)",
        "tmpfs    /dev (nosuid,noexec,mode=0755,size=64k,nr_inodes=64)",
        "mkfile   /dev/null",
        "bind     /dev/null <- /dev/null",
        "mkfile   /dev/zero",
        "bind     /dev/zero <- /dev/zero",
        "mkfile   /dev/full",
        "bind     /dev/full <- /dev/full",
        "mkfile   /dev/random",
        "bind     /dev/random <- /dev/random",
        "mkfile   /dev/urandom",
        "bind     /dev/urandom <- /dev/urandom",
        "symlink  /dev/fd -> /proc/self/fd",
        "symlink  /dev/stdin -> /proc/self/fd/0",
        "symlink  /dev/stdout -> /proc/self/fd/1",
        "symlink  /dev/stderr -> /proc/self/fd/2",
        "mkdir    /dev/shm",
        "mkdir    /dev/pts",
        "symlink  /dev/ptmx -> pts/ptmx",
        "remount  /dev (ro,nosuid,noexec)",
        "bind     /dev/shm <- jail:/tmp/.shm",
        "devpts   /dev/pts (nosuid,noexec,newinstance,ptmxmode=0666,mode=0620)",
    };
    auto expect = [&](const std::string& name, const std::vector<std::string>& head,
                      const std::vector<std::string>& tail) {
        std::vector<std::string> want = head;
        want.insert(want.end(), proc_and_dev.begin(), proc_and_dev.end());
        want.insert(want.end(), tail.begin(), tail.end());
        CHECK_MESSAGE(shipped_plan(name) == want, name);
    };
    auto scratch = [](const char* size, const char* inodes, bool work) {
        std::vector<std::string> h = {"bind     / <- /rootfs",
                                      fmt::format("tmpfs    /tmp (nosuid,nodev,mode=0755,size={},nr_inodes={})", size, inodes),
                                      "mkdir    /tmp/.tmp", "mkdir    /tmp/.shm"};
        if (work) h.push_back("mkdir    /tmp/.work");
        h.push_back("mkdir    /tmp/.empty");
        return h;
    };
    // strict: the script copied into a private /work.
    expect("strict", scratch("67108864", "8192", true),
           {"bind     /work <- jail:/tmp/.work", "bind     /tmp <- jail:/tmp/.tmp",
            "copy     /work/x.py <- /home/u/proj/x.py (mode 444)"});
    // standard: the current directory read-only at /work; the script runs in place.
    expect("standard", scratch("268435456", "32768", false),
           {"bind     /tmp <- jail:/tmp/.tmp", "bind     /work <- /home/u/proj", "remount  /work (ro,nosuid,nodev)"});
    // batch: a writable work directory.
    expect("batch", scratch("1073741824", "131072", false),
           {"bind     /tmp <- jail:/tmp/.tmp", "bind     /work <- /home/u/proj", "remount  /work (nosuid,nodev)"});
    // repl: no script, a private /work.
    expect("repl", scratch("268435456", "32768", true),
           {"bind     /work <- jail:/tmp/.work", "bind     /tmp <- jail:/tmp/.tmp"});
}
