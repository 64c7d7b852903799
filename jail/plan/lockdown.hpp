// A jail's lock-down: what its pid 1 does once the jail's mounts are in place, to make it the
// jail its plan says (host name, loopback, rlimits, the standard streams, a new session, no
// inherited descriptor, no capability, no_new_privs, a new keyring, the filter). One value,
// planned once from a RunPlan (plan_lockdown, run_plans.hpp) and carried by both ways into a
// jail: a fresh jail's ChildPlan (child.hpp) and a run from a template's RunRequest
// (run_request.hpp); one function applies it (pid1::lock_down, steps.hpp). A step added here is
// in every jail, and tests/unit/test_run_plans.cpp checks that both plans carry it.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "egress_plan.hpp"
#include "limits.hpp"

namespace pyjail {

struct Lockdown {
    std::string hostname = "pyjail";
    bool loopback_up = false;          // --net loopback or allow: `lo` up
    // --net allow: the sockets pid 1 binds once `lo` is up, while it still holds the network
    // namespace's capabilities (ports below 1024), and hands to the supervisor (egress_pid1.hpp).
    std::vector<EgressSocketSpec> egress_sockets;
    // A run from a template: a user namespace of its own once its namespaces are configured
    // with the template's capabilities and before its rlimits, so the per-user counts
    // (RLIMIT_NPROC, pending signals, ...) are the run's own (run_userns.hpp). Set by the
    // template for every request it decodes, whatever the client sent.
    bool own_user_namespace = false;
    // Start the program in a new, empty session keyring (keyrings are not namespaced). A run
    // from a template does not: it keeps its template's, which is new, empty and anonymous
    // (the template's own pid 1 joined it) and stays so, since under the template's filter no
    // process of the template or of its runs can call keyctl, add_key or request_key
    // (seccomp.cpp, compile_template_filter): sharing it shares nothing. A keyring per run
    // would charge every live run to the template's host user's key quota
    // (kernel.keys.maxkeys, 200 by default) and cap a template at that many runs at once.
    // Set by the template for every request it decodes, whatever the client sent.
    bool new_keyring = true;
    std::vector<RlimitValue> rlimits;  // soft and hard
    // A template's (`pyjail serve`) program keeps the few capabilities its runs' set-up needs
    // (steps.cpp, keep_template_capabilities); every other program keeps none.
    bool template_capabilities = false;
    // ... and, serving --net allow, CAP_NET_BIND_SERVICE: a run's pid 1 binds its resolver
    // at 127.0.0.1:53 (egress_pid1.hpp).
    bool template_binds_low_ports = false;
    std::vector<sock_filter> seccomp_filter;  // empty: no filter (--seccomp off)
    // The filter sends what it refuses to the supervisor (a user-notification listener, handed
    // over with "ready"); false: a filter that answers in the kernel and has no listener.
    bool filter_notifies = true;
};

bool operator==(const Lockdown& a, const Lockdown& b);

}  // namespace pyjail
