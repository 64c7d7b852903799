// How to fix what failed, when we know: these read the host's settings to give the one hint
// that applies, e.g. which sysctl disables unprivileged user namespaces here.
#pragma once

#include <string>

#include "child_step.hpp"

namespace pyjail {

// For a failure to create the jail's namespaces (clone3). `invoker_is_root`: pyjail runs as
// root (whose user namespaces no sysctl for unprivileged ones restricts).
std::string namespace_hint(int err, bool invoker_is_root);

// For a failure in the jail's set-up, by step and errno.
std::string child_step_hint(ChildStep step, int err);

}  // namespace pyjail
