// A run from a template in a user namespace of its own (forked_run.cpp).
#pragma once

#include <sys/types.h>

namespace pyjail::pid1 {

// Called by a run's pid 1 once the namespaces it configures with the template's capabilities
// (mounts, host name, lo) are set up, and before its rlimits: a new user namespace mapping
// the jail user to itself. Per-user counts (RLIMIT_NPROC,
// pending signals, ...) are kept per user namespace as well, and each level is checked
// against its own limit: the run's processes count against the run's limits, not against one
// count shared by the template and every run of it. Fails the run on any error.
void enter_run_user_namespace(uid_t uid, gid_t gid) noexcept;

}  // namespace pyjail::pid1
