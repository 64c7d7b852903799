// The lines pyjail adds when a program that failed had asked for a network its jail does not
// give it. Under --net none the filter refuses every socket but AF_UNIX (seccomp.cpp), so the
// program sees only "Temporary failure in name resolution" or EPERM, which does not say that
// the jail, not the network, refused it; the supervisor saw each refusal (DeniedCounts).
#pragma once

#include <string>

#include "egress_plan.hpp"
#include "policy.hpp"
#include "seccomp.hpp"

namespace pyjail {

// "" unless `failed` (the run did not exit 0) and the filter refused an AF_INET or AF_INET6
// socket under --net none. `chosen_by`: chosen_by (policy.hpp) of the net setting.
std::string missing_network_hint(NetMode net, const DeniedCounts& denied, bool failed,
                                 const std::string& chosen_by);

// --net allow: the hosts the supervisor refused a failed run (or cut), e.g. "the jail refused
// www.python.org (not an allowed host) ...": the program itself sees only a failed lookup or
// a closed connection. "" unless `failed` and there was such a decision. At most three are
// named (the report's egress has them all).
std::string egress_refusals_hint(const EgressReport& egress, bool failed);

}  // namespace pyjail
