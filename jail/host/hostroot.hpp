// Whether the host's / is the initial ramfs ("rootfs"): a system that booted an initramfs and
// never switched to a real root file system (some minimal VMs, installers, embedded images).
// pivot_root(2) cannot move that root (EINVAL), and no jail can be made there; the error and
// `pyjail doctor` say so instead of a bare "Invalid argument". Pure: mountinfo text in.
#pragma once

#include <string_view>

namespace pyjail {

// `mountinfo`: /proc/self/mountinfo. The last mount on "/" is the one in use.
bool root_is_initramfs(std::string_view mountinfo);

constexpr const char* kInitramfsRootHint =
    "the host's / is the initramfs (rootfs), which pivot_root cannot leave: run pyjail on a "
    "system that switched to a real root file system (switch_root), as container runtimes "
    "require too";

}  // namespace pyjail
