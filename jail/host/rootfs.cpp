#include "rootfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "command.hpp"
#include "error.hpp"

namespace pyjail::setup {

namespace {

// openat2 with RESOLVE_IN_ROOT: "/" and ".." stop at the rootfs, symlinks resolve inside it.
int open_in_rootfs(int rootfs_fd, const std::string& jail_path, std::uint64_t flags) {
    open_how how{};
    how.flags = flags | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    return static_cast<int>(::syscall(SYS_openat2, rootfs_fd, jail_path.c_str(), &how, sizeof how));
}

}  // namespace

UniqueFd open_rootfs(const std::string& path) {
    std::string hint = "build it with `cmake --build build` (the default rootfs) or "
                       "`pyjail rootfs build --out DIR` (or --name NAME), or pass --rootfs DIR";
    UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd && (errno == EACCES || errno == EPERM))  // there, but not for us: building it again won't help
        throw JailError("rootfs", fmt::format("cannot open rootfs {}", path), errno,
                        "you cannot reach it: install it (cmake --install build), or make every directory "
                        "on its path searchable by you (chmod o+x)");
    if (!fd) throw JailError("rootfs", fmt::format("cannot open rootfs {}", path), errno, hint);
    bool is_dir = false;
    if (!exists_in_rootfs(fd.get(), "/usr/bin", is_dir) || !is_dir)
        throw JailError("rootfs", fmt::format("{} is not a root filesystem (it has no /usr/bin)", path),
                        0, hint);
    return fd;
}

std::vector<RootfsEntry> list_rootfs_top(int rootfs_fd) {
    std::vector<RootfsEntry> out;
    int dfd = ::openat(rootfs_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) throw JailError("rootfs", "cannot list the rootfs", errno);
    DIR* d = ::fdopendir(dfd);
    if (d == nullptr) {
        int e = errno;
        ::close(dfd);
        throw JailError("rootfs", "cannot list the rootfs", e);
    }
    while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        // The entry's type comes with it on most file systems: no stat per entry then.
        unsigned type = e->d_type;
        if (type == DT_UNKNOWN) {
            struct stat st {};
            if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISLNK(st.st_mode) ? DT_LNK : DT_REG;
        }
        RootfsEntry entry;
        entry.name = name;
        if (type == DT_DIR) entry.kind = RootfsEntry::Kind::Dir;
        else if (type == DT_LNK) {
            entry.kind = RootfsEntry::Kind::Symlink;
            char buf[PATH_MAX];
            ssize_t n = ::readlinkat(dfd, name.c_str(), buf, sizeof buf - 1);
            if (n < 0) continue;
            entry.link_target.assign(buf, static_cast<std::size_t>(n));
        }
        out.push_back(std::move(entry));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(),
              [](const RootfsEntry& a, const RootfsEntry& b) { return a.name < b.name; });
    return out;
}

bool exists_in_rootfs(int rootfs_fd, const std::string& jail_path, bool& is_dir) {
    int fd = open_in_rootfs(rootfs_fd, jail_path, O_PATH);
    if (fd < 0) return false;
    struct stat st {};
    bool ok = ::fstat(fd, &st) == 0;
    ::close(fd);
    is_dir = ok && S_ISDIR(st.st_mode);
    return ok;
}

FileKind probe_in_rootfs(int rootfs_fd, const std::string& jail_path) {
    int fd = open_in_rootfs(rootfs_fd, jail_path, O_PATH);
    if (fd < 0) return FileKind::Missing;
    struct stat st {};
    bool exists = ::fstat(fd, &st) == 0;
    ::close(fd);
    if (!exists) return FileKind::Missing;
    return S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0 ? FileKind::Executable
                                                            : FileKind::NotExecutable;
}

std::vector<std::string> pythons_in_rootfs(int rootfs_fd) {
    std::vector<std::string> out;
    int fd = open_in_rootfs(rootfs_fd, "/usr/bin", O_RDONLY | O_DIRECTORY);
    if (fd < 0) return out;
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
        ::close(fd);
        return out;
    }
    while (dirent* e = ::readdir(d))
        if (is_python_name(e->d_name)) out.emplace_back(e->d_name);
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

unsigned long locked_flags_of(int fd) {
    struct statvfs sv {};
    if (::fstatvfs(fd, &sv) != 0) return 0;
    return locked_mount_flags(sv.f_flag);
}

}  // namespace pyjail::setup
