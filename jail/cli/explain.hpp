// --explain: the effective policy as text -- every setting with where it came from, and what
// the jail will do with it (mounts, ids, environment, command). The settings part is itself a
// valid profile, so it can be saved and edited.
#pragma once

#include <string>
#include <vector>

#include "hostid.hpp"
#include "idmap.hpp"
#include "limits.hpp"
#include "mountplan.hpp"
#include "policy.hpp"
#include "seccomp.hpp"

namespace pyjail {

struct ExplainInput {
    const Policy& policy;
    const std::string& rootfs;
    const MountPlan& mounts;
    const IdMaps& ids;
    const std::string& exec_path;
    const std::vector<std::string>& argv;
    const std::vector<std::string>& env;
    const SeccompSet* seccomp;  // null: --seccomp off
    const std::vector<LimitEntry>& limits;
    std::string cgroup;         // the delegated cgroup, or "none: why"
    const HostIdPlan* host_ids = nullptr;  // where the jail's own host ids come from
};

std::string explain_text(const ExplainInput& in);

// A value as a profile would spell it.
std::string toml_quote(const std::string& value);

}  // namespace pyjail
