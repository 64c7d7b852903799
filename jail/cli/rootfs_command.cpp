#include "rootfs_command.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>

#include "error.hpp"
#include "hostopen.hpp"
#include "paths.hpp"
#include "rootfs_name.hpp"

namespace pyjail {

namespace {

constexpr const char* kUsage =
    "Usage: pyjail rootfs build (--out DIR | --name NAME) [--requirements FILE] [--pip SPEC...]\n"
    "                           [--find-links DIR] [--no-index] [--index-url URL]\n"
    "                           [--wheel-cache DIR] [--download-limit SIZE]\n"
    "                           [--install-limit SIZE] [--from-venv DIR] [--python PATH]\n"
    "                           [--with PKG] [--allow-build] [--shell-tools]\n"
    "                           [--ca-certificates FILE | --no-ca-certificates] [--quiet]\n"
    "       pyjail rootfs rebuild [--if-stale] [--quiet] (ROOTFS... | --all)\n"
    "       pyjail rootfs info ROOTFS [--json]\n"
    "       pyjail rootfs list\n"
    "Builds, rebuilds, shows and lists the root filesystems jails run in. ROOTFS is a name (see\n"
    "`pyjail rootfs list`; 'default' is the one installed with pyjail) or a directory.\n"
    "`pyjail rootfs build --help` lists the build options; man pyjail-rootfs explains them.\n";

// The host's python3 runs the builder: the Debian/Ubuntu one when present (what the default
// rootfs is built from), else the first on PATH.
const char* host_python() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

// The default rootfs and the directories of named ones, for `list` and `rebuild --all`.
std::vector<std::string> rootfs_dirs_args(const DataDirs& dirs) {
    std::vector<std::string> out = {"--default", dirs.rootfs};
    for (const auto& d : rootfs_search_dirs(dirs.rootfs_user, dirs.rootfs_installed))
        out.push_back("--dir=" + d.where + "=" + d.path);
    return out;
}

[[noreturn]] void exec_builder(const DataDirs& dirs, const std::vector<std::string>& args) {
    std::vector<std::string> argv = rootfs_builder_argv(dirs, args);
    const std::string& python = argv[0];
    const std::string& builder = argv[3];
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::fflush(stdout);
    ::execvp(cargv[0], cargv.data());
    throw JailError("rootfs", fmt::format("cannot run {} {}", python, builder), errno,
                    "install python3 (3.9 or newer)");
}

// The builder runs matplotlib's first import (for its font cache) in a jail of this binary.
std::string own_binary() {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw JailError("rootfs", "cannot find pyjail's own path", errno);
    return std::string(self, static_cast<std::size_t>(n));
}

}  // namespace

std::vector<std::string> rootfs_builder_argv(const DataDirs& dirs,
                                             const std::vector<std::string>& args) {
    if (dirs.builder.empty() || ::access(dirs.builder.c_str(), R_OK) != 0)
        throw JailError("rootfs", fmt::format("no rootfs builder at {}", dirs.builder), errno,
                        "reinstall pyjail (cmake --install installs it)");
    // The builder runs with the invoking user's rights (root's, for root): only root and that
    // user may be able to change it, as for pyjail's other data.
    std::string builder = trusted_data_path(dirs.builder);
    // -I: no PYTHON* variables, no user site; -B: no __pycache__ next to the installed builder.
    std::vector<std::string> argv = {host_python(), "-I", "-B", builder, "--as-pyjail"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
}

int run_rootfs_command(const std::vector<std::string>& args) {
    std::string sub = args.size() > 1 ? args[1] : "";
    if (sub == "-h" || sub == "--help") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    // No command: a mistake (a script's missing word), not a request for help.
    if (sub.empty())
        throw UsageError("rootfs: no command given", "pyjail rootfs build|rebuild|info|list (pyjail rootfs --help)");
    DataDirs dirs = find_data_dirs();
    std::vector<std::string> rest(args.begin() + 2, args.end());
    if (sub == "build") {
        std::string dir = rootfs_build_dir(::geteuid(), dirs.rootfs_user, dirs.rootfs_installed);
        rest.insert(rest.begin(), {"build", "--named-dir", dir, "--pyjail-binary", own_binary()});
        exec_builder(dirs, rest);
    }
    if (sub == "info") {
        // The first argument that is not an option is the rootfs, named as --rootfs names one.
        bool found = false;
        for (auto& a : rest)
            if (!a.empty() && a[0] != '-') {
                a = resolve_rootfs(a, dirs);
                found = true;
                break;
            }
        if (!found) throw UsageError("rootfs info: no rootfs given", "pyjail rootfs info NAME|DIR");
        rest.insert(rest.begin(), "info");
        exec_builder(dirs, rest);
    }
    if (sub == "rebuild") {
        // Every argument that is not an option is a rootfs, named as --rootfs names one (and
        // checked the same way: only root and the invoking user may be able to change it).
        for (auto& a : rest)
            if (!a.empty() && a[0] != '-') a = resolve_rootfs(a, dirs);
        std::vector<std::string> rebuild = {"rebuild", "--pyjail-binary", own_binary()};
        for (auto& a : rootfs_dirs_args(dirs)) rebuild.push_back(a);
        rebuild.insert(rebuild.end(), rest.begin(), rest.end());
        exec_builder(dirs, rebuild);
    }
    if (sub == "list") {
        if (!rest.empty() && rest[0] != "-h" && rest[0] != "--help")
            throw UsageError(fmt::format("rootfs list: unknown argument '{}'", rest[0]),
                             "usage: pyjail rootfs list");
        std::vector<std::string> list = {"list"};
        for (auto& a : rootfs_dirs_args(dirs)) list.push_back(a);
        list.insert(list.end(), rest.begin(), rest.end());
        exec_builder(dirs, list);
    }
    throw UsageError(fmt::format("rootfs: unknown command '{}'", sub),
                     "pyjail rootfs build|rebuild|info|list (pyjail rootfs --help)");
}

}  // namespace pyjail
