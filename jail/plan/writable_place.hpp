// Whether a file pyjail writes once a run is over (the report, the audit log) is one the jail
// could have changed: one inside a host directory the jail can write (--workdir, a writable
// --bind), or reached through such a directory. A jailed program could then erase or forge
// the record of its own run and of the runs before it. Pure: the host facts are gathered by
// hostopen.cpp (setup::writable_places, setup::refuse_jail_writable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pyjail {

// A file's identity on the host: what stat() gives as st_dev and st_ino.
struct FileId {
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    friend bool operator==(const FileId&, const FileId&) = default;
};

// The root of a mount: the device, and the path of the mount's root within its filesystem
// ("/" for a whole filesystem, "/home/u/work" for a bind of that directory).
struct MountRoot {
    std::uint64_t dev = 0;
    std::string fs_path;
};

// A host place the jail can write: a writable bind's source (the work directory included),
// as pyjail opened it.
struct WritablePlace {
    FileId id;
    bool is_dir = true;
    std::string fs_path;  // its path within its filesystem; "" when unknown
    std::string source;   // as given, for messages
    std::string origin;   // "--workdir", "--bind", a profile's line
};

// One directory in which resolving the output's path looked a name up: whoever can write it
// chooses what that name leads to.
struct LookupDir {
    std::string path;              // as pyjail resolved it, for messages
    std::vector<FileId> ancestors;  // the directory, its parent, ... up to / (across mounts)
    std::vector<MountRoot> mounts;  // the root of each mount crossed on the way up
};

// What resolving an output file's path met.
struct OutputPath {
    std::vector<LookupDir> lookups;  // the file's own directory last
    std::optional<FileId> file;      // the file, when it exists
    std::uint64_t links = 1;         // its hard links
};

// Whether `inner` is `outer` or below it (paths within one filesystem).
bool fs_path_within(const std::string& inner, const std::string& outer);

// Why the jail could change the output at `out` ("its directory /a lies inside --workdir
// /a"), or "" when no place in `places` reaches it. `replaced`: the file is replaced whole by
// a new one (the report), so the old file's identity does not matter; else it is appended to
// (the audit log), and a second hard link, which could lie anywhere the jail writes, is
// refused too.
std::string jail_writable_reason(const OutputPath& out, const std::vector<WritablePlace>& places,
                                 bool replaced);

}  // namespace pyjail
