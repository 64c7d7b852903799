// Host binds of a run from a template (`pyjail --via`, the Python package's Pool).
//
// A run's mount namespace is the run's own, forked from the template's, where no host path
// exists: the template's root is its rootfs. So the client opens each bind's source itself, as a
// detached mount tree (open_tree(OPEN_TREE_CLONE)), with its own rights: root as the jail's
// host user (--host-user, as a fresh jail's pid 1 opens it), a user as itself, from a user
// and mount namespace of its own (the only way a user may clone a mount). It sends the trees
// with the request (SCM_RIGHTS, at most kMaxRunBinds); the run's pid 1 puts each at its target
// in its own mount namespace with the mount plan's one function (steps.cpp, apply_mount_plan,
// its source_mount_fds), and the plan's remount makes it read-only where it was asked to be.
//
// What a fresh jail refuses, a run refuses: the plan's own checks (plan_mounts: sensitive
// sources, read-only filesystems) ran when the client planned the run, and what was opened is
// checked again (check_opened_source): a source swapped for a symlink after the plan was
// checked is judged by what it now is. The server takes binds only when it was started with
// --allow-binds (serve_bounds.hpp says why, and which ids the run writes with).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mountplan.hpp"
#include "policy.hpp"
#include "run_request.hpp"
#include "sys.hpp"

namespace pyjail {

// Gives the request's host binds (ops keeping the plan's source slots, plan_forked_mounts) the
// slots a run numbers them by (kFirstHandedSlot, ...), in the order of the ops, and fills
// `r.mounts.sources` with their host paths and `r.binds`. Throws UsageError beyond kMaxRunBinds.
void plan_handed_binds(RunRequest& r, const MountPlan& plan);

// A fresh jail whose /work is a host directory copies the script into /script, in its own
// root; a run's root is the template's rootfs, where it can make nothing: the run copies it
// into its own /tmp (/tmp/.script/NAME) instead, and its command (a File) names it
// there. `plan`: the fresh jail's mount plan the request was made from.
void relocate_run_script(RunRequest& r, const MountPlan& plan);

// The bind of `binds` whose source a handed-over slot's host path is (all_binds order).
const BindSpec* bind_of_source(const std::vector<BindSpec>& binds, const std::string& host_path);

// Why an opened source may not be handed over, or nothing: `real` is where the opened tree is
// now (its /proc/self/fd link), `fs_type` its statfs f_type, `credentials` the credential
// names directly in it. A kernel file system (procfs, sysfs, ...) would show the host's
// processes and devices; the rest is sensitive_bind_reason's, with --allow-sensitive-bind
// honoured as a fresh jail honours it.
std::optional<std::string> opened_source_refusal(const Policy& policy, const BindSpec& bind, const std::string& real,
                                                 std::int64_t fs_type, const std::vector<std::string>& credentials,
                                                 const std::vector<std::string>& homes);

namespace setup {

// The client's side: each handed-over source of `r` (slots kFirstHandedSlot on) as a detached
// mount tree, opened with the client's rights as the header says (`files_uid`/`files_gid`:
// whose rights root opens them with), each checked with opened_source_refusal. Throws
// JailError (step "bind") naming the source, or UsageError for a refused one.
std::vector<UniqueFd> open_handed_binds(const RunRequest& r, const Policy& policy, uid_t files_uid, gid_t files_gid);

}  // namespace setup

}  // namespace pyjail
