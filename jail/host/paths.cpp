#include "paths.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "edit_distance.hpp"
#include "error.hpp"
#include "hostopen.hpp"
#include "rootfs_name.hpp"
#include "sys.hpp"

namespace pyjail {

namespace {

std::string self_exe() {
    char buf[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Whether this process runs the binary its build left in PYJAIL_BUILD_DIR (the same file, not
// a copy): only that binary may take its data from the build and source trees. A copy
// elsewhere would otherwise read them from wherever that path leads on this host -- a path
// any user may be able to create.
bool is_the_build_binary() {
    struct stat self {}, built {};
    return ::stat("/proc/self/exe", &self) == 0 &&
           ::stat(PYJAIL_BUILD_DIR "/pyjail", &built) == 0 && self.st_dev == built.st_dev &&
           self.st_ino == built.st_ino;
}

}  // namespace

DataDirs find_data_dirs() {
    std::string exe = self_exe();
    std::string dir = exe.substr(0, exe.rfind('/'));
    DataDirs d;
    std::string installed_profiles = dir + "/" + PYJAIL_REL_PROFILES;
    if (is_the_build_binary()) {
        d.profiles = std::string(PYJAIL_SOURCE_DIR) + "/profiles";
        d.rootfs = std::string(PYJAIL_BUILD_DIR) + "/rootfs";
        d.compiled_filters = std::string(PYJAIL_BUILD_DIR) + "/seccomp-filters";
        d.rootfs_installed = std::string(PYJAIL_BUILD_DIR) + "/rootfs.d";
        d.builder = std::string(PYJAIL_SOURCE_DIR) + "/rootfs/build-rootfs.py";
        d.template_dir = std::string(PYJAIL_BUILD_DIR) + "/template";
    } else if (is_dir(installed_profiles)) {
        d.profiles = installed_profiles;
        d.rootfs = dir + "/" + PYJAIL_REL_ROOTFS;
        d.rootfs_installed = dir + "/" + PYJAIL_REL_LIBDIR + "/rootfs.d";
        d.builder = dir + "/" + PYJAIL_REL_LIBDIR + "/build-rootfs.py";
        d.template_dir = dir + "/" + PYJAIL_REL_LIBDIR + "/template";
    } else {
        throw JailError("data",
                        fmt::format("{} finds no profiles next to it ({}), and it is not the binary "
                                    "its build left in {}",
                                    exe, installed_profiles, PYJAIL_BUILD_DIR),
                        0, "run an installed pyjail (cmake --install), or the build's own binary");
    }
    // Only root and the invoking user may choose the profiles, the filter and the rootfs. The
    // four lie under one tree: each walk goes on from the directories the ones before checked.
    TrustedWalks walks;
    d.profiles = trusted_data_path(d.profiles, walks);
    (void)trusted_data_path(d.profiles + "/seccomp", walks);  // the syscall sets (and their groups)
    d.rootfs = trusted_data_path(d.rootfs, walks);
    if (d.compiled_filters.empty()) d.compiled_filters = d.profiles + "/seccomp/compiled";
    d.compiled_filters = trusted_data_path(d.compiled_filters, walks);
    // Both checked where a name is looked up (resolve_rootfs), not on every run: a home
    // others can write must not stop runs that do not use it.
    d.rootfs_user = user_rootfs_dir(std::getenv("XDG_DATA_HOME"), std::getenv("HOME"));
    return d;
}

std::vector<std::string> list_named_rootfs(const DataDirs& dirs) {
    std::vector<std::string> names;
    for (const auto& d : rootfs_search_dirs(dirs.rootfs_user, dirs.rootfs_installed)) {
        std::vector<std::string> here;
        list_dir(d.path, "", here);
        for (auto& n : here)
            if (rootfs_name_problem(n).empty() && !is_builder_sibling_name(n) &&
                is_dir(d.path + "/" + n))
                names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string resolve_rootfs(const std::string& value, const DataDirs& dirs) {
    if (!is_rootfs_name(value)) return value;  // a path: the user's own choice, as given
    if (value == "default") return dirs.rootfs;
    if (std::string why = rootfs_name_problem(value); !why.empty())
        throw JailError("rootfs", fmt::format("'{}' is not a rootfs name: {}", value, why), 0,
                        "give a name (pyjail rootfs list) or a path, e.g. ./" + value);
    auto search = rootfs_search_dirs(dirs.rootfs_user, dirs.rootfs_installed);
    std::vector<std::string> looked;
    for (const auto& d : search) {
        std::string candidate = d.path + "/" + value;
        looked.push_back(candidate);
        struct stat st {};
        if (::stat(candidate.c_str(), &st) != 0) continue;
        // Another user who could change a named rootfs would choose the jail's programs and
        // libraries (and, for root, what root's jails run): refused as pyjail's data is.
        return trusted_data_path(candidate);
    }
    auto names = list_named_rootfs(dirs);
    // The README's data rootfs (numpy, pandas, ...) has a recipe of its own: say it whole.
    std::string build = value == "data"
                            ? "build it (numpy, pandas, matplotlib, ...; about 110 MB from PyPI): "
                              "cmake --build build --target rootfs-data in pyjail's source, or pyjail "
                              "rootfs build --name data --shell-tools -r rootfs/data-requirements.txt"
                            : fmt::format("build it: pyjail rootfs build --name {} [--requirements FILE]", value);
    throw JailError("rootfs",
                    fmt::format("no rootfs named '{}' (looked for {})", value,
                                fmt::join(looked, " and ")),
                    0,
                    fmt::format("{}{}",
                                names.empty() ? std::string()
                                              : fmt::format("installed: {}; ", fmt::join(names, ", ")),
                                build));
}

std::string read_data_file(const std::string& path, const std::string& step) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) throw JailError(step, fmt::format("cannot read {}", path), errno);
    require_trusted_data_file(fd.get(), path);
    return read_fd(fd.get(), path, step);
}

std::optional<CompiledFilter> load_compiled_filter(const DataDirs& dirs, const FilterInputs& in,
                                                   std::string& path) {
    path = dirs.compiled_filters + "/" + compiled_filter_file_name(in);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) return std::nullopt;
    require_trusted_data_file(fd.get(), path);  // the filter is the jail's last wall
    std::string bytes;
    if (!try_read_fd(fd.get(), bytes)) return std::nullopt;
    return decode_compiled_filter(bytes, in);
}

std::vector<std::string> list_profiles(const DataDirs& dirs) {
    std::vector<std::string> names;
    list_dir(dirs.profiles, ".toml", names);  // none when the directory cannot be read
    for (auto& n : names) n.resize(n.size() - 5);
    return names;
}

namespace {

// "strict" names a shipped file; "./mine.toml" or "x.toml" is a path.
bool names_a_file(const std::string& name_or_path) {
    return name_or_path.find('/') != std::string::npos ||
           (name_or_path.size() > 5 &&
            name_or_path.compare(name_or_path.size() - 5, 5, ".toml") == 0);
}

}  // namespace

// Each file is opened where it is found and read from that descriptor: one open, and nothing
// can change between the check and the read. What a file that cannot be opened means depends
// on how it was named; one that opens but cannot be read (a directory) is read_fd's error.
FoundFile read_seccomp_set(const std::string& name_or_path, const DataDirs& dirs) {
    FoundFile f;
    f.path = names_a_file(name_or_path) ? name_or_path : dirs.profiles + "/seccomp/" + name_or_path + ".toml";
    UniqueFd fd;
    if (name_or_path != "groups") fd.reset(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw UsageError(fmt::format("--seccomp: no syscall set '{}' ({})", name_or_path, f.path),
                         "use python, a set file, or off");
    if (!names_a_file(name_or_path)) require_trusted_data_file(fd.get(), f.path);
    f.text = read_fd(fd.get(), f.path, "seccomp");
    return f;
}

FoundFile read_profile(const std::string& name_or_path, const DataDirs& dirs) {
    FoundFile f;
    const bool by_path = names_a_file(name_or_path);
    f.path = by_path ? name_or_path : dirs.profiles + "/" + name_or_path + ".toml";
    UniqueFd fd(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd && by_path)
        throw JailError("profile", fmt::format("cannot read profile file {}", name_or_path), errno);
    if (!fd) {
        auto names = list_profiles(dirs);
        std::string like = closest_word(name_or_path, names);
        throw UsageError(fmt::format("--profile: no profile named '{}'", name_or_path),
                         names.empty()
                             ? fmt::format("no profiles found in {}", dirs.profiles)
                             : fmt::format("{}available: {}; or give a path to a profile file",
                                           like.empty() ? "" : fmt::format("did you mean '{}'? ", like),
                                           fmt::join(names, ", ")));
    }
    if (!by_path) require_trusted_data_file(fd.get(), f.path);
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0) f.identity = fmt::format("{}:{}", st.st_dev, st.st_ino);
    f.text = read_fd(fd.get(), f.path, "profile");
    return f;
}

ProfileLoader profile_loader(const DataDirs& dirs) {
    return [&dirs](const std::string& name_or_path, const std::string& from) {
        std::string path = name_or_path;
        // A base file is found beside the profile that names it, wherever pyjail runs.
        if (names_a_file(path) && path[0] != '/' && !from.empty() && from.find('/') != std::string::npos)
            path = from.substr(0, from.rfind('/') + 1) + path;
        try {
            FoundFile f = read_profile(path, dirs);
            return LoadedProfile{f.path, f.text, f.identity.empty() ? f.path : f.identity};
        } catch (const UsageError& e) {
            if (from.empty()) throw;
            // Named by an `extends`, not by --profile: profile_chain says where.
            std::string m = e.message();
            if (m.rfind("--profile: ", 0) == 0) m.erase(0, 11);
            throw UsageError(m, e.hint());
        }
    };
}

}  // namespace pyjail
