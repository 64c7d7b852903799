// The run (namespace supervisor): from a prepared plan (prepare.hpp) to pyjail's exit status.
#pragma once

#include "prepare.hpp"
#include "report.hpp"

namespace pyjail::supervisor {

// Creates the jail, releases it, supervises it to its end and gathers what the report says
// into `facts`. Returns pyjail's exit status. Throws JailError for a failure of the jail's
// set-up (also the child's, reported over the sync socket), with `facts` filled as far as
// the run got.
int run_jail(const PreparedRun& prepared, char** host_argv, RunFacts& facts);

}  // namespace pyjail::supervisor
