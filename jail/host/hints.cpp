#include "hints.hpp"

#include <fmt/format.h>

#include <cerrno>

#include "hostid.hpp"
#include "sys.hpp"

namespace pyjail {

std::string namespace_hint(int err, bool invoker_is_root) {
    if (err == ENOSYS) return "this kernel has no clone3; pyjail needs Linux 5.7 or newer";
    if (err == ENOSPC || err == EUSERS) {
        if (read_trimmed("/proc/sys/user/max_user_namespaces") == "0")
            return "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000";
        return "too many namespaces: raise the user.max_*_namespaces sysctls";
    }
    if (err == EPERM || err == EACCES) {
        if (read_trimmed("/proc/sys/kernel/unprivileged_userns_clone") == "0" && !invoker_is_root)
            return "unprivileged user namespaces are disabled: "
                   "sysctl -w kernel.unprivileged_userns_clone=1";
        if (read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1")
            return "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): install "
                   "pyjail's AppArmor profile, or sysctl -w "
                   "kernel.apparmor_restrict_unprivileged_userns=0";
        return "user namespaces are not allowed here; inside a container, the outer runtime "
               "must allow them (e.g. a seccomp profile that permits clone/unshare)";
    }
    if (err == EINVAL)
        return "this kernel lacks a namespace pyjail needs (user, mount, pid, net, ipc, uts, "
               "cgroup)";
    return {};
}

std::string uid_with_name(unsigned uid, const std::string& unnamed) {
    std::string passwd;
    (void)try_read_file("/etc/passwd", passwd);
    std::string name = passwd_name(passwd, uid);
    if (name.empty()) name = unnamed;
    return name.empty() ? fmt::format("uid {}", uid) : fmt::format("uid {} ({})", uid, name);
}

std::string child_step_hint(ChildStep step, int err, const std::string& host_user) {
    const std::string who = host_user.empty() ? "the jail's host user" : host_user + ", the jail's host user,";
    if (step == ChildStep::MountProc && (err == EPERM || err == EACCES))
        return "the host's /proc is partly covered (as in many containers); run pyjail where "
               "/proc is fully visible, e.g. a privileged or --security-opt "
               "systempaths=unconfined container";
    if (step == ChildStep::RootfsBind && err == EACCES)
        return fmt::format("{} cannot reach the rootfs: install it (cmake --install build), or make every "
                           "directory on its path searchable by that user (chmod o+x)",
                           who);
    if (step == ChildStep::Seccomp && (err == EINVAL || err == ENOSYS))
        return "this kernel lacks seccomp filters with user notification (Linux 5.0+, "
               "CONFIG_SECCOMP_FILTER); pyjail will not run without its filter unless you pass "
               "--seccomp off";
    if (step == ChildStep::Bind && err == EACCES)
        return fmt::format("{} cannot reach it: make it readable by that user, and every directory above "
                           "it searchable (chmod o+x), or bind another; as root, --host-user USER chooses "
                           "who the jail is",
                           who);
    // The plan refuses the mount points it knows cannot be made (mountplan.cpp,
    // require_mount_point); this is what it could not know, e.g. a subdirectory on the way.
    if ((step == ChildStep::Mkdir || step == ChildStep::Mkfile) && (err == EACCES || err == EPERM || err == EROFS))
        return fmt::format("a bind inside another bind has its mount point made in that bind's host directory, "
                           "as {}: bind it elsewhere, e.g. /data, or create the mount point there beforehand",
                           host_user.empty() ? "the jail's host user" : host_user);
    if (step == ChildStep::CopyScript && err == ENOSPC)
        return "the script is copied into the jail's scratch space, which is smaller: raise --tmpfs-size";
    if (step == ChildStep::Keyring && (err == EDQUOT || err == ENOMEM))
        return "the jail's host user has used up its key quota (each live fresh jail holds one "
               "keyring; kernel.keys.maxkeys is 200 keys a user by default): end some jails, run "
               "many from one template (pyjail serve), or raise it: sysctl -w "
               "kernel.keys.maxkeys=2000 kernel.keys.maxbytes=200000";
    return {};
}

}  // namespace pyjail
