// The plans of the two ways into a jail, from the one RunPlan: a fresh jail's ChildPlan
// (child.hpp, cloned by the supervisor) and a run from a template's RunRequest (run_request.hpp,
// forked by `pyjail serve`'s template). Both carry the same lock-down (lockdown.hpp), planned
// here once. Pure: the supervisor (spawn.cpp) adds the descriptors; tests/unit/test_run_plans.cpp
// checks that what one plan carries, the other does too.
#pragma once

#include "child.hpp"
#include "lockdown.hpp"
#include "prepare.hpp"
#include "run_request.hpp"

namespace pyjail {

// The counts of the jail's user namespace its pid 1 writes (/proc/sys/user): a fresh jail's
// leaves out those its program cannot reach anyway (why: run_plans.cpp).
std::vector<UsernsLimit> userns_limits_to_write(const std::vector<UsernsLimit>& limits, bool is_template);

// The jail's lock-down; a template's (RunPlan::is_template) keeps what its runs need.
Lockdown plan_lockdown(const RunPlan& p);

// A fresh jail's pid 1's plan, but for the descriptors and pyjail's own argv (sync socket,
// stdio relay, script: the supervisor's). Its argv and envp point into `p`'s strings.
ChildPlan plan_child(const RunPlan& p);

// What the client asks a template for: the plan a fresh jail would get, as far as a run from
// a template can have it. Throws UsageError for what it cannot (plan_forked_mounts).
RunRequest plan_run_request(const RunPlan& p, bool has_script);

}  // namespace pyjail
