#include "template_binds.hpp"

#include <fmt/format.h>
#include <linux/magic.h>

#include "error.hpp"

namespace pyjail {

static_assert(4 + 1 + 1 + kMaxRunBinds <= kMaxPassedFds, "a request's descriptors must fit one message");

void plan_handed_binds(RunRequest& r, const MountPlan& plan) {
    r.mounts.sources.assign(kFirstHandedSlot, SourceRef{"", true});
    r.binds = 0;
    for (auto& op : r.mounts.ops) {
        if (op.kind != OpKind::Bind || op.source_slot <= 0) continue;
        if (r.binds == kMaxRunBinds)
            throw UsageError(fmt::format("--via: a run from a template binds at most {} host paths", kMaxRunBinds),
                             "bind a common parent directory, or run without --via");
        r.mounts.sources.push_back(plan.sources.at(static_cast<std::size_t>(op.source_slot)));
        op.source_slot = kFirstHandedSlot + static_cast<int>(r.binds++);
    }
}

void relocate_run_script(RunRequest& r, const MountPlan& plan) {
    if (!plan.script_jail_path || plan.script_jail_path->rfind("/script/", 0) != 0) return;
    for (const auto& op : plan.ops) {
        if (op.kind != OpKind::Copy || "/" + op.target != *plan.script_jail_path) continue;
        const std::string moved = "tmp/.script/" + op.target.substr(std::string("script/").size());
        r.mounts.ops.push_back({OpKind::Mkdir, "tmp/.script", -1, "", 0, "", 0755});
        MountOp copy = op;
        copy.target = moved;
        r.mounts.ops.push_back(copy);
        if (r.command.kind == PythonKind::File) r.command.target = "/" + moved;
        return;
    }
}

const BindSpec* bind_of_source(const std::vector<BindSpec>& binds, const std::string& host_path) {
    for (const auto& b : binds)
        if (b.source == host_path) return &b;
    return nullptr;
}

std::optional<std::string> opened_source_refusal(const Policy& policy, const BindSpec& bind, const std::string& real,
                                                 std::int64_t fs_type, const std::vector<std::string>& credentials,
                                                 const std::vector<std::string>& homes) {
    // Attack: `--ro-bind /proc:/work/p`: the host's procfs in the run shows the host's
    // processes (their command lines, the client's own environment), and sysfs or the other
    // kernel file systems its devices and controls. A run has its own /proc; none of these is
    // ever a run's to see.
    static const std::pair<std::int64_t, const char*> kernel_fs[] = {
        {PROC_SUPER_MAGIC, "procfs"},   {SYSFS_MAGIC, "sysfs"},       {DEBUGFS_MAGIC, "debugfs"},
        {TRACEFS_MAGIC, "tracefs"},     {SECURITYFS_MAGIC, "securityfs"}, {CGROUP_SUPER_MAGIC, "cgroupfs"},
        {CGROUP2_SUPER_MAGIC, "cgroup2"}, {BPF_FS_MAGIC, "bpffs"},     {DEVPTS_SUPER_MAGIC, "devpts"},
        {EFIVARFS_MAGIC, "efivarfs"},   {PSTOREFS_MAGIC, "pstore"},   {NSFS_MAGIC, "nsfs"}};
    for (const auto& [magic, name] : kernel_fs)
        if (fs_type == magic)
            return fmt::format("{}: {} is on {}, the host's kernel state: a run from a template binds none of it",
                               bind.origin, real, name);
    // Attack: the source swapped (for a symlink to $HOME, /, ~/.ssh) between the plan's check
    // and the open: what was opened is judged again, as the plan judged the name.
    if (auto why = sensitive_bind_reason({real, credentials}, homes)) {
        if (bind.named_on_command_line && policy.allow_sensitive_bind) return std::nullopt;
        return fmt::format("{}: {} is {}: the jail would see every file there and reach its Unix sockets",
                           bind.origin, real, *why);
    }
    return std::nullopt;
}

}  // namespace pyjail
