// The run (namespace supervisor): from a prepared plan (prepare.hpp) to pyjail's exit status.
#pragma once

#include <functional>
#include <string>

#include "paths.hpp"
#include "prepare.hpp"
#include "report.hpp"

namespace pyjail::supervisor {

// Creates the jail, releases it, supervises it to its end and gathers what the report says
// into `facts`. Returns pyjail's exit status. Throws JailError for a failure of the jail's
// set-up (also the child's, reported over the sync socket), with `facts` filled as far as
// the run got.
int run_jail(const PreparedRun& prepared, char** host_argv, RunFacts& facts);

// The same run as a fork of the template `pyjail serve` holds at `socket` (serve.hpp): planned
// here against what the server says (its rootfs, whether runs get a cgroup), started by the
// template, supervised here as run_jail supervises a fresh jail, with the same report.
// `on_script` sees the script's descriptor before the run (the audit log hashes it).
int run_via(const std::string& socket, Policy policy, const DataDirs& dirs, char** host_argv,
            RunFacts& facts, const std::function<void(int)>& on_script);

// Before run_jail, when the plan asks for a systemd scope (plan.systemd_scope): moves pyjail
// into one (systemd_scope.hpp) and points plan.cgroup at it. When that fails, an explicit
// --cgroup-manager systemd or --cgroup require throws JailError; auto falls back as if no
// scope had been planned (rlimits, and the notice saying why).
void settle_cgroup(RunPlan& plan);

}  // namespace pyjail::supervisor
