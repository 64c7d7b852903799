// Facts about a rootfs, gathered by the parent before planning (the planner does no I/O).
#pragma once

#include <string>
#include <vector>

#include "command.hpp"
#include "mountplan.hpp"
#include "sys.hpp"

namespace pyjail::setup {

// Opens the rootfs directory (O_PATH). Throws JailError saying how to build one.
UniqueFd open_rootfs(const std::string& path);

std::vector<RootfsEntry> list_rootfs_top(int rootfs_fd);

// Whether `jail_path` (absolute) names an executable regular file inside the rootfs,
// resolving symlinks as the jail would (relative to the rootfs, never escaping it).
FileKind probe_in_rootfs(int rootfs_fd, const std::string& jail_path);

// Whether `jail_path` exists in the rootfs; sets is_dir.
bool exists_in_rootfs(int rootfs_fd, const std::string& jail_path, bool& is_dir);

// The interpreter names in the rootfs's /usr/bin ("python3", "python3.11", ...).
std::vector<std::string> pythons_in_rootfs(int rootfs_fd);

// MS_* flags of the mount `fd` lives on that a user namespace cannot clear.
unsigned long locked_flags_of(int fd);

}  // namespace pyjail::setup
