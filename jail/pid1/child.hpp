// The jail's pid 1 (namespace pid1): what runs between clone3 and the program's execve, and
// pid 2 (namespace program) from its clone to the execve. Everything they need is prepared
// by the parent beforehand (paths, argv, envp), so most steps only make syscalls -- but not
// all: the mount steps build paths in std::strings, for one. That is safe because pid 1 is a
// copy of a single-threaded parent: no other thread can have held the allocator's (or
// stdio's) lock at the clone, so no lock is left taken forever in the copy. The supervisor
// checks this in debug builds (spawn.cpp's clone_jail asserts one thread before clone3);
// pyjail must never start a thread before the jail is cloned.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "limits.hpp"
#include "lockdown.hpp"
#include "mountplan.hpp"

namespace pyjail {

struct ChildPlan {
    char** host_argv = nullptr;  // pyjail's own argv, wiped in the child (see child.cpp)
    int sync_fd = -1;          // the child's end of the sync socket
    int parent_end_fd = -1;    // the parent's end, closed first thing in the child
    uid_t jail_uid = 0;
    gid_t jail_gid = 0;
    // The id maps, when the child writes them itself (an unprivileged invoker, whose own ids
    // are all it maps); empty when the parent writes them (root maps another user).
    std::string own_uid_map, own_gid_map;
    std::string staging_dir;   // host directory the new root is assembled on
    MountPlan mounts;
    // What the content sources of `mounts` (the script, copied in) are read from: the fd the
    // parent opened with the jail's host user's rights, or -1 when there is none. Sources
    // bound by path the child opens itself.
    int script_fd = -1;
    Lockdown lockdown;         // the same value a run from a template gets (lockdown.hpp)
    // Per source slot of `mounts`: a detached, idmapped clone of the source the supervisor
    // made (hostid_lease.hpp), put in its place before the sources are opened; -1: none.
    std::vector<int> source_mount_fds;
    // The jail has host ids of its own (hostid.hpp) and the maps allow setgroups: the
    // invoking user's supplementary groups must not follow it.
    bool drop_groups = false;
    // Per fd 0-2: the jail's end of a pipe the supervisor relays (relay.hpp), or -1: the
    // host's own descriptor stays.
    int stdio_fds[3] = {-1, -1, -1};
    std::vector<UsernsLimit> userns_limits;   // the jail's user namespace's /proc/sys/user
    std::string exec_path;
    std::vector<char*> argv;   // null-terminated, pointing into the parent's strings
    std::vector<char*> envp;
};

namespace pid1 {

// Never returns: ends in the program's execve (pid 2) or _exit (pid 1, or on failure).
[[noreturn]] void run(const ChildPlan& plan) noexcept;

}  // namespace pid1

}  // namespace pyjail
