// The client's side of a run's host binds (template_binds.hpp): the sources opened as detached
// mount trees by a helper process, so that neither a changed identity nor a namespace of its
// own ever touches the client itself.
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "error.hpp"
#include "exposure.hpp"
#include "template_binds.hpp"

namespace pyjail::setup {

namespace {

constexpr const char* kStep = "bind";

std::string opened_path(int fd) {
    char buf[PATH_MAX];
    ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

int set_effective(bool raise) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct sets[_LINUX_CAPABILITY_U32S_3]{};
    if (::syscall(SYS_capget, &header, sets) != 0) return errno;
    for (auto& s : sets) s.effective = raise ? s.permitted : 0;
    return ::syscall(SYS_capset, &header, sets) == 0 ? 0 : errno;
}

// The helper, as the user whose rights the sources are opened with, with CAP_SYS_ADMIN over
// a mount namespace holding them (root's own; a user's new one). Returns "" with the trees in
// `trees`, or why not.
std::string helper_open(const RunRequest& r, const Policy& policy, uid_t files_uid, gid_t files_gid,
                        std::vector<int>& trees) {
    const bool root = ::geteuid() == 0;
    if (root) {
        // Root's groups would follow the lookups: the host user's rights alone.
        if (::setgroups(0, nullptr) != 0) return fmt::format("setgroups: {}", std::strerror(errno));
    } else {
        // A user clones a mount only in a mount namespace its own user namespace owns: the
        // copy of the host's this makes. Its ids are the user's own, mapped to themselves.
        const uid_t uid = ::getuid();
        const gid_t gid = ::getgid();
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
            return fmt::format("cannot create a user namespace to open the binds in: {}", std::strerror(errno));
        const char* failed = "";
        if (int e = write_id_maps("/proc/self/", fmt::format("{} {} 1\n", uid, uid), fmt::format("{} {} 1\n", gid, gid),
                                  failed);
            e != 0)
            return fmt::format("cannot write its {}: {}", failed, std::strerror(e));
    }
    const std::vector<std::string> homes = home_dirs();
    const std::vector<BindSpec> binds = all_binds(policy);
    for (std::size_t slot = kFirstHandedSlot; slot < r.mounts.sources.size(); ++slot) {
        const std::string& path = r.mounts.sources[slot].host_path;
        const BindSpec* bind = bind_of_source(binds, path);
        if (bind == nullptr) return fmt::format("{} is no bind of this run", path);
        // The lookup with the rights the jail would have: root's as the host user (fsuid),
        // a user's without the capabilities its new namespace gave it.
        int fd;
        if (root) {
            ::setfsgid(files_gid);
            ::setfsuid(files_uid);
            fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
            int e = errno;
            ::setfsuid(0);
            ::setfsgid(0);
            errno = e;
        } else {
            if (int e = set_effective(false); e != 0) return fmt::format("capset: {}", std::strerror(e));
            fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
            int e = errno;
            (void)set_effective(true);
            errno = e;
        }
        if (fd < 0)
            return fmt::format("{}: cannot open {} as uid {}: {}", bind->origin, path, root ? files_uid : ::getuid(),
                               std::strerror(errno));
        struct statfs fs {};
        if (::fstatfs(fd, &fs) != 0) return fmt::format("{}: statfs {}: {}", bind->origin, path, std::strerror(errno));
        std::vector<std::string> credentials;
        struct stat st {};
        if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (root) {
                ::setfsgid(files_gid);
                ::setfsuid(files_uid);
            }
            credentials = credentials_in(fd);
            if (root) {
                ::setfsuid(0);
                ::setfsgid(0);
            }
        }
        if (auto why = opened_source_refusal(policy, *bind, opened_path(fd), static_cast<std::int64_t>(fs.f_type),
                                             credentials, homes))
            return *why;
        int tree = static_cast<int>(
            ::syscall(SYS_open_tree, fd, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
        if (tree < 0)
            return fmt::format("{}: cannot clone the mount of {}: {}{}", bind->origin, path, std::strerror(errno),
                               errno == EINVAL ? " (other mounts below it are not yours to show)" : "");
        ::close(fd);
        trees.push_back(tree);
    }
    return {};
}

}  // namespace

std::vector<UniqueFd> open_handed_binds(const RunRequest& r, const Policy& policy, uid_t files_uid, gid_t files_gid) {
    std::vector<UniqueFd> out;
    if (r.binds == 0) return out;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        throw JailError(kStep, "socketpair", errno);
    UniqueFd ours(sv[0]), theirs(sv[1]);
    pid_t pid = ::fork();
    if (pid < 0) throw JailError(kStep, "cannot fork to open the binds", errno);
    if (pid == 0) {
        ours.reset();
        std::vector<int> trees;
        std::string why;
        try {
            why = helper_open(r, policy, files_uid, files_gid, trees);
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (!why.empty()) {
            why.resize(std::min<std::size_t>(why.size(), 1000));
            (void)::send(theirs.get(), why.data(), why.size(), MSG_NOSIGNAL);
            ::_exit(1);
        }
        char ok = 0;
        ::_exit(send_with_fds(theirs.get(), &ok, 1, trees.data(), static_cast<int>(trees.size())) == 0 ? 0 : 1);
    }
    theirs.reset();
    char buf[1024];
    int fds[kMaxPassedFds];
    int got = 0;
    ssize_t n;
    do n = recv_with_fds(ours.get(), buf, sizeof buf, fds, kMaxPassedFds, got, 0);
    while (n < 0 && errno == EINTR);
    for (int k = 0; k < got; ++k) out.emplace_back(fds[k]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (n == 1 && buf[0] == 0 && got == static_cast<int>(r.binds) && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return out;
    std::string why = n > 1 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("the helper ended");
    throw JailError(kStep, "--via: " + why, 0, "bind a directory this user may read, or run without --via");
}

}  // namespace pyjail::setup
