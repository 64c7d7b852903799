// A run from a template (`pyjail serve`, `pyjail --via`): what the run's jail is made of, and
// its encoding on the way from the client to the server and from the server to the template.
// Pure: planned by the client from the same RunPlan a fresh jail would get, decoded and
// checked by the server and by the template (forked_run.cpp), unit-tested and fuzzed.
//
// The client plans, the template executes: the run's filter, limits, environment and mounts
// are the client's (its profile and options), never the template's. What a run cannot have is
// refused by the client with a reason (plan_forked_mounts): host binds, a rootfs other than
// the template's.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "command.hpp"
#include "egress_plan.hpp"
#include "limits.hpp"
#include "lockdown.hpp"
#include "mountplan.hpp"

namespace pyjail {

struct RunRequest {
    // The program: python's command line as command.cpp parsed it (the template reads no
    // command line of its own), with only options a run from a template honours
    // (template_option_refusal).
    PythonCommand command;
    std::vector<std::string> env;
    // plan_forked_mounts's ops and the working directory; no sources, no new root.
    MountPlan mounts;
    // The same value a fresh jail gets (lockdown.hpp). Its rlimits' `name`s point into a
    // static table once decoded; a run never keeps capabilities, and its filter notifies.
    Lockdown lockdown;
    // The run's cgroup leaf's files, for the server to create it with (empty: no cgroup).
    std::vector<std::pair<std::string, std::string>> cgroup_files;
    std::string rootfs;  // the rootfs the client planned for (rootfs_identity)
    // Which descriptors follow the message, in this order: the report socket and fds 0-2
    // always, then the script (Copy ops read it) and the leaf's cgroup.procs (the server's).
    bool has_script = false;
    bool into_cgroup = false;
    // What the server holds against its own settings before it forwards the request
    // (serve_bounds.hpp): the set the filter was compiled from (empty with no filter), the
    // network mode, and the limits the client's supervisor enforces (0: none).
    std::vector<std::string> seccomp_allow;
    std::uint32_t net = 0;          // NetMode
    double wall_time = 0;           // seconds
    double cpu_time = 0;            // seconds
    std::uint64_t output = 0;       // bytes of stdout+stderr
    // Host binds (template_binds.hpp): the client hands each source over as a detached mount
    // tree, after the script's descriptor and before the leaf's cgroup.procs, one per entry
    // of `mounts.sources` from kFirstHandedSlot on (the client's holds their host paths; a
    // decoded one, none: no host path ever reaches the server or the template). The ids the
    // client's jail owns its files with (--host-user for root, else the user): the server
    // takes binds only when its template's host ids are these (serve_bounds.hpp).
    std::uint32_t binds = 0;
    std::uint32_t files_uid = 0;
    std::uint32_t files_gid = 0;
    // --net allow: the hosts, pins, byte limit and resolver the client's supervisor relays by
    // (the server holds them to its own allowlist); the lock-down's egress_sockets are the
    // ones they plan (egress_socket_specs), which decoding checks.
    EgressPolicy egress;
};

// A run's mount plan: slot 0 stands for the rootfs (the template's) and 1 for the script
// (Copy ops), neither opened; the handed-over binds' sources come from this slot on.
inline constexpr int kFirstHandedSlot = 2;
// Host binds one run may hand over, at most: with the report socket, fds 0-2, the script and
// the cgroup.procs, a request's descriptors stay within kMaxPassedFds (sys.hpp).
inline constexpr std::uint32_t kMaxRunBinds = 8;

// Descriptors that come with a request: 4 always, one for each flag set, one per bind.
int request_fd_count(const RunRequest& r);

// The largest encoded request: one datagram on a SOCK_SEQPACKET socket.
inline constexpr std::size_t kMaxRequestBytes = 160 * 1024;

class BadRequest : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

std::string encode_request(const RunRequest& r);
// Overwrites every byte of the request's strings (its command line, environment, mounts,
// cgroup values) with zeros, before it is freed. The template forks every later run from its
// own memory: what it freed but did not clear, a later run reads (an earlier run's code,
// tokens, keys).
void wipe_request(RunRequest& r);
// Throws BadRequest naming what is wrong; checks every field (counts, lengths, op kinds and
// targets, a filter's length), so what it returns can be executed as it is.
RunRequest decode_request(std::string_view bytes);

// The mount ops of a run from a template, out of the plan a fresh jail would get: the run's
// own /tmp, /work, /dev/shm, /dev/pts and /proc (with its masks), the script copied in, and
// the host binds whose targets are in those directories (their ops keep the plan's source
// slots: plan_run_request renumbers them). The rest of the tree is the template's root, the
// same rootfs. Throws UsageError for what a run from a template cannot have (a host bind
// elsewhere).
std::vector<MountOp> plan_forked_mounts(const MountPlan& plan);

// A name for setrlimit's resource, for messages ("RLIMIT_NOFILE").
const char* rlimit_name(int resource);

}  // namespace pyjail
