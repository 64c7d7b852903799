#include "run_plans.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <string_view>

#include "template_binds.hpp"

namespace pyjail {

namespace {

// Namespaces of each kind a template's runs may hold at once (each run holds one of each).
constexpr std::uint64_t kTemplateNamespaces = 4096;

}  // namespace

std::vector<UsernsLimit> userns_limits_to_write(const std::vector<UsernsLimit>& limits, bool is_template) {
    if (is_template) return limits;  // it keeps CAP_SYS_ADMIN: each count is what caps it
    // A fresh jail's program can make no namespace of any kind, so a count of 0 for the mount,
    // pid, net, ipc, uts, cgroup and time kinds would cap nothing, and writing each costs a
    // /proc/sys lookup on every start. A namespace of those kinds takes CAP_SYS_ADMIN in the
    // user namespace that would own it: the program holds no capability in the jail's (all
    // dropped, the bounding set emptied, SECBIT_NOROOT locked, no_new_privs), and a new user
    // namespace, where it would hold them all, is refused by the user.max_user_namespaces=0
    // kept here (also for unshare(CLONE_NEWUSER | CLONE_NEWNET) in one call: the user namespace
    // is counted first). The filter refuses every CLONE_NEW* as well; test_jail_namespaces.py
    // shows the kernel refusing each kind without it (--seccomp off).
    // Fail closed: that holds only while user.max_user_namespaces=0 is written (required) with
    // them. Attack: a plan that let the program make a user namespace, where it would hold
    // CAP_SYS_ADMIN, with the other counts left out here: every other kind unbounded in it.
    const bool no_user_namespaces = std::any_of(limits.begin(), limits.end(), [](const UsernsLimit& l) {
        return std::string_view(l.name) == "max_user_namespaces" && l.value == 0 && l.required;
    });
    if (!no_user_namespaces) return limits;
    std::vector<UsernsLimit> kept;
    for (const auto& l : limits) {
        std::string_view name = l.name;
        bool other_namespaces = name != "max_user_namespaces" && name.substr(0, 4) == "max_" &&
                                name.find("_namespaces") != std::string_view::npos;
        if (!other_namespaces || l.value != 0) kept.push_back(l);
    }
    return kept;
}

Lockdown plan_lockdown(const RunPlan& p) {
    Lockdown l;
    l.hostname = p.policy.hostname;
    l.loopback_up = p.policy.net != NetMode::None;
    // --net allow: the resolver and listeners pid 1 binds in the jail's network namespace for
    // the supervisor (egress_plan.hpp): a fresh jail's, or a run's from a template (each run
    // has a namespace of its own, forked_run.cpp). A template binds none: it relays nothing.
    if (p.egress && !p.is_template) l.egress_sockets = egress_socket_specs(*p.egress);
    l.rlimits = p.limits.rlimits;
    l.seccomp_filter = p.seccomp_filter;
    if (!p.is_template) return l;
    // A template (`pyjail serve`) is a jail whose program forks the runs: each run applies its
    // own client's lock-down (forked_run.cpp), so the template keeps only the limits that hold
    // for every run -- one a run sets for itself cannot be raised again -- and may create the
    // namespaces its runs need.
    l.template_capabilities = true;
    // Its runs' pid 1 binds the jail's resolver at port 53 in the run's network namespace.
    l.template_binds_low_ports = p.policy.net == NetMode::Allow;
    // Not the profile's filter, which every run installs for itself (forked_run.cpp) before its
    // program exists, but the template's own: what no template needs, answered in the kernel
    // (seccomp.cpp, compile_template_filter). One filter stack notifies only one listener: the
    // run's.
    l.seccomp_filter = p.template_filter;
    l.filter_notifies = false;
    std::vector<RlimitValue> kept;
    for (const auto& r : l.rlimits)
        if (r.resource == RLIMIT_CORE || r.resource == RLIMIT_NOFILE || r.resource == RLIMIT_RTPRIO ||
            r.resource == RLIMIT_NICE || r.resource == RLIMIT_MEMLOCK || r.resource == RLIMIT_SIGPENDING)
            kept.push_back(r);
    l.rlimits = std::move(kept);
    return l;
}

ChildPlan plan_child(const RunPlan& p) {
    ChildPlan c;
    c.jail_uid = kJailUid;
    c.jail_gid = kJailGid;
    if (!p.invoker.is_root()) {  // the child writes its own maps (root's, the parent writes)
        c.own_uid_map = p.ids.uid_map;
        c.own_gid_map = p.ids.gid_map;
    }
    c.staging_dir = "/tmp";
    c.mounts = p.mounts;
    c.lockdown = plan_lockdown(p);
    c.exec_path = p.command.exec_path;
    c.userns_limits = userns_limits_to_write(p.limits.userns_limits, p.is_template);
    if (p.is_template) {
        // Each run creates a user namespace of its own (run_userns.hpp) and a mount, pid, net,
        // ipc, uts and cgroup namespace in the template's user namespace; none may create a
        // time namespace (and no run keeps the capability to create any).
        for (auto& l : c.userns_limits) {
            std::string_view name = l.name;
            if (name != "max_time_namespaces" &&
                name.substr(0, 4) == "max_" && name.find("_namespaces") != std::string_view::npos)
                l.value = kTemplateNamespaces;
        }
    }
    // execve's argv and envp are char* for historical reasons; it never writes through them.
    for (const auto& a : p.argv) c.argv.push_back(const_cast<char*>(a.c_str()));
    c.argv.push_back(nullptr);
    for (const auto& e : p.env) c.envp.push_back(const_cast<char*>(e.c_str()));
    c.envp.push_back(nullptr);
    return c;
}

RunRequest plan_run_request(const RunPlan& p, bool has_script) {
    RunRequest r;
    r.command = plan_template_command(p.argv);  // one parser: the template reads no command line
    r.env = p.env;
    r.mounts.ops = plan_forked_mounts(p.mounts);
    r.mounts.cwd = p.mounts.cwd;
    r.lockdown = plan_lockdown(p);
    r.lockdown.own_user_namespace = true;  // as the template sets it (run_request.cpp)
    r.lockdown.new_keyring = false;        // likewise
    if (p.cgroup.ok) r.cgroup_files = p.limits.cgroup_files;
    r.rootfs = p.rootfs;
    r.has_script = has_script;
    // For the server to hold against its own settings (serve_bounds.hpp).
    if (p.seccomp) r.seccomp_allow = p.seccomp->allow;
    r.net = static_cast<std::uint32_t>(p.policy.net);
    r.wall_time = p.policy.wall_time;
    r.cpu_time = p.policy.limits.cpu_time;
    r.output = p.policy.limits.output.value_or(0);
    plan_handed_binds(r, p.mounts);
    relocate_run_script(r, p.mounts);
    r.files_uid = p.host_ids.files_uid;
    r.files_gid = p.host_ids.files_gid;
    if (p.egress) r.egress = p.egress->policy;
    return r;
}

}  // namespace pyjail
