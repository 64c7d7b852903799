// A delegated cgroup from systemd, for a pyjail started in one that is not (a login session's
// session-N.scope, cron.service): pyjail asks the manager that owns its processes -- the
// user's manager for a user, the system manager for root -- for a transient scope holding
// pyjail itself, with Delegate=yes, as `systemd-run --scope -p Delegate=yes` would, and as
// podman and BenchExec do. Then the run proceeds as in any delegated cgroup (cgroup.hpp).
//
//   supervisor                                    bus (dbus-daemon / dbus-broker) -> systemd
//   AUTH EXTERNAL <uid>, BEGIN        ------->
//   Hello, AddMatch(JobRemoved)       ------->    the match is in place before the call
//   StartTransientUnit("pyjail-<random>.scope", "fail",
//     PIDs=[own pid], Delegate=yes, CollectMode=inactive-or-failed)
//                                     <-------    job object path
//                                     <-------    JobRemoved(id, job, unit, "done")
//   now in the scope's cgroup, owned by the invoking user: a delegated cgroup
//
// Nothing is left behind: when pyjail exits the scope is empty, systemd stops it and, with
// CollectMode=inactive-or-failed, forgets it even if it failed; its cgroup (and the leaves
// pyjail made in it) go with it.
//
// The cost is one connection and three round trips, paid only when pyjail's own cgroup is
// not delegated and the limits want a cgroup: a delegated cgroup, --cgroup-parent,
// --cgroup off and --cgroup-manager none never open a connection.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "cgroup.hpp"
#include "dbus.hpp"
#include "policy.hpp"

namespace pyjail {

// The bus of the manager to ask.
struct BusChoice {
    bool system = false;  // the system manager (root), else the user's manager
    std::string socket;   // unix socket path; a leading NUL names an abstract socket
    std::string origin;   // where the address came from, for messages ("$XDG_RUNTIME_DIR/bus")
    std::string manager_name() const { return system ? "the system manager" : "the user manager"; }
};

namespace setup {

// Whether to ask systemd for a scope. `refusal` (set only for --cgroup-manager systemd) is
// why a scope cannot be had or cannot help: the run then fails with it. Pure.
struct ScopeDecision {
    bool ask = false;
    std::string refusal;
};
ScopeDecision decide_scope(CgroupManager manager, CgroupMode mode, bool wants_cgroup,
                           const CgroupSite& site, bool parent_given, bool systemd_booted);

// Which bus to ask, from the environment's values (nullptr: unset), as sd-bus chooses:
// root asks the system manager ($DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket),
// others their own manager ($DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus, else
// /run/user/UID/bus -- a cron job has no session variables, a lingering user's bus is there).
// nullopt with `why_not` when an address is set but names no unix socket. Pure.
std::optional<BusChoice> choose_bus(uid_t uid, const char* session_address,
                                    const char* xdg_runtime_dir, const char* system_address,
                                    std::string& why_not);

// True when systemd is the init (/run/systemd/system exists, as sd_booted() checks).
bool systemd_booted();

}  // namespace setup

namespace systemd {

// "pyjail-<16 hex digits>.scope". Pure.
std::string scope_name(std::uint64_t random);

// The calls, as marshalled bodies ready for dbus::encode_call. Pure.
dbus::Call hello_call();
dbus::Call add_match_call();  // JobRemoved from systemd's manager object
dbus::Call start_scope_call(const std::string& unit, pid_t pid);

// A JobRemoved signal of systemd's manager: which job ended, for which unit, how ("done",
// "failed", ...) and who sent it. nullopt for any other message. Pure.
struct JobRemoved {
    std::string sender, job, unit, result;
};
std::optional<JobRemoved> parse_job_removed(const dbus::Message& m);

}  // namespace systemd

namespace supervisor {

struct JoinedScope {
    std::string unit;        // "pyjail-….scope"
    std::string cgroup_dir;  // its cgroup, absolute: pyjail is in it now
    double ms = 0;           // connect to JobRemoved
};

// Asks `bus`'s manager for a delegated scope holding this process and waits until systemd
// has moved it there (10 s at most). Throws JailError (step "systemd"); its errno is
// ENOENT or ECONNREFUSED when there is no bus to ask.
JoinedScope join_systemd_scope(const BusChoice& bus);

}  // namespace supervisor

}  // namespace pyjail
