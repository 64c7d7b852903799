#include "mountplan.hpp"

#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <algorithm>

#include "error.hpp"

namespace pyjail {

namespace {

// The jail owns these top-level names; a rootfs's own entries there are ignored.
bool jail_owned(const std::string& name) {
    return name == "proc" || name == "dev" || name == "tmp" || name == "work" || name == "sys";
}

std::size_t depth(const std::string& path) {
    return static_cast<std::size_t>(std::count(path.begin(), path.end(), '/'));
}

std::string rel(const std::string& jail_path) {
    return jail_path.size() > 1 && jail_path[0] == '/' ? jail_path.substr(1) : jail_path;
}

std::string basename_of(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_under(const std::string& path, const std::string& dir) {
    if (dir == "/") return true;
    return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
           path[dir.size()] == '/';
}

constexpr unsigned long kTmpfsFlags = MS_NOSUID | MS_NODEV;
constexpr unsigned long kProcFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

// The mount points the jail always mounts on.
constexpr const char* kJailMounts[] = {"proc", "dev", "tmp", "work"};

bool rootfs_has_dir(const MountFacts& facts, const std::string& name) {
    return std::any_of(facts.rootfs_top.begin(), facts.rootfs_top.end(), [&](const RootfsEntry& e) {
        return e.name == name && e.kind == RootfsEntry::Kind::Dir;
    });
}

// The rootfs can itself be the root (one bind instead of a tmpfs and a bind per top-level
// directory, a few hundred microseconds of every run) when no mount point has to be created
// in the root: the rootfs has the jail's own, and every bind lands on a path the rootfs has or
// inside the jail's writable tmpfs mounts.
bool rootfs_can_be_root(const MountFacts& facts, const std::vector<BindSpec>& binds,
                        bool script_needs_a_dir) {
    if (script_needs_a_dir) return false;
    for (const char* d : kJailMounts)
        if (!rootfs_has_dir(facts, d)) return false;
    for (std::size_t i = 0; i < binds.size(); ++i) {
        std::string t = rel(binds[i].target);
        std::string top = t.substr(0, t.find('/'));
        bool in_jail_mount = top == "tmp" || top == "work" || top == "dev";
        if (!in_jail_mount && !(rootfs_has_dir(facts, top) && facts.binds.at(i).target_in_rootfs))
            return false;
    }
    return true;
}

}  // namespace

// Files only host root can read on every kernel (kcore, kmsg, kpage*) need no mask: the jail
// is never host root. Those some kernels make world-readable are masked.
const char* const kProcMaskedFiles[] = {
    "keys", "key-users",                                  // the invoking user's keys
    "cmdline",                                            // boot parameters (may hold secrets)
    "config.gz", "kallsyms", "sysrq-trigger",             // the kernel's build and controls
    "latency_stats", "timer_list", "timer_stats", "sched_debug",  // other processes' activity
    "iomem", "ioports", "vmallocinfo",                    // kernel and device memory layout
    nullptr};
const char* const kProcMaskedDirs[] = {"acpi", "asound", "scsi", "driver", nullptr};
const char* const kProcReadOnly[] = {"sys", "bus", "fs", "irq", nullptr};

std::uint64_t tmpfs_inodes_for(std::uint64_t size) {
    return std::max<std::uint64_t>(size / (8 * 1024), 1024);
}

std::vector<BindSpec> all_binds(const Policy& policy) {
    std::vector<BindSpec> binds = policy.binds;
    if (policy.workdir)
        binds.push_back({*policy.workdir, "/work", true,
                         policy.workdir_origin.empty() ? "--workdir" : policy.workdir_origin,
                         policy.workdir_named_on_command_line});
    return binds;
}

std::optional<std::size_t> enclosing_bind(const std::vector<BindSpec>& binds, std::size_t i) {
    std::optional<std::size_t> found;
    for (std::size_t j = 0; j < binds.size(); ++j)
        if (j != i && is_under(binds[i].target, binds[j].target) &&
            (!found || binds[j].target.size() > binds[*found].target.size()))
            found = j;
    return found;
}

unsigned long locked_mount_flags(unsigned long f) {
    unsigned long out = 0;
    if (f & ST_RDONLY) out |= MS_RDONLY;
    if (f & ST_NOSUID) out |= MS_NOSUID;
    if (f & ST_NODEV) out |= MS_NODEV;
    if (f & ST_NOEXEC) out |= MS_NOEXEC;
    if (f & ST_NOATIME) out |= MS_NOATIME;
    if (f & ST_NODIRATIME) out |= MS_NODIRATIME;
    if (f & ST_RELATIME) out |= MS_RELATIME;
    return out;
}

const char* const kEgressEtcFiles[] = {"resolv.conf", "hosts", "nsswitch.conf", nullptr};

namespace {

// One op of the jail's fixed tree, its fields named (MountOp's own, as literals).
struct Entry {
    OpKind kind;
    const char* target;
    const char* source = "";
    unsigned long flags = 0;
    const char* data = "";
    unsigned mode = 0;
    bool if_exists = false;
};

void add(std::vector<MountOp>& ops, const Entry& e) {
    ops.push_back({.kind = e.kind, .target = e.target, .source_path = e.source, .flags = e.flags, .data = e.data,
                   .mode = e.mode, .if_exists = e.if_exists});
}

constexpr unsigned long kReadOnlyRemount = MS_BIND | MS_REMOUNT | MS_RDONLY;

// A minimal /dev: a few harmless character devices bound from the host (a user namespace
// cannot mknod), no disks, no ttys, no /dev/mem; made read-only once filled. Pseudo-terminals
// come from a devpts instance of the jail's own (pty, pexpect): its terminals are not the
// host's, so nothing typed into them reaches a host shell.
constexpr Entry kDev[] = {
    {.kind = OpKind::Tmpfs, .target = "dev", .flags = MS_NOSUID | MS_NOEXEC, .data = "mode=0755,size=64k,nr_inodes=64"},
    {.kind = OpKind::MkFile, .target = "dev/null", .mode = 0666},
    {.kind = OpKind::Bind, .target = "dev/null", .source = "/dev/null", .flags = MS_BIND},
    {.kind = OpKind::MkFile, .target = "dev/zero", .mode = 0666},
    {.kind = OpKind::Bind, .target = "dev/zero", .source = "/dev/zero", .flags = MS_BIND},
    {.kind = OpKind::MkFile, .target = "dev/full", .mode = 0666},
    {.kind = OpKind::Bind, .target = "dev/full", .source = "/dev/full", .flags = MS_BIND},
    {.kind = OpKind::MkFile, .target = "dev/random", .mode = 0666},
    {.kind = OpKind::Bind, .target = "dev/random", .source = "/dev/random", .flags = MS_BIND},
    {.kind = OpKind::MkFile, .target = "dev/urandom", .mode = 0666},
    {.kind = OpKind::Bind, .target = "dev/urandom", .source = "/dev/urandom", .flags = MS_BIND},
    {.kind = OpKind::Symlink, .target = "dev/fd", .source = "/proc/self/fd"},
    {.kind = OpKind::Symlink, .target = "dev/stdin", .source = "/proc/self/fd/0"},
    {.kind = OpKind::Symlink, .target = "dev/stdout", .source = "/proc/self/fd/1"},
    {.kind = OpKind::Symlink, .target = "dev/stderr", .source = "/proc/self/fd/2"},
    {.kind = OpKind::Mkdir, .target = "dev/shm", .mode = 0755},
    {.kind = OpKind::Mkdir, .target = "dev/pts", .mode = 0755},
    {.kind = OpKind::Symlink, .target = "dev/ptmx", .source = "pts/ptmx"},
    {.kind = OpKind::Remount, .target = "dev", .flags = kReadOnlyRemount | MS_NOSUID | MS_NOEXEC},
    {.kind = OpKind::Bind, .target = "dev/shm", .source = "tmp/.shm", .flags = MS_BIND},
    {.kind = OpKind::Devpts, .target = "dev/pts", .flags = MS_NOSUID | MS_NOEXEC, .data = "newinstance,ptmxmode=0666,mode=0620"},
};

// The empty directory the masked /proc directories show (made in the scratch tmpfs, whose
// root /tmp later covers): a bind of it and a read-only remount cost a third of what an empty
// tmpfs of their own did, and each mask stays read-only (EROFS for any write or chmod).
constexpr const char* kEmptyDir = "tmp/.empty";

// A fresh procfs for the jail's pid namespace (only the jail's processes are in it), and what
// a program has no need to see in it (the masks of container runtimes, and more): the invoking
// user's keys (/proc/keys, /proc/key-users name them, their serials and uid: keyrings are not
// namespaced), the kernel's command line, kernel memory and symbols, timers and scheduler
// internals of the whole host, hardware directories. What Python and numpy read stays:
// /proc/self, cpuinfo, meminfo, stat. /proc/sys and the like stay readable but read-only.
// The masks are mounts the jail's own user namespace made, so its root could unmount them;
// the program is not that root: it holds no capabilities (dropped before exec, no_new_privs),
// and the filter refuses mount, umount2 and the new mount API. A mask over an entry this
// kernel lacks is skipped (if_exists), found by the mount's own ENOENT (steps.cpp).
void plan_proc(std::vector<MountOp>& ops) {
    add(ops, {.kind = OpKind::Proc, .target = "proc", .flags = kProcFlags});
    std::string t;
    for (const char* const* f = kProcMaskedFiles; *f != nullptr; ++f)
        add(ops, {.kind = OpKind::Bind, .target = (t = std::string("proc/") + *f).c_str(),
                  .source = "/dev/null", .flags = MS_BIND, .if_exists = true});
    // The empty directory made a read-only mount once: a bind copies its source mount's flags
    // (read-only, nosuid, nodev, noexec), so each masked directory is one bind, with no
    // remount of its own (two calls, four where the entry is absent, for each before).
    add(ops, {.kind = OpKind::Bind, .target = kEmptyDir, .source = kEmptyDir, .flags = MS_BIND});
    add(ops, {.kind = OpKind::Remount, .target = kEmptyDir, .flags = kReadOnlyRemount | kProcFlags});
    for (const char* const* d = kProcMaskedDirs; *d != nullptr; ++d)
        add(ops, {.kind = OpKind::Bind, .target = (t = std::string("proc/") + *d).c_str(), .source = kEmptyDir,
                  .flags = MS_BIND, .if_exists = true});
    for (const char* const* d = kProcReadOnly; *d != nullptr; ++d) {
        t = std::string("proc/") + *d;
        add(ops, {.kind = OpKind::Bind, .target = t.c_str(), .source = t.c_str(), .flags = MS_BIND, .if_exists = true});
        add(ops, {.kind = OpKind::Remount, .target = t.c_str(), .flags = kReadOnlyRemount | kProcFlags, .if_exists = true});
    }
}

// --net allow: the jail's resolver settings, written into the scratch tmpfs and bound
// read-only over the rootfs's. resolv.conf names the supervisor's 127.0.0.1:53 (without one,
// glibc and musl ask 127.0.0.1 too); nsswitch.conf adds DNS after the files (a rootfs for
// --net none may say "hosts: files"); hosts holds only the jail's own names, so no entry of
// the rootfs sends an allowed name to an address that bypasses the supervisor's checks.
void plan_egress_etc(std::vector<MountOp>& ops, const Policy& policy, const MountFacts& facts) {
    if (policy.net != NetMode::Allow) return;
    add(ops, {.kind = OpKind::Mkdir, .target = "tmp/.net", .mode = 0755});
    for (const auto& name : facts.rootfs_etc_files) {
        std::string content;
        if (name == "resolv.conf") content = "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n";
        else if (name == "hosts")
            content = fmt::format("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{}\n", policy.hostname);
        else if (name == "nsswitch.conf") content = "passwd: files\ngroup: files\nhosts: files dns\n";
        else continue;
        std::string staged = "tmp/.net/" + name, target = "etc/" + name;
        add(ops, {.kind = OpKind::Write, .target = staged.c_str(), .data = content.c_str(), .mode = 0444});
        add(ops, {.kind = OpKind::Bind, .target = target.c_str(), .source = staged.c_str(), .flags = MS_BIND});
        add(ops, {.kind = OpKind::Remount, .target = target.c_str(),
                  .flags = kReadOnlyRemount | MS_NOSUID | MS_NODEV | MS_NOEXEC});
    }
}

// What every part of the plan needs to know about the run.
struct PlanContext {
    const Policy& policy;
    const MountFacts& facts;
    std::vector<BindSpec> binds{};       // all_binds(policy)
    std::vector<std::size_t> order{};    // the binds, parents before children
    bool work_is_bound = false;
    std::string real_script{};           // the script's real path, if any
    std::optional<std::string> script_via_bind{};  // where a bind already shows it
    std::string scratch_opts{};          // size and inode cap of the writable tmpfs
    bool rootfs_is_root = false;
    std::vector<std::string> rootfs_dirs{};  // the rootfs's top-level directories, bound read-only
};

PlanContext plan_context(const Policy& policy, const MountFacts& facts,
                         const std::optional<std::string>& script_host_path) {
    PlanContext c{policy, facts, all_binds(policy)};
    {
        // No bind may expose a home or credentials unless the user named it and said so.
        std::vector<BindExposure> exposures;
        for (const auto& f : facts.binds) exposures.push_back({f.real_source, f.credentials});
        check_sensitive_binds(policy, c.binds, exposures, facts.home_dirs);
    }
    c.work_is_bound = std::any_of(c.binds.begin(), c.binds.end(), [](const BindSpec& b) { return b.target == "/work"; });
    c.order.resize(c.binds.size());
    for (std::size_t i = 0; i < c.order.size(); ++i) c.order[i] = i;
    std::stable_sort(c.order.begin(), c.order.end(), [&](std::size_t a, std::size_t b) {
        return depth(c.binds[a].target) < depth(c.binds[b].target);
    });
    if (script_host_path) {
        c.real_script = facts.script_real_path.value_or(*script_host_path);
        for (std::size_t i : c.order) {  // the innermost bind that shows it wins
            const auto& f = facts.binds[i];
            if (f.real_source == c.real_script) c.script_via_bind = c.binds[i].target;
            else if (f.is_dir && is_under(c.real_script, f.real_source))
                c.script_via_bind = normalize_path(c.binds[i].target + c.real_script.substr(f.real_source.size()));
        }
    }
    // Every tmpfs the jail can write has an inode cap too: empty files cost no size, but each
    // pins kernel memory (200k of them ~200 MiB).
    c.scratch_opts = fmt::format("size={},nr_inodes={}", policy.tmpfs_size, tmpfs_inodes_for(policy.tmpfs_size));
    bool script_needs_a_dir = script_host_path && !c.script_via_bind && c.work_is_bound;
    c.rootfs_is_root = rootfs_can_be_root(facts, c.binds, script_needs_a_dir);
    for (const auto& e : facts.rootfs_top)
        if (e.kind == RootfsEntry::Kind::Dir && !jail_owned(e.name)) c.rootfs_dirs.push_back(e.name);
    return c;
}

// The root, read-only at the end. nosuid and nodev: nothing in the rootfs may gain privileges
// or reach devices, whatever its files say; the source mount's locked flags must be kept.
void plan_root(MountPlan& plan, const PlanContext& c) {
    const unsigned long ro = kReadOnlyRemount | MS_NOSUID | MS_NODEV;
    if (c.rootfs_is_root) {
        plan.ops.push_back({.kind = OpKind::Bind, .target = "", .source_slot = 0, .flags = MS_BIND});
        plan.root_flags = ro | c.facts.rootfs_locked_flags;
        return;
    }
    // A tmpfs that holds only mount points and symlinks, the rootfs's directories bound in.
    add(plan.ops, {.kind = OpKind::Tmpfs, .target = "", .flags = kTmpfsFlags,
                   .data = ("mode=0755," + c.scratch_opts).c_str()});
    plan.root_flags = ro;
    for (const auto& e : c.facts.rootfs_top) {
        if (jail_owned(e.name)) continue;
        if (e.kind == RootfsEntry::Kind::Dir) {
            add(plan.ops, {.kind = OpKind::Mkdir, .target = e.name.c_str(), .mode = 0755});
            plan.ops.push_back({.kind = OpKind::Bind, .target = e.name, .source_slot = 0, .source_path = e.name,
                                .flags = MS_BIND});
            add(plan.ops, {.kind = OpKind::Remount, .target = e.name.c_str(), .flags = ro | c.facts.rootfs_locked_flags});
        } else if (e.kind == RootfsEntry::Kind::Symlink) {
            add(plan.ops, {.kind = OpKind::Symlink, .target = e.name.c_str(), .source = e.link_target.c_str()});
        }
    }
}

// The jail's own mounts. Private, size-capped scratch space; nothing written there outlives
// the run. One tmpfs holds /tmp, /dev/shm and (unless it is a host directory) /work, each a
// bind of one of its directories: --tmpfs-size and the inode cap are the jail's total, not per
// mount (three tmpfs of their own would let a jail fill three times the size). The tmpfs's own
// root, which holds the three (and the masks' empty directory), ends up covered by /tmp.
void plan_jail_mounts(std::vector<MountOp>& ops, const PlanContext& c) {
    // A mount point: in the rootfs already, or made in the tmpfs root.
    auto mount_point = [&](const char* name) {
        if (!c.rootfs_is_root) add(ops, {.kind = OpKind::Mkdir, .target = name, .mode = 0755});
    };
    mount_point("tmp");
    add(ops, {.kind = OpKind::Tmpfs, .target = "tmp", .flags = kTmpfsFlags, .data = ("mode=0755," + c.scratch_opts).c_str()});
    add(ops, {.kind = OpKind::Mkdir, .target = "tmp/.tmp", .mode = 01777});
    add(ops, {.kind = OpKind::Mkdir, .target = "tmp/.shm", .mode = 01777});
    if (!c.work_is_bound) add(ops, {.kind = OpKind::Mkdir, .target = "tmp/.work", .mode = 0755});
    add(ops, {.kind = OpKind::Mkdir, .target = kEmptyDir, .mode = 0555});
    mount_point("proc");
    plan_proc(ops);
    mount_point("dev");
    for (const Entry& e : kDev) add(ops, e);
    if (!c.work_is_bound) {
        mount_point("work");
        add(ops, {.kind = OpKind::Bind, .target = "work", .source = "tmp/.work", .flags = MS_BIND});
    }
    plan_egress_etc(ops, c.policy, c.facts);
    // Last of the scratch space, before any bind lands below /tmp: /tmp covers the tmpfs's root.
    add(ops, {.kind = OpKind::Bind, .target = "tmp", .source = "tmp/.tmp", .flags = MS_BIND});
}

// A bind inside another gets its mount point in that bind's host directory. Where it is
// missing and cannot be made there, say so now, with the way out -- not "mkdir: cannot
// create mount point: Read-only file system" from inside the jail.
void require_mount_point(const BindSpec& b, const BindFacts& f, const BindSpec& outer, const BindFacts& outer_f) {
    std::string host = outer.source + b.target.substr(outer.target.size());
    std::string fix = fmt::format("bind it elsewhere, e.g. /{}, or create the {} {} beforehand",
                                  basename_of(b.target), f.is_dir ? "directory" : "file", host);
    if (!outer.writable)
        throw UsageError(fmt::format("{}: {} lies inside {}, the read-only bind of {} ({}), which has no {} "
                                     "to mount it on",
                                     b.origin, b.target, outer.target, outer.source, outer.origin,
                                     f.is_dir ? "directory" : "file"),
                         fix);
    if (!outer_f.writable_by_host_user)
        throw UsageError(fmt::format("{}: {} lies inside {}, the bind of {} ({}), where its mount point would be "
                                     "made, but the jail's host user cannot write that directory",
                                     b.origin, b.target, outer.target, outer.source, outer.origin),
                         fix);
}

// What pid 1 makes in the host directory of the writable bind `outer` for b's mount point.
HostMountPoint host_mount_point(const BindSpec& b, const BindFacts& f, const BindSpec& outer,
                                const BindFacts& outer_f) {
    HostMountPoint m{outer.source, {}, outer_f.dev, outer_f.ino};
    const std::string& first = f.missing_in_enclosing;
    for (std::string made = b.target.substr(outer.target.size() + 1); made.size() >= first.size() && !first.empty();
         made.resize(made.rfind('/'))) {
        m.made.push_back(made);
        if (made.find('/') == std::string::npos) break;
    }
    return m;
}

// The user's binds, parents before children so a nested bind lands on top.
void plan_user_binds(MountPlan& plan, const PlanContext& c) {
    for (std::size_t i : c.order) {
        const BindSpec& b = c.binds[i];
        const BindFacts& f = c.facts.binds.at(i);
        std::string t = rel(b.target);
        std::string top = t.substr(0, t.find('/'));
        std::optional<std::size_t> outer = enclosing_bind(c.binds, i);
        bool in_ro_rootfs = !outer && std::find(c.rootfs_dirs.begin(), c.rootfs_dirs.end(), top) != c.rootfs_dirs.end();
        if (in_ro_rootfs && !f.target_in_rootfs)
            throw UsageError(fmt::format("{}: {} does not exist in the rootfs, and /{} is read-only, so it "
                                         "cannot be created",
                                         b.origin, b.target, top),
                             fmt::format("bind to a new path such as /mnt/{}", basename_of(b.target)));
        if (b.writable && (f.locked_flags & MS_RDONLY))
            throw UsageError(fmt::format("{}: {} is on a read-only filesystem, so it cannot be bound writable",
                                         b.origin, b.source),
                             "use --ro-bind, or a writable directory");
        int slot = static_cast<int>(plan.sources.size());
        plan.sources.push_back({b.source, false});
        // A mount point is ready where the rootfs is bound (not under /tmp, /work, ...), or where
        // the bind it lies in has it.
        bool ready = outer ? f.target_in_enclosing
                           : (in_ro_rootfs && f.target_in_rootfs) ||
                                 (c.rootfs_is_root && std::find(std::begin(kJailMounts), std::end(kJailMounts), t) !=
                                                          std::end(kJailMounts));
        if (!ready && outer) {
            require_mount_point(b, f, c.binds[*outer], c.facts.binds.at(*outer));
            if (HostMountPoint m = host_mount_point(b, f, c.binds[*outer], c.facts.binds.at(*outer)); !m.made.empty())
                plan.host_mount_points.push_back(std::move(m));
        }
        if (!ready)
            add(plan.ops, {.kind = f.is_dir ? OpKind::Mkdir : OpKind::MkFile, .target = t.c_str(),
                           .mode = f.is_dir ? 0755u : 0644u});
        plan.ops.push_back({.kind = OpKind::Bind, .target = t, .source_slot = slot, .flags = MS_BIND});
        unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | f.locked_flags;
        if (!b.writable) flags |= MS_RDONLY;
        add(plan.ops, {.kind = OpKind::Remount, .target = t.c_str(), .flags = flags});
    }
}

// The script: run from where a bind already shows it, else a private read-only copy in the
// working directory (or, when /work is a host directory, in the read-only root).
void plan_script(MountPlan& plan, const PlanContext& c, const std::string& script_host_path) {
    plan.script_jail_path = c.script_via_bind;
    if (plan.script_jail_path) return;
    std::string dir = c.work_is_bound ? "script" : "work";
    if (c.work_is_bound) add(plan.ops, {.kind = OpKind::Mkdir, .target = dir.c_str(), .mode = 0755});
    std::string t = dir + "/" + basename_of(c.real_script);
    int slot = static_cast<int>(plan.sources.size());
    plan.sources.push_back({script_host_path, true});
    plan.ops.push_back({.kind = OpKind::Copy, .target = t, .source_slot = slot, .mode = 0444});
    plan.script_jail_path = "/" + t;
}

}  // namespace

MountPlan plan_mounts(const Policy& policy, const std::string& rootfs, const MountFacts& facts,
                      const std::optional<std::string>& script_host_path) {
    PlanContext c = plan_context(policy, facts, script_host_path);
    MountPlan plan;
    plan.sources.push_back({rootfs, false});
    plan_root(plan, c);
    plan_jail_mounts(plan.ops, c);
    plan_user_binds(plan, c);
    if (script_host_path) plan_script(plan, c, *script_host_path);
    return plan;
}

std::string describe_op(const MountOp& op, const MountPlan& plan) {
    std::string t = "/" + op.target;
    auto src = [&]() -> std::string {
        // A relative source is a path in the jail's new root (the scratch tmpfs, /proc).
        if (op.source_slot < 0) return op.source_path[0] == '/' ? op.source_path : "jail:/" + op.source_path;
        std::string base = plan.sources.at(static_cast<std::size_t>(op.source_slot)).host_path;
        return op.source_path.empty() ? base : base + "/" + op.source_path;
    };
    auto flag_names = [](unsigned long f) {
        std::string s;
        auto add = [&](unsigned long bit, const char* name) {
            if (f & bit) s += s.empty() ? name : std::string(",") + name;
        };
        add(MS_RDONLY, "ro");
        add(MS_NOSUID, "nosuid");
        add(MS_NODEV, "nodev");
        add(MS_NOEXEC, "noexec");
        add(MS_NOATIME, "noatime");
        add(MS_RELATIME, "relatime");
        return s;
    };
    switch (op.kind) {
        case OpKind::Tmpfs:
            return fmt::format("tmpfs    {} ({},{}){}", t, flag_names(op.flags), op.data,
                               op.if_exists ? " (if present)" : "");
        case OpKind::Proc: return fmt::format("proc     {} ({})", t, flag_names(op.flags));
        case OpKind::Devpts: return fmt::format("devpts   {} ({},{})", t, flag_names(op.flags), op.data);
        case OpKind::Bind: return fmt::format("bind     {} <- {}{}", t, src(), op.if_exists ? " (if present)" : "");
        case OpKind::Remount:
            return fmt::format("remount  {} ({}){}", t, flag_names(op.flags), op.if_exists ? " (if present)" : "");
        case OpKind::Mkdir: return fmt::format("mkdir    {}", t);
        case OpKind::MkFile: return fmt::format("mkfile   {}", t);
        case OpKind::Symlink: return fmt::format("symlink  {} -> {}", t, op.source_path);
        case OpKind::Copy: return fmt::format("copy     {} <- {} (mode {:o})", t, src(), op.mode);
        case OpKind::Write: return fmt::format("write    {} ({} bytes, mode {:o})", t, op.data.size(), op.mode);
    }
    return {};
}

bool bound_writable(const MountPlan& plan, int slot) {
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
        const MountOp& bind = plan.ops[i];
        if (bind.kind != OpKind::Bind || bind.source_slot != slot) continue;
        bool read_only = false;
        for (std::size_t j = i + 1; j < plan.ops.size(); ++j)
            if (plan.ops[j].kind == OpKind::Remount && plan.ops[j].target == bind.target)
                read_only = (plan.ops[j].flags & MS_RDONLY) != 0;
        if (!read_only) return true;
    }
    return false;
}

}  // namespace pyjail
