// The program's environment in the jail, and the PATH that both it and the lookup of a
// command (command.cpp) use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "policy.hpp"

namespace pyjail {

inline constexpr std::string_view kJailPath = "/usr/local/bin:/usr/bin:/bin";

// Built from scratch: fixed defaults (PATH above, HOME, USER, ...), then the host's variables
// that --env-pass names (taken from `host_env`, "NAME=VALUE" strings as in environ; a name
// the host does not set stays unset), then the profile's and the command line's --env, which
// win. Nothing else of the host's.
std::vector<std::string> jail_environment(const Policy& policy, const std::vector<std::string>& host_env = {});

// The names in `host_env` a program could have meant to get and does not: all but those every
// login, shell and cron job has (PATH, HOME, SHELL, LANG, ...; env_notice_ignores), sorted.
std::vector<std::string> unpassed_variables(const std::vector<std::string>& host_env);
bool env_notice_ignores(std::string_view name);

// How often the environment notice is said (notice_stamp.hpp, env_notice_when): its line says
// so, and what silences it.
enum class NoticeCadence { EveryRun, Daily };

// The one line pyjail says when the invoker's environment holds variables the jail does not
// get and neither --env nor --env-pass was used ("" when there is nothing to say): at most a
// few names, never a value.
std::string env_notice(const Policy& policy, const std::vector<std::string>& host_env,
                       NoticeCadence when = NoticeCadence::Daily);

}  // namespace pyjail
