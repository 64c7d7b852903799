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

// --net allow: the jail's resolver settings, written into the scratch tmpfs and bound
// read-only over the rootfs's. resolv.conf names the supervisor's 127.0.0.1:53 (without one,
// glibc and musl ask 127.0.0.1 too); nsswitch.conf adds DNS after the files (a rootfs for
// --net none may say "hosts: files"); hosts holds only the jail's own names, so no entry of
// the rootfs sends an allowed name to an address that bypasses the supervisor's checks.
void plan_egress_etc(std::vector<MountOp>& ops, const Policy& policy, const MountFacts& facts) {
    if (policy.net != NetMode::Allow) return;
    ops.push_back({OpKind::Mkdir, "tmp/.net", -1, "", 0, "", 0755});
    for (const auto& name : facts.rootfs_etc_files) {
        std::string content;
        if (name == "resolv.conf") content = "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n";
        else if (name == "hosts")
            content = fmt::format("127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{}\n", policy.hostname);
        else if (name == "nsswitch.conf") content = "passwd: files\ngroup: files\nhosts: files dns\n";
        else continue;
        std::string staged = "tmp/.net/" + name;
        MountOp write{OpKind::Write, staged, -1, "", 0, content, 0444};
        ops.push_back(write);
        ops.push_back({OpKind::Bind, "etc/" + name, -1, staged, MS_BIND, "", 0});
        ops.push_back({OpKind::Remount, "etc/" + name, -1, "",
                       MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "", 0});
    }
}

}  // namespace

