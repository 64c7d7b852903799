// What `pyjail serve` holds every run to: its own settings (profile and options) are the most
// any run it starts may have. Pure: the server builds its bounds once from the template's
// plan and checks each decoded request against them before the template sees it.
//
// Attack: a server started with small limits (`pyjail serve --memory 64M --wall-time 3`, or
// `Pool(options=...)`) whose runs then ask for the profile's larger ones, or for no filter:
// the operator's settings would bound nothing. A run's client plans the run (spawn.cpp,
// run_via); the server refuses, with a reason, a request for more than its own settings:
// rlimits and cgroup values no higher, a tmpfs no larger, a filter allowing no syscall the
// server's does not (with the same network mode), the same network, and the limits the
// client's supervisor enforces (wall time, CPU time, output) no longer.
//
// Attack: under --net allow, a run asking for a host (or port) the server's allowlist does not
// hold, a name pinned to an address the server never pinned (a loopback or LAN service
// behind an allowed name), another resolver, or more bytes: each run's allowlist, pins,
// resolver and --net-bytes must be within the server's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hostid.hpp"
#include "limits.hpp"
#include "policy.hpp"
#include "run_request.hpp"

namespace pyjail {

struct ServeBounds {
    std::vector<RlimitValue> rlimits;                               // the template plan's
    std::vector<std::pair<std::string, std::string>> cgroup_files;  // file -> value
    std::uint64_t tmpfs_size = 0;                                   // bytes
    std::uint64_t tmpfs_inodes = 0;
    std::optional<std::vector<std::string>> seccomp_allow;  // sorted; none: --seccomp off
    NetMode net = NetMode::None;
    double wall_time = 0;  // seconds; 0: none
    double cpu_time = 0;
    std::optional<std::uint64_t> output;
    // Host binds of runs (template_binds.hpp): only with `pyjail serve --allow-binds`, and only
    // when the template's host ids are fixed ones (bind_ids_of), which the client's files must
    // be owned by.
    bool allow_binds = false;
    bool bind_ids_known = false;
    std::uint32_t bind_uid = 0, bind_gid = 0;
    EgressPolicy egress;  // --net allow: the most a run may reach
};

// Attack: a run's writable bind. The template's own writable bind is refused
// (serve_policy_refusal): it is in every run's tree. A run's is not: it is mounted in the run's
// own mount namespace, from a tree its client opened with its own rights, and no other run
// (each in mount and pid namespaces of its own) can name it. What the run writes there lands
// as the template's host ids, so a run may bind only when those are the ids the client's own
// fresh jail would write with (root: --host-user, the template then runs as that user, as
// with --host-ids shared; a user: the user's own): no file of the client's becomes another
// id's, and no id another jail may take later owns what the run left.
// Records the template's host ids for that check: known only when they are fixed (a host
// user, or the invoking user's own).
void bind_ids_of(ServeBounds& b, const HostIdPlan& template_ids);

// The bounds of a server whose template was planned with `policy` and `limits` (as a run of
// the same server's cgroup site would plan them) and `seccomp_allow` (none: no filter).
ServeBounds serve_bounds(const Policy& policy, const LimitPlan& limits,
                         std::optional<std::vector<std::string>> seccomp_allow);

// Why `r` asks for more than `b` allows, in one line naming the setting, both values and the
// fix; nothing when it is within them.
std::optional<std::string> beyond_bounds(const RunRequest& r, const ServeBounds& b);

// Why a server cannot be started with this policy, or nothing.
// Attack: a writable bind of the template (`pyjail serve --bind DIR`) is in every run's tree
// (runs replace only their own /tmp, /work, /proc, /dev/shm and /dev/pts), so concurrent
// and later runs of every client share it: one run leaves data or code for the next.
std::optional<std::string> serve_policy_refusal(const Policy& policy);

}  // namespace pyjail
