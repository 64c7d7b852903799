// Controlled egress, in the jail's pid 1 (egress_plan.hpp says how a flow goes): the sockets
// the supervisor serves the jail through, made in the jail's network namespace while pid 1
// still holds that namespace's capabilities (ports below 1024), then handed over.
#pragma once

#include <cstdint>
#include <vector>

#include "egress_plan.hpp"

namespace pyjail {

namespace pid1 {

// Binds every socket of `specs` and sends them to the supervisor (MsgKind::Egress, up to
// kMaxPassedFds a message: the first one's index in `exit_code`, how many in `wait_status`),
// then closes pid 1's copy: the program's namespace holds them only through
// the supervisor, which the program cannot reach. Fails the run on any error.
void open_egress_sockets(const std::vector<EgressSocketSpec>& specs);

}  // namespace pid1

}  // namespace pyjail
