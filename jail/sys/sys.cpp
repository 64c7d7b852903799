#include "sys.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "error.hpp"

namespace pyjail {

void UniqueFd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

pid_t sys_clone3(CloneArgs& args) noexcept {
    return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof(args)));
}

int sys_pidfd_send_signal(int pidfd, int sig) noexcept {
    return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

int sys_pivot_root(const char* new_root, const char* put_old) noexcept {
    return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

int sys_close_range(unsigned first, unsigned last, unsigned flags) noexcept {
    return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

int send_with_fds(int sock, const void* data, std::size_t len, const int* fds, int nfds, int flags) noexcept {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
    if (nfds < 0 || nfds > kMaxPassedFds) return EINVAL;
    iovec iov{const_cast<void*>(data), len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds > 0) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<std::size_t>(nfds));
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<std::size_t>(nfds));
        std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<std::size_t>(nfds));
    }
    return ::sendmsg(sock, &msg, MSG_NOSIGNAL | flags) < 0 ? errno : 0;
}

int send_with_fd(int sock, const void* data, std::size_t len, int fd, int flags) noexcept {
    return send_with_fds(sock, data, len, &fd, fd >= 0 ? 1 : 0, flags);
}

ssize_t recv_with_fds(int sock, void* data, std::size_t len, int* fds, int max_fds, int& got,
                      int flags) noexcept {
    got = 0;
    // Room for more than asked for: descriptors beyond `max_fds` are received (the kernel
    // installs all it can) and closed, never leaked.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
    iovec iov{data, len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t k = 0; k < count; ++k) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
            if (got < max_fds) fds[got++] = fd;
            else ::close(fd);
        }
    }
    return n;
}

ssize_t recv_with_fd(int sock, void* data, std::size_t len, int& fd, int flags) noexcept {
    int got = 0;
    fd = -1;
    ssize_t n = recv_with_fds(sock, data, len, &fd, 1, got, flags);
    if (got == 0) fd = -1;
    return n;
}

int seccomp_user_notif_errno() noexcept {
    std::uint32_t action = SECCOMP_RET_USER_NOTIF;
    return ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0 ? 0 : errno;
}

bool try_read_fd(int fd, std::string& out) noexcept {
    out.clear();
    char buf[4096];
    while (true) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        if (n == 0) return true;
        out.append(buf, static_cast<std::size_t>(n));
    }
}

bool try_read_file(const std::string& path, std::string& out) noexcept {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = try_read_fd(fd, out);
    int e = errno;
    ::close(fd);
    errno = e;
    return ok;
}

std::optional<long> fdinfo_number(int fd, std::string_view name) {
    std::string info;
    if (!try_read_file("/proc/self/fdinfo/" + std::to_string(fd), info)) return std::nullopt;
    // At a line's start: "Pid:" is not the end of "NSpid:".
    std::string key = "\n" + std::string(name) + ":";
    info.insert(0, 1, '\n');
    auto at = info.find(key);
    if (at == std::string::npos) return std::nullopt;
    return std::strtol(info.c_str() + at + key.size(), nullptr, 10);
}

bool list_dir(const std::string& dir, const std::string& suffix, std::vector<std::string>& names) {
    names.clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return false;
    while (dirent* e = ::readdir(d)) {
        std::string_view n = e->d_name;
        if (n.size() > suffix.size() && n.ends_with(suffix)) names.emplace_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return true;
}

std::string read_trimmed(const std::string& path) {
    std::string s;
    if (!try_read_file(path, s)) return {};
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string read_fd(int fd, const std::string& path, const std::string& step) {
    std::string out;
    if (!try_read_fd(fd, out)) throw JailError(step, "cannot read " + path, errno);
    return out;
}

std::string read_file(const std::string& path, const std::string& step) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw JailError(step, "cannot read " + path, errno);
    return read_fd(fd.get(), path, step);
}

int write_file(const std::string& path, const std::string& data) noexcept {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    ssize_t n = ::write(fd, data.data(), data.size());
    int err = n < 0 ? errno : (static_cast<std::size_t>(n) != data.size() ? EIO : 0);
    ::close(fd);
    return err;
}

int sys_move_mount_here(int mount_fd, const char* target) noexcept {
    return static_cast<int>(::syscall(SYS_move_mount, mount_fd, "", AT_FDCWD, target,
                                      MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_SYMLINKS));
}

int write_id_maps(const std::string& proc_dir, const std::string& uid_map,
                  const std::string& gid_map, const char*& failed) noexcept {
    const std::pair<const char*, const std::string*> files[] = {
        {"setgroups", nullptr}, {"uid_map", &uid_map}, {"gid_map", &gid_map}};
    // Each file below the one directory, looked up once: not /proc and the pid three times.
    int dir = ::open(proc_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        failed = "setgroups";  // the first of them, as a failed open of it would say
        return errno;
    }
    int err = 0;
    for (const auto& [name, text] : files) {
        const std::string_view data = text != nullptr ? std::string_view(*text) : std::string_view("deny");
        int fd = ::openat(dir, name, O_WRONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : ::write(fd, data.data(), data.size());
        err = n < 0 ? errno : (static_cast<std::size_t>(n) != data.size() ? EIO : 0);
        if (fd >= 0) ::close(fd);
        if (err != 0) {
            failed = name;
            break;
        }
    }
    ::close(dir);
    return err;
}

ParentDeathSignal::ParentDeathSignal() noexcept : parent_(::getppid()) { (void)::prctl(PR_GET_PDEATHSIG, &signal_); }

void ParentDeathSignal::rearm() const noexcept {
    if (signal_ == 0) return;
    (void)::prctl(PR_SET_PDEATHSIG, signal_);
    if (::getppid() != parent_) (void)::kill(::getpid(), signal_);
}

}  // namespace pyjail
