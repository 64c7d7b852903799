// A thin layer over the syscalls pyjail uses that glibc does not wrap, and RAII handles.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

// An owned file descriptor, closed when the handle dies.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) noexcept : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        reset(o.release());
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    int release() noexcept {
        int fd = fd_;
        fd_ = -1;
        return fd;
    }
    void reset(int fd = -1) noexcept;

private:
    int fd_ = -1;
};

// struct clone_args as of Linux 5.7 (with cgroup), spelled out to stay independent of the
// installed kernel headers.
struct CloneArgs {
    std::uint64_t flags = 0;
    std::uint64_t pidfd = 0;
    std::uint64_t child_tid = 0;
    std::uint64_t parent_tid = 0;
    std::uint64_t exit_signal = 0;
    std::uint64_t stack = 0;
    std::uint64_t stack_size = 0;
    std::uint64_t tls = 0;
    std::uint64_t set_tid = 0;
    std::uint64_t set_tid_size = 0;
    std::uint64_t cgroup = 0;
};

// clone3's flag to start the child in the cgroup given by CloneArgs::cgroup (Linux 5.7).
inline constexpr std::uint64_t kCloneIntoCgroup = 0x200000000ULL;

// fork()-like clone3: returns 0 in the child, the pid in the parent, -1 with errno on failure.
pid_t sys_clone3(CloneArgs& args) noexcept;
int sys_pidfd_send_signal(int pidfd, int sig) noexcept;
int sys_pivot_root(const char* new_root, const char* put_old) noexcept;
int sys_close_range(unsigned first, unsigned last, unsigned flags) noexcept;

// One datagram on a SOCK_SEQPACKET socket, optionally carrying a file descriptor
// (SCM_RIGHTS). send: returns 0 or an errno. recv: returns the bytes read (-1 with errno),
// and the passed descriptor (close-on-exec) or -1 in `fd`.
int send_with_fd(int sock, const void* data, std::size_t len, int fd, int flags = 0) noexcept;
// The same with up to kMaxPassedFds descriptors; recv closes any beyond `max_fds` and returns
// how many it kept in `got`.
inline constexpr int kMaxPassedFds = 16;
// `flags`: more sendmsg flags (MSG_DONTWAIT) beside MSG_NOSIGNAL.
int send_with_fds(int sock, const void* data, std::size_t len, const int* fds, int nfds,
                  int flags = 0) noexcept;
ssize_t recv_with_fds(int sock, void* data, std::size_t len, int* fds, int max_fds, int& got,
                      int flags) noexcept;
ssize_t recv_with_fd(int sock, void* data, std::size_t len, int& fd, int flags) noexcept;

// Whether seccomp filters can notify a supervisor (SECCOMP_RET_USER_NOTIF): 0, or an errno.
int seccomp_user_notif_errno() noexcept;

// Reads a small file whole; throws JailError naming `step`.
std::string read_file(const std::string& path, const std::string& step);
// The same for a file already open as `path`: from its offset to the end.
std::string read_fd(int fd, const std::string& path, const std::string& step);
// Reads a small file whole; returns false instead of throwing.
bool try_read_file(const std::string& path, std::string& out) noexcept;
// Reads an open file from its offset to the end; false (errno set) on a read error.
bool try_read_fd(int fd, std::string& out) noexcept;
// The number on the line `name:` of /proc/self/fdinfo/FD (mnt_id, a pidfd's Pid), or nothing
// when the descriptor's fdinfo has no such line.
std::optional<long> fdinfo_number(int fd, std::string_view name);

// A small file's text without trailing newlines and spaces (a sysctl, a cgroup file), or ""
// when it cannot be read.
std::string read_trimmed(const std::string& path);

// The names in `dir` that end in `suffix` (and are longer than it), sorted. Returns false
// with errno set when the directory cannot be read.
bool list_dir(const std::string& dir, const std::string& suffix, std::vector<std::string>& names);

// Writes all of `data` to `path` (no O_CREAT). Returns 0 or an errno.
int write_file(const std::string& path, const std::string& data) noexcept;

// move_mount of the detached mount `mount_fd` onto `target` (symlinks followed). Returns -1
// with errno on failure.
int sys_move_mount_here(int mount_fd, const char* target) noexcept;

// Writes a user namespace's id maps through `proc_dir` ("/proc/self/" or "/proc/PID/"):
// setgroups "deny" first, or an unprivileged writer may not write a gid_map -- and denying it
// keeps the jail from dropping groups to escape deny-ACLs. Returns 0, or an errno with
// `failed` naming the file ("setgroups", "uid_map", "gid_map").
int write_id_maps(const std::string& proc_dir, const std::string& uid_map,
                  const std::string& gid_map, const char*& failed) noexcept;

// The parent-death signal, which any change of the file-system ids clears (the kernel's
// commit_creds): saved before one, and set again after, so that a process that must die with
// its parent (pyjail serve's template, a launcher's run) still does. Its parent gone in
// between: the signal, now.
class ParentDeathSignal {
public:
    ParentDeathSignal() noexcept;
    void rearm() const noexcept;

private:
    int signal_ = 0;
    pid_t parent_ = 0;
};

}  // namespace pyjail
