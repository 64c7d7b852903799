// How to fix what failed, when we know: these read the host's settings to give the one hint
// that applies, e.g. which sysctl disables unprivileged user namespaces here.
#pragma once

#include <string>

#include "child_step.hpp"

namespace pyjail {

// For a failure to create the jail's namespaces (clone3). `invoker_is_root`: pyjail runs as
// root (whose user namespaces no sysctl for unprivileged ones restricts).
std::string namespace_hint(int err, bool invoker_is_root);

// For a failure in the jail's set-up, by step and errno. `host_user`: who the jail is on the
// host (uid_with_name), when known: the rights a rootfs or a bind lacked are that user's.
std::string child_step_hint(ChildStep step, int err, const std::string& host_user = "");

// "uid 65534 (nobody)"; when /etc/passwd has no name for it (a jail's own id), "uid
// 1879048192 (UNNAMED)", or "uid 1879048192" for an empty `unnamed`.
std::string uid_with_name(unsigned uid, const std::string& unnamed = "");

}  // namespace pyjail
