// Named rootfses: `--rootfs data` (and the profile key `rootfs = "data"`) names a rootfs built
// with `pyjail rootfs build --name data`; `--rootfs ./data` or any value with a '/' is a path.
// A name is looked up in the user's own directory first, then in the installed one; "default"
// is the rootfs installed with pyjail. Pure: which directories, in which order, and whether a
// value is a name; paths.cpp does the lookup and the trust check.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

// A value without '/' is a name (a directory in the current directory is "./NAME").
bool is_rootfs_name(std::string_view value);

// "" when `name` is a valid rootfs name, else why not. Names are what the builder accepts:
// a letter or digit, then letters, digits, '.', '_', '-'; at most 64 characters. Nothing that
// could leave the directory it is looked up in ("..", "").
std::string rootfs_name_problem(std::string_view name);

// Whether `name` is one the builder gives what it leaves beside a rootfs NAME while it builds,
// or keeps for jails: NAME.pyjail-tmp-, .pyjail-pip-, .pyjail-old- and 8 of [A-Za-z0-9_]
// (perhaps then ".old"), or the names earlier versions gave them (NAME.tmp-XXXXXXXX, ...).
// Never a rootfs of its own: left out of the names listed (rootfs_rebuild.py's
// is_sibling_name, which the builder uses, says the same).
bool is_builder_sibling_name(std::string_view name);

// The user's own directory of named rootfses: $XDG_DATA_HOME/pyjail/rootfs when that is an
// absolute path, else $HOME/.local/share/pyjail/rootfs; "" without either (null: unset).
std::string user_rootfs_dir(const char* xdg_data_home, const char* home);

struct RootfsDir {
    std::string where;  // "user" or "installed"
    std::string path;
};

// Where a name is looked up, in order: the user's directory, then the installed one. An
// empty path is left out.
std::vector<RootfsDir> rootfs_search_dirs(const std::string& user_dir,
                                          const std::string& installed_dir);

// Where `pyjail rootfs build --name` puts a rootfs: root builds into the installed
// directory, everybody else into their own.
std::string rootfs_build_dir(unsigned euid, const std::string& user_dir,
                             const std::string& installed_dir);

}  // namespace pyjail
