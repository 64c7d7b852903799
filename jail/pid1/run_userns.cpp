#include "run_userns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "exitstatus.hpp"
#include "steps.hpp"

namespace pyjail::pid1 {

namespace {

// No allocation: this runs in the template's memory (CLONE_VM).
void write_proc(const char* path, const char* text) noexcept {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(ChildStep::RunNamespaces, errno, kExitJailError, "cannot open %s", path);
    ssize_t n = ::write(fd, text, std::strlen(text));
    int e = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(std::strlen(text)))
        fail(ChildStep::RunNamespaces, e, kExitJailError, "cannot write %s", path);
}

}  // namespace

void enter_run_user_namespace(uid_t uid, gid_t gid) noexcept {
    if (::unshare(CLONE_NEWUSER) != 0)
        fail(ChildStep::RunNamespaces, errno, kExitJailError, "cannot create the run's user namespace");
    // Our /proc files are root's while we are not dumpable, and root is not mapped here: for
    // these writes only, while the run's pid namespace holds no other process that could look.
    if (::prctl(PR_SET_DUMPABLE, 1) != 0) fail(ChildStep::Dumpable, errno, kExitJailError, "prctl");
    char line[64];
    write_proc("/proc/self/setgroups", "deny");
    std::snprintf(line, sizeof line, "%u %u 1\n", uid, uid);
    write_proc("/proc/self/uid_map", line);
    std::snprintf(line, sizeof line, "%u %u 1\n", gid, gid);
    write_proc("/proc/self/gid_map", line);
    // The run's own user.max_user_namespaces cannot be set to 0 here (the run's /proc/sys is
    // read-only, and only a procfs of this user namespace's pid namespace could be written):
    // the run's filter refuses every CLONE_NEW* flag (seccomp groups.toml), so a program cannot
    // nest user namespaces into the template's allowance; under --seccomp off it could.
    if (::prctl(PR_SET_DUMPABLE, 0) != 0) fail(ChildStep::Dumpable, errno, kExitJailError, "prctl");
}

}  // namespace pyjail::pid1
