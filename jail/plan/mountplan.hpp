// The mount plan: which mounts, directories and files make the jail's root, in order. Pure:
// the facts about the host it depends on (the rootfs's top-level entries, each bind source's
// kind and mount flags) are gathered by the parent beforehand, and the child only executes the
// ops, so the plan can be printed by --explain and tested without privileges.
//
// The jail's root is the rootfs itself, bound read-only, when it has every mount point the
// jail needs (the default rootfs has /proc, /dev, /tmp and /work). Otherwise -- a rootfs
// without them, or a bind to a path the rootfs lacks -- the root is a fresh tmpfs that holds
// only mount points and symlinks, and the rootfs's top-level directories are bound into it.
// Either way the jail's own mounts (/proc, /dev, /tmp, /work) and the user's binds are added,
// then the child pivots into the root and makes it read-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy.hpp"

namespace pyjail {

struct RootfsEntry {
    enum class Kind { Dir, Symlink, Other };
    std::string name;
    Kind kind = Kind::Other;
    std::string link_target;
};

struct BindFacts {
    bool is_dir = true;
    std::string real_source;           // realpath of the source
    unsigned long locked_flags = 0;    // MS_* flags of the source's mount that we must keep
    bool target_in_rootfs = false;     // the target exists in the rootfs (a ready mount point)
    std::vector<std::string> credentials;  // kCredentialNames found directly in the source
    // Inside another bind (enclosing_bind): the target exists in that bind's source, as a file
    // or directory like this source (a ready mount point).
    bool target_in_enclosing = false;
    // Else the first part of the target's path, below that bind's target, that is missing
    // there ("a" for /work/a/b/in when /work/a is missing): where pid 1 starts making it.
    std::string missing_in_enclosing;
    bool writable_by_host_user = true; // a writable bind: its source is the jail's host user's to write
    dev_t dev = 0;                     // the source, as planned: what a directory reached by its
    ino_t ino = 0;                     // name later must still be
};

struct MountFacts {
    std::vector<RootfsEntry> rootfs_top;
    unsigned long rootfs_locked_flags = 0;
    std::vector<BindFacts> binds;      // parallel to all_binds(policy)
    std::optional<std::string> script_real_path;  // realpath of the script, if any
    std::vector<std::string> home_dirs;  // realpaths of $HOME and the invoker's passwd home
    // --net allow: which of kEgressEtcFiles the rootfs has as regular files (mount points).
    std::vector<std::string> rootfs_etc_files;
};

// --net allow: the files of the rootfs's /etc that pyjail covers with its own, so the jail's
// resolver asks the supervisor (egress_plan.hpp) and nothing in the rootfs overrides it.
extern const char* const kEgressEtcFiles[];

enum class OpKind {
    Tmpfs,    // mount a tmpfs at target (target "" is the new root itself)
    Proc,     // mount the jail's own procfs at target
    Devpts,   // mount a new devpts instance at target
    Bind,     // bind source at target (source: below a slot's fd, or a host path when slot < 0;
              // target "" is the new root itself)
    Remount,  // change the flags of the bind mount at target
    Mkdir,    // create a directory (with parents) as a mount point
    MkFile,   // create an empty file as a mount point
    Symlink,  // create a symbolic link at target pointing to source_path
    Copy,     // copy the content of a slot's fd into a new file at target (mode)
    Write,    // create a new file at target (mode) holding `data`
};

struct MountOp {
    OpKind kind;
    std::string target{};      // relative to the new root, no leading '/'
    int source_slot = -1;      // index into MountPlan::sources
    std::string source_path{}; // Bind: path below the slot ("usr"), or absolute host path
    unsigned long flags = 0;   // MS_* flags for Tmpfs, Proc, Bind, Remount
    std::string data{};        // mount options for Tmpfs; the content for Write
    unsigned mode = 0;         // Mkdir, MkFile, Copy
    bool if_exists = false;    // Bind, Tmpfs, Remount: skipped when the target does not exist
                               // (the masks over /proc entries some kernels lack)
};

struct SourceRef {
    std::string host_path;
    bool content = false;  // opened for reading (copied in) rather than as a path (bound)
};

// What pid 1 makes on the host: the mount point of a bind inside a writable bind, where that
// bind's host directory lacks it. pyjail's, not the program's: removed when the run is over
// (setup::remove_host_mount_points), so no empty file or directory is left in the user's.
struct HostMountPoint {
    std::string host_dir;           // the enclosing bind's source
    std::vector<std::string> made;  // below it, deepest first: the mount point, then each
                                    // directory made on the way to it
    dev_t dev = 0;                  // host_dir when planned (BindFacts::dev, ino): the program
    ino_t ino = 0;                  // may have put a link or another directory in its place
};

struct MountPlan {
    std::vector<SourceRef> sources;  // the parent opens these; slot 0 is the rootfs
    std::vector<MountOp> ops;
    unsigned long root_flags = 0;    // MS_* flags of the final read-only remount of the root
    std::string cwd = "/work";
    std::optional<std::string> script_jail_path;
    std::vector<HostMountPoint> host_mount_points;  // in the order pid 1 makes them
};

// Every bind of the run: the policy's binds plus --workdir (a writable bind at /work).
std::vector<BindSpec> all_binds(const Policy& policy);

// The innermost other bind whose target holds binds[i]'s, if any: binds[i]'s mount point is
// in that bind's source, on the host, and made there when it is missing.
std::optional<std::size_t> enclosing_bind(const std::vector<BindSpec>& binds, std::size_t i);

// MS_* flags a user namespace may not clear on a bind of a mount with these statvfs flags.
unsigned long locked_mount_flags(unsigned long statvfs_flags);

// Throws UsageError for binds that cannot be placed.
MountPlan plan_mounts(const Policy& policy, const std::string& rootfs, const MountFacts& facts,
                      const std::optional<std::string>& script_host_path);

// The inode cap of a writable tmpfs of `size` bytes: each inode costs about 1 KiB of kernel
// memory that the size does not count, so inodes are capped at one per 8 KiB of size
// (at least 1024): the kernel memory of a full tmpfs stays within an eighth of its size.
std::uint64_t tmpfs_inodes_for(std::uint64_t size);

// /proc entries no program needs and the jail hides: files under /dev/null, directories
// under one empty directory bound read-only; and those it leaves readable but makes read-only.
extern const char* const kProcMaskedFiles[];
extern const char* const kProcMaskedDirs[];
extern const char* const kProcReadOnly[];

// One line per op, as --explain prints it.
std::string describe_op(const MountOp& op, const MountPlan& plan);

// Whether source `slot` is bound anywhere without the read-only remount that follows a bind.
bool bound_writable(const MountPlan& plan, int slot);

}  // namespace pyjail
