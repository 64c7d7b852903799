// The steps of the jail's set-up, as the jail's pid 1 reports the one that failed. The names
// are the values of the report's `error.step` for a failure inside the jail (man pyjail(1),
// "RESULT REPORT"), and what hints.cpp matches: an enum, so that a misspelt step is a
// compile error rather than a hint silently lost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pyjail {

enum class ChildStep : std::uint32_t {
    IdMaps,        // writing the jail's uid_map/gid_map
    SetIds,        // becoming the jail user
    Pdeathsig,     // dying with the supervisor
    Dumpable,      // making pid 1 non-dumpable
    UsernsLimits,  // the jail's user namespace's /proc/sys/user counts
    MountPrivate,  // making the mount namespace private
    MountRoot,     // the new root
    MountTmpfs,
    MountProc,
    MountDevpts,
    Mkdir,         // mount points
    Mkfile,
    Symlink,
    RootfsBind,    // binding the rootfs
    Bind,          // binding a --bind/--ro-bind source
    Remount,       // read-only/nosuid/... remounts
    CopyScript,    // copying the script in
    PivotRoot,
    RemountRoot,
    Chdir,         // entering the working directory
    Hostname,
    Network,       // bringing up lo (--net loopback)
    Rlimits,
    Stdio,         // the relayed standard streams
    Setsid,
    CloseFds,
    Capabilities,
    NoNewPrivs,
    Keyring,
    Seccomp,       // installing the filter, handing its listener to pyjail
    Fork,          // starting the program's process
    Exec,          // executing the program
    // A run from a template (forked_run.cpp):
    RunCgroup,     // joining the run's cgroup leaf
    RunNamespaces, // the run's own mount, net, ipc, uts and cgroup namespaces
};

// One name per step, in the enum's order (checked below).
inline constexpr struct {
    ChildStep step;
    std::string_view name;
} kChildSteps[] = {
    {ChildStep::IdMaps, "id maps"},
    {ChildStep::SetIds, "set ids"},
    {ChildStep::Pdeathsig, "pdeathsig"},
    {ChildStep::Dumpable, "dumpable"},
    {ChildStep::UsernsLimits, "user namespace limits"},
    {ChildStep::MountPrivate, "mount private"},
    {ChildStep::MountRoot, "mount root"},
    {ChildStep::MountTmpfs, "mount tmpfs"},
    {ChildStep::MountProc, "mount /proc"},
    {ChildStep::MountDevpts, "mount devpts"},
    {ChildStep::Mkdir, "mkdir"},
    {ChildStep::Mkfile, "mkfile"},
    {ChildStep::Symlink, "symlink"},
    {ChildStep::RootfsBind, "rootfs bind"},
    {ChildStep::Bind, "bind"},
    {ChildStep::Remount, "remount"},
    {ChildStep::CopyScript, "copy script"},
    {ChildStep::PivotRoot, "pivot_root"},
    {ChildStep::RemountRoot, "remount root"},
    {ChildStep::Chdir, "chdir"},
    {ChildStep::Hostname, "hostname"},
    {ChildStep::Network, "network"},
    {ChildStep::Rlimits, "rlimits"},
    {ChildStep::Stdio, "stdio"},
    {ChildStep::Setsid, "setsid"},
    {ChildStep::CloseFds, "close fds"},
    {ChildStep::Capabilities, "capabilities"},
    {ChildStep::NoNewPrivs, "no_new_privs"},
    {ChildStep::Keyring, "keyring"},
    {ChildStep::Seccomp, "seccomp"},
    {ChildStep::Fork, "fork"},
    {ChildStep::Exec, "exec"},
    {ChildStep::RunCgroup, "run cgroup"},
    {ChildStep::RunNamespaces, "run namespaces"},
};

constexpr bool child_steps_in_order() {
    for (std::size_t i = 0; i < std::size(kChildSteps); ++i)
        if (static_cast<std::size_t>(kChildSteps[i].step) != i) return false;
    return static_cast<std::size_t>(ChildStep::RunNamespaces) + 1 == std::size(kChildSteps);
}
static_assert(child_steps_in_order(), "kChildSteps lists every ChildStep once, in order");

// The step's name; "unknown" for a value that is not a step (the message came over a socket).
constexpr std::string_view child_step_name(ChildStep step) {
    auto i = static_cast<std::size_t>(step);
    return i < std::size(kChildSteps) ? kChildSteps[i].name : std::string_view("unknown");
}

}  // namespace pyjail
