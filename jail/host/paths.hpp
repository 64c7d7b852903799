// Where pyjail's own data lives: the profiles and the default rootfs. The installed binary
// finds them relative to itself (so a relocated or DESTDIR-staged install works without any
// environment); the binary its build left in the build tree (that very file, not a copy)
// finds the in-tree ones. Data that others than root and the invoking user could change is
// refused: it chooses what the jail may do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiled_filter.hpp"
#include "profile.hpp"

namespace pyjail {

struct DataDirs {
    std::string profiles;  // directory of NAME.toml files
    std::string rootfs;    // the default rootfs
    std::string compiled_filters;  // seccomp sets compiled at build time (compiled_filter.hpp)
    std::string rootfs_installed;  // named rootfses installed by root (rootfs_name.hpp)
    std::string rootfs_user;       // the invoking user's own named rootfses ("" without HOME)
    std::string builder;           // the rootfs builder script (`pyjail rootfs`)
    // The template's extension module and boot (`pyjail serve`), bound into a template;
    // checked where it is used.
    std::string template_dir;
};

// Throws JailError (step "data") when there is no data for this binary, or others could
// change it (hostopen.hpp, trusted_data_path).
DataDirs find_data_dirs();

// The rootfs a --rootfs value names: a path as it is; "default", the installed one; another
// name, the first directory of that name in the user's then the installed directory of named
// rootfses (rootfs_name.hpp), after checking that only root and the invoking user can change
// it. Throws JailError (step "rootfs") for an unknown or invalid name.
std::string resolve_rootfs(const std::string& value, const DataDirs& dirs);

// The names of the installed and the user's rootfses (for messages).
std::vector<std::string> list_named_rootfs(const DataDirs& dirs);

// A file of pyjail's own data (e.g. profiles/seccomp/groups.toml), read after checking that
// only root and the invoking user can change it. Throws JailError naming `step`.
std::string read_data_file(const std::string& path, const std::string& step);

// The filter the build compiled from exactly these inputs, if `dirs` holds one (see
// compiled_filter.hpp); `path` is set to the file it looked for.
std::optional<CompiledFilter> load_compiled_filter(const DataDirs& dirs, const FilterInputs& in,
                                                   std::string& path);

// A file found by name or path, and what it holds.
struct FoundFile {
    std::string path;
    std::string text;
    std::string identity;  // read_profile: "device:inode", what tells two names of one file apart
};

// A profile name ("strict") or a path to a profile file ("./mine.toml"), read. Throws
// UsageError for an unknown name, JailError for a file that cannot be read.
FoundFile read_profile(const std::string& name_or_path, const DataDirs& dirs);

std::vector<std::string> list_profiles(const DataDirs& dirs);

// read_profile for profile_chain (profile.hpp): a relative base file is found beside the
// profile whose `extends` names it. `dirs` must outlive the loader.
ProfileLoader profile_loader(const DataDirs& dirs);

// A seccomp set name ("python") or file path, read. Throws UsageError.
FoundFile read_seccomp_set(const std::string& name_or_path, const DataDirs& dirs);

}  // namespace pyjail