MountPlan plan_mounts(const Policy& policy, const std::string& rootfs, const MountFacts& facts,
                      const std::optional<std::string>& script_host_path) {
    MountPlan plan;
    plan.sources.push_back({rootfs, false});
    auto& ops = plan.ops;
    std::string tmpfs_size = fmt::format("size={}", policy.tmpfs_size);
    // Every tmpfs the jail can write has an inode cap too: empty files cost no size, but each
    // pins kernel memory (200k of them ~200 MiB).
    std::string scratch_opts =
        fmt::format("{},nr_inodes={}", tmpfs_size, tmpfs_inodes_for(policy.tmpfs_size));
    auto binds = all_binds(policy);
    {
        // No bind may expose a home or credentials unless the user named it and said so.
        std::vector<BindExposure> exposures;
        for (const auto& f : facts.binds) exposures.push_back({f.real_source, f.credentials});
        check_sensitive_binds(policy, binds, exposures, facts.home_dirs);
    }
    bool work_is_bound =
        std::any_of(binds.begin(), binds.end(), [](const BindSpec& b) { return b.target == "/work"; });
    // The user's binds, parents before children so a nested bind lands on top.
    std::vector<std::size_t> order(binds.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return depth(binds[a].target) < depth(binds[b].target);
    });
    // Where a bind already shows the script (the innermost such bind), if one does.
    std::optional<std::string> script_via_bind;
    const std::string real_script =
        script_host_path ? facts.script_real_path.value_or(*script_host_path) : std::string();
    if (script_host_path) {
        for (std::size_t i : order) {
            const auto& f = facts.binds[i];
            if (f.real_source == real_script) script_via_bind = binds[i].target;
            else if (f.is_dir && is_under(real_script, f.real_source))
                script_via_bind =
                    normalize_path(binds[i].target + real_script.substr(f.real_source.size()));
        }
    }
    bool script_needs_a_dir = script_host_path && !script_via_bind && work_is_bound;

    // The root, read-only at the end. nosuid and nodev: nothing in the rootfs may gain
    // privileges or reach devices, whatever its files say; the source mount's locked flags
    // must be kept.
    unsigned long ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
    std::vector<std::string> rootfs_dirs;
    bool rootfs_is_root = rootfs_can_be_root(facts, binds, script_needs_a_dir);
    if (rootfs_is_root) {
        ops.push_back({OpKind::Bind, "", 0, "", MS_BIND, "", 0});
        plan.root_flags = ro | facts.rootfs_locked_flags;
        for (const auto& e : facts.rootfs_top)
            if (e.kind == RootfsEntry::Kind::Dir && !jail_owned(e.name)) rootfs_dirs.push_back(e.name);
    } else {
        // A tmpfs that holds only mount points and symlinks, the rootfs's directories bound in.
        ops.push_back({OpKind::Tmpfs, "", -1, "", kTmpfsFlags, "mode=0755," + scratch_opts, 0});
        plan.root_flags = ro;
        for (const auto& e : facts.rootfs_top) {
            if (jail_owned(e.name)) continue;
            if (e.kind == RootfsEntry::Kind::Dir) {
                rootfs_dirs.push_back(e.name);
                ops.push_back({OpKind::Mkdir, e.name, -1, "", 0, "", 0755});
                ops.push_back({OpKind::Bind, e.name, 0, e.name, MS_BIND, "", 0});
                ops.push_back({OpKind::Remount, e.name, -1, "", ro | facts.rootfs_locked_flags, "", 0});
            } else if (e.kind == RootfsEntry::Kind::Symlink) {
                ops.push_back({OpKind::Symlink, e.name, -1, e.link_target, 0, "", 0});
            }
        }
    }
    // The jail's own mount points: in the rootfs already, or made in the tmpfs root.
    auto mount_point = [&](const char* name) {
        if (!rootfs_is_root) ops.push_back({OpKind::Mkdir, name, -1, "", 0, "", 0755});
    };

    // Private, size-capped scratch space; nothing written there outlives the run. One tmpfs
    // holds /tmp, /dev/shm and (unless it is a host directory) /work, each a bind of one of
    // its directories: --tmpfs-size and the inode cap are the jail's total, not per mount
    // (three tmpfs of their own would let a jail fill three times the size). The tmpfs's
    // own root, which holds the three, ends up covered by /tmp.
    mount_point("tmp");
    ops.push_back({OpKind::Tmpfs, "tmp", -1, "", kTmpfsFlags, "mode=0755," + scratch_opts, 0});
    ops.push_back({OpKind::Mkdir, "tmp/.tmp", -1, "", 0, "", 01777});
    ops.push_back({OpKind::Mkdir, "tmp/.shm", -1, "", 0, "", 01777});
    if (!work_is_bound) ops.push_back({OpKind::Mkdir, "tmp/.work", -1, "", 0, "", 0755});

    // A fresh procfs for the jail's pid namespace: only the jail's processes are in it.
    mount_point("proc");
    ops.push_back({OpKind::Proc, "proc", -1, "", kProcFlags, "", 0});
    // What a program has no need to see (the masks of container runtimes, and more): the
    // invoking user's keys (/proc/keys, /proc/key-users name them, their serials and uid:
    // keyrings are not namespaced), the kernel's command line, kernel memory and symbols,
    // timers and scheduler internals of the whole host, hardware directories. What Python
    // and numpy read stays: /proc/self, cpuinfo, meminfo, stat. /proc/sys and the like stay
    // readable but read-only.
    // The masks are mounts the jail's own user namespace made, so its root could unmount
    // them; the program is not that root: it holds no capabilities (dropped before exec,
    // no_new_privs), and the filter refuses mount, umount2 and the new mount API.
    for (const char* const* f = kProcMaskedFiles; *f != nullptr; ++f) {
        MountOp op{OpKind::Bind, std::string("proc/") + *f, -1, "/dev/null", MS_BIND, "", 0};
        op.if_exists = true;
        ops.push_back(op);
    }
    for (const char* const* d = kProcMaskedDirs; *d != nullptr; ++d) {
        MountOp op{OpKind::Tmpfs, std::string("proc/") + *d, -1, "",
                   MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k,nr_inodes=1", 0};
        op.if_exists = true;
        ops.push_back(op);
    }
    for (const char* const* e = kProcReadOnly; *e != nullptr; ++e) {
        std::string t = std::string("proc/") + *e;
        MountOp bind{OpKind::Bind, t, -1, t, MS_BIND, "", 0};
        MountOp read_only{OpKind::Remount, t, -1, "", MS_BIND | MS_REMOUNT | MS_RDONLY | kProcFlags, "", 0};
        bind.if_exists = read_only.if_exists = true;
        ops.push_back(bind);
        ops.push_back(read_only);
    }

    // A minimal /dev: a few harmless character devices bound from the host (a user namespace
    // cannot mknod), no disks, no ttys, no /dev/mem; made read-only once filled.
    mount_point("dev");
    ops.push_back({OpKind::Tmpfs, "dev", -1, "", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64", 0});
    for (const char* d : {"null", "zero", "full", "random", "urandom"}) {
        std::string t = std::string("dev/") + d;
        ops.push_back({OpKind::MkFile, t, -1, "", 0, "", 0666});
        ops.push_back({OpKind::Bind, t, -1, std::string("/dev/") + d, MS_BIND, "", 0});
    }
    ops.push_back({OpKind::Symlink, "dev/fd", -1, "/proc/self/fd", 0, "", 0});
    ops.push_back({OpKind::Symlink, "dev/stdin", -1, "/proc/self/fd/0", 0, "", 0});
    ops.push_back({OpKind::Symlink, "dev/stdout", -1, "/proc/self/fd/1", 0, "", 0});
    ops.push_back({OpKind::Symlink, "dev/stderr", -1, "/proc/self/fd/2", 0, "", 0});
    ops.push_back({OpKind::Mkdir, "dev/shm", -1, "", 0, "", 0755});
    // Pseudo-terminals from a devpts instance of the jail's own (pty, pexpect): its terminals
    // are not the host's, so nothing typed into them reaches a host shell.
    ops.push_back({OpKind::Mkdir, "dev/pts", -1, "", 0, "", 0755});
    ops.push_back({OpKind::Symlink, "dev/ptmx", -1, "pts/ptmx", 0, "", 0});
    ops.push_back({OpKind::Remount, "dev", -1, "",
                   MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "", 0});
    ops.push_back({OpKind::Bind, "dev/shm", -1, "tmp/.shm", MS_BIND, "", 0});
    ops.push_back({OpKind::Devpts, "dev/pts", -1, "", MS_NOSUID | MS_NOEXEC,
                   "newinstance,ptmxmode=0666,mode=0620", 0});

    if (!work_is_bound) {
        mount_point("work");
        ops.push_back({OpKind::Bind, "work", -1, "tmp/.work", MS_BIND, "", 0});
    }
    plan_egress_etc(ops, policy, facts);
    // Last of the scratch space, before any bind lands below /tmp: /tmp covers the tmpfs's
    // root.
    ops.push_back({OpKind::Bind, "tmp", -1, "tmp/.tmp", MS_BIND, "", 0});

    for (std::size_t i : order) {
        const BindSpec& b = binds[i];
        const BindFacts& f = facts.binds.at(i);
        std::string top = rel(b.target).substr(0, rel(b.target).find('/'));
        bool in_ro_rootfs =
            std::find(rootfs_dirs.begin(), rootfs_dirs.end(), top) != rootfs_dirs.end();
        if (in_ro_rootfs && !f.target_in_rootfs)
            throw UsageError(
                fmt::format("{}: {} does not exist in the rootfs, and /{} is read-only, so it "
                            "cannot be created",
                            b.origin, b.target, top),
                fmt::format("bind to a new path such as /mnt/{}", basename_of(b.target)));
        if (b.writable && (f.locked_flags & MS_RDONLY))
            throw UsageError(fmt::format("{}: {} is on a read-only filesystem, so it cannot be "
                                         "bound writable",
                                         b.origin, b.source),
                             "use --ro-bind, or a writable directory");
        int slot = static_cast<int>(plan.sources.size());
        plan.sources.push_back({b.source, false});
        std::string t = rel(b.target);
        // A mount point is ready only where the rootfs is bound (not under /tmp, /work, ...).
        bool ready = (in_ro_rootfs && f.target_in_rootfs) ||
                     (rootfs_is_root && std::find(std::begin(kJailMounts), std::end(kJailMounts), t) !=
                                            std::end(kJailMounts));
        if (!ready)
            ops.push_back({f.is_dir ? OpKind::Mkdir : OpKind::MkFile, t, -1, "", 0, "", f.is_dir ? 0755u : 0644u});
        ops.push_back({OpKind::Bind, t, slot, "", MS_BIND, "", 0});
        unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | f.locked_flags;
        if (!b.writable) flags |= MS_RDONLY;
        ops.push_back({OpKind::Remount, t, -1, "", flags, "", 0});
    }

    // The script: run from where a bind already shows it, else a private read-only copy in
    // the working directory (or, when /work is a host directory, in the read-only root).
    if (script_host_path) {
        plan.script_jail_path = script_via_bind;
        if (!plan.script_jail_path) {
            std::string dir = work_is_bound ? "script" : "work";
            if (work_is_bound) ops.push_back({OpKind::Mkdir, dir, -1, "", 0, "", 0755});
            std::string t = dir + "/" + basename_of(real_script);
            int slot = static_cast<int>(plan.sources.size());
            plan.sources.push_back({*script_host_path, true});
            ops.push_back({OpKind::Copy, t, slot, "", 0, "", 0444});
            plan.script_jail_path = "/" + t;
        }
    }
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
