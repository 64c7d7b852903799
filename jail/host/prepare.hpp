// Parent-only set-up (namespace setup): from a validated Policy to one immutable plan of the
// run, before any process exists. Anything that can fail on user input fails here. The plan
// is values only; the one descriptor the jail needs from the host (the script) is owned
// apart from it, in RunFds.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "cgroup.hpp"
#include "command.hpp"
#include "hostid.hpp"
#include "idmap.hpp"
#include "limits.hpp"
#include "mountplan.hpp"
#include "paths.hpp"
#include "policy.hpp"
#include "seccomp.hpp"
#include "sys.hpp"
#include "systemd_scope.hpp"

namespace pyjail {

// Who runs pyjail, asked once: root maps another user (--host-user), opens host files with
// that user's rights, and writes the jail's id maps itself.
struct Invoker {
    uid_t uid = 0;
    gid_t gid = 0;
    bool is_root() const { return uid == 0; }
};

// A writable bind whose source the jail's host user (root's --host-user, or the invoking user)
// cannot write: what the program writes there will fail (supervisor::check_host_before_run
// warns of it).
struct UnwritableBind {
    std::string origin;  // where the bind was asked for ("--bind", a profile's line)
    std::string source;  // the host path
    uid_t owner = 0;     // the source's owner, whom the warning's fix names (unless root)
};

// Everything a run will do, decided before any process exists.
struct RunPlan {
    Policy policy;
    Invoker invoker;
    std::string rootfs;
    ResolvedCommand command;
    std::vector<std::string> argv;  // as the program gets it (script path made in-jail)
    std::vector<std::string> env;
    std::vector<BindSpec> binds;    // every bind, the profile's and the command line's
    std::vector<UnwritableBind> unwritable_binds;  // as the jail's host user found them
    MountPlan mounts;
    IdMaps ids;                     // host_uid/gid: who owns what the jail writes to host binds
    HostIdPlan host_ids;            // the jail's own host ids (hostid.hpp), taken when it runs
    std::optional<SeccompSet> seccomp;        // none: --seccomp off
    std::vector<sock_filter> seccomp_filter;  // ready before any process exists
    std::string seccomp_compiled_at;          // the build-time file it came from, or ""
    CgroupSite cgroup;              // where the jail's cgroup goes, or why it cannot
    // Set when pyjail's cgroup is not delegated and systemd is to be asked for a scope that
    // is (supervisor::settle_cgroup, at run time); `limits` are then planned for cgroup v2.
    std::optional<BusChoice> systemd_scope;
    LimitPlan limits;               // every limit and the mechanism enforcing it
    std::optional<EgressPlan> egress;  // --net allow: the names' addresses and listeners
    // The jail is a template of `pyjail serve` (serve.cpp): it keeps the capabilities its
    // runs need, has a filter of its own (compile_template_filter, seccomp.hpp; each run
    // installs its client's on top of it) and lives on.
    bool is_template = false;
    std::vector<sock_filter> template_filter;
};

// The host descriptors the plan refers to, open until the jail has what it needs of them.
struct RunFds {
    // The script, opened with the jail's host user's rights: what the plan's content sources
    // (mounts.sources[i].content) are copied from. None without a script.
    UniqueFd script;
};

struct PreparedRun {
    RunPlan plan;
    RunFds fds;
};

namespace setup {

// What decides the jail's host ids (hostid.hpp) that is the host's: the invoker's subordinate
// ranges, the helpers, its lock directory. Policy fields are left at their defaults.
HostIdFacts host_facts_of_invoker(uid_t uid, gid_t gid);

// Gathers the host's facts (the rootfs, the bind sources, the script), plans the mounts, ids,
// environment, filter and limits. Only plans: nothing is printed, no kernel feature probed
// (see supervisor::check_host_before_run), so --explain shows the plan and nothing else.
// Throws JailError.
// `cgroup_site`: where the limits' cgroup is, when another process decided it (a run from a
// template: `pyjail serve`'s); otherwise found here.
PreparedRun prepare_run(Policy policy, const DataDirs& dirs, const CgroupSite* cgroup_site = nullptr);

// pyjail's own environment (environ), for --env-pass and the notice of what is not passed.
std::vector<std::string> host_environment();

}  // namespace setup

}  // namespace pyjail
