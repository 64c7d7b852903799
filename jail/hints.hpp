// How to fix what failed, when we know: these read the host's settings to give the one hint
// that applies, e.g. which sysctl disables unprivileged user namespaces here.
#pragma once

#include <string>

namespace pyjail {


// For a failure to create the jail's namespaces (clone3).
std::string namespace_hint(int err);

// For a failure in the child, by step name and errno.
std::string child_step_hint(const std::string& step, int err);

}  // namespace pyjail
