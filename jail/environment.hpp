// The program's environment in the jail, and the PATH that both it and the lookup of a
// command (command.cpp) use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "policy.hpp"

namespace pyjail {

inline constexpr std::string_view kJailPath = "/usr/local/bin:/usr/bin:/bin";

// Built from scratch: fixed defaults (PATH above, HOME, USER, ...), then the profile's and the
// command line's --env. Never anything of the host's.
std::vector<std::string> jail_environment(const Policy& policy);

}  // namespace pyjail
