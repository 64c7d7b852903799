// The host facts the sensitive-bind check needs (policy.hpp: check_sensitive_binds), gathered
// by the supervisor before the plan is made. Only lookups: the decision is pure, in policy.cpp.
#pragma once

#include <string>
#include <vector>

namespace pyjail::setup {

// Realpaths of $HOME and of the invoking user's home in the passwd database (either may be
// missing; a path that does not resolve is kept as written).
std::vector<std::string> home_dirs();

// Which of kCredentialNames exist directly in the directory `dir_fd` (an O_PATH fd).
std::vector<std::string> credentials_in(int dir_fd);

}  // namespace pyjail::setup
