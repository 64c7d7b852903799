#include "hostid_lease.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "error.hpp"
#include "hints.hpp"

namespace pyjail::supervisor {

namespace {

constexpr const char* kStep = "host ids";

// What a stat of the lock directory says, for lock_dir_refusal.
LockDirFacts lock_dir_facts(const struct stat& st) {
    LockDirFacts f;
    f.kind = S_ISDIR(st.st_mode)   ? LockDirFacts::Kind::Directory
             : S_ISLNK(st.st_mode) ? LockDirFacts::Kind::Link
                                   : LockDirFacts::Kind::Other;
    f.owner = st.st_uid;
    f.owner_named = uid_with_name(st.st_uid);
    f.permissions = st.st_mode & 07777;
    return f;
}

// The directory of the lock files, made if missing, and refused unless it is ours and closed
// to others (lock_dir_refusal says why; root's, in /run, only root can make).
UniqueFd open_lock_dir(const std::string& dir) {
    const uid_t euid = ::geteuid();
    if (euid == 0) (void)::mkdir("/run/pyjail", 0755);
    if (::mkdir(dir.c_str(), euid == 0 ? 0755 : 0700) != 0 && errno != EEXIST)
        throw JailError(kStep, fmt::format("cannot create {}", dir), errno);
    struct stat st {};
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) {
        // Another user's directory closed to us (made first in the shared /tmp), or a link or
        // file in its place: what is there says why the open failed. Read for the message only.
        const int e = errno;
        if (::lstat(dir.c_str(), &st) == 0)
            if (auto refused = lock_dir_refusal(dir, lock_dir_facts(st), euid)) throw *refused;
        throw JailError(kStep, fmt::format("cannot open {}", dir), e);
    }
    if (::fstat(fd.get(), &st) != 0) throw JailError(kStep, fmt::format("cannot stat {}", dir), errno);
    if (auto refused = lock_dir_refusal(dir, lock_dir_facts(st), euid)) throw *refused;
    return fd;
}

// While root opens a host path for the jail: the files owner's file-system ids, so a path
// the jail chose through a link cannot be opened with root's rights. The supervisor has
// already dropped root's supplementary groups (spawn.cpp).
class AsFilesOwner {
public:
    AsFilesOwner(uid_t uid, gid_t gid)
        : old_gid_(static_cast<gid_t>(::setfsgid(gid))), old_uid_(static_cast<uid_t>(::setfsuid(uid))) {
        if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != uid ||
            static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != gid) {
            restore();
            throw JailError(kStep, fmt::format("cannot take the file ids {}:{}", uid, gid));
        }
    }
    AsFilesOwner(const AsFilesOwner&) = delete;
    AsFilesOwner& operator=(const AsFilesOwner&) = delete;
    ~AsFilesOwner() { restore(); }

private:
    void restore() noexcept {
        ::setfsuid(old_uid_);
        ::setfsgid(old_gid_);
        death_signal_.rearm();
    }
    ParentDeathSignal death_signal_;  // read before the ids change
    gid_t old_gid_;
    uid_t old_uid_;
};

// A user namespace with `uid_map`/`gid_map`, held by its descriptor: a process is made to
// create it, and killed once the namespace is open.
UniqueFd make_userns(const std::string& uid_map, const std::string& gid_map) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) throw JailError(kStep, "pipe", errno);
    UniqueFd r(ready[0]), w(ready[1]);
    pid_t pid = ::fork();
    if (pid < 0) throw JailError(kStep, "cannot fork for the idmap's user namespace", errno);
    if (pid == 0) {
        char c = ::unshare(CLONE_NEWUSER) == 0 ? 1 : 0;
        (void)!::write(w.get(), &c, 1);
        ::pause();
        ::_exit(0);
    }
    w.reset();
    auto reap = [&] {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    };
    char c = 0;
    ssize_t n;
    do n = ::read(r.get(), &c, 1);
    while (n < 0 && errno == EINTR);
    const char* failed = "";
    int e = n == 1 && c == 1 ? write_id_maps(fmt::format("/proc/{}/", pid), uid_map, gid_map, failed) : EPERM;
    UniqueFd ns(e == 0 ? ::open(fmt::format("/proc/{}/ns/user", pid).c_str(), O_RDONLY | O_CLOEXEC) : -1);
    if (e == 0 && !ns) e = errno;
    reap();
    if (e != 0) throw JailError(kStep, "cannot make the user namespace of an idmapped bind", e);
    return ns;
}

void run_helper(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    pid_t pid = -1;
    int e = ::posix_spawn(&pid, argv[0], nullptr, &attr, argv.data(), envp);
    posix_spawnattr_destroy(&attr);
    if (e != 0) throw JailError(kStep, fmt::format("cannot run {}", args[0]), e, "install the uidmap package");
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string line;
        for (const auto& a : args) line += (line.empty() ? "" : " ") + a;
        throw JailError(kStep, fmt::format("`{}` failed (status {})", line, status), 0,
                        "check the user's ranges in /etc/subuid and /etc/subgid, and that the helper is "
                        "setuid root (the uidmap package); --host-ids shared runs the jail as you");
    }
}

// The lock of `id` in the lock directory `dir` (at `path`), taken; invalid when a running jail
// holds it.
UniqueFd try_lock(int dir, const std::string& path, std::uint32_t id) {
    std::string name = std::to_string(id);
    UniqueFd fd(::openat(dir, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) throw JailError(kStep, fmt::format("cannot open the lock {}/{}", path, name), errno);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR)
        throw JailError(kStep, fmt::format("cannot lock {}/{}", path, name), errno);
    return {};
}

}  // namespace

HostIdLease::HostIdLease(const HostIdPlan& plan) : plan_(plan) {
    if (plan.kind == HostIdKind::HostUser || plan.kind == HostIdKind::Invoker) {
        maps_ = host_id_maps(plan, 0);
        return;
    }
    UniqueFd dir = open_lock_dir(plan.lock_dir);
    // The same user's runs without $XDG_RUNTIME_DIR (cron) lock in /tmp only: an id is free
    // when it is free there too. A run that cannot use that directory (another user made it
    // first) goes on with its own alone: the runs that would lock there are refused outright.
    UniqueFd also;
    if (!plan.lock_dir_also.empty()) {
        try {
            also = open_lock_dir(plan.lock_dir_also);
        } catch (const JailError&) {
        }
    }
    for (std::uint32_t i = 0; i < plan.uids.count; ++i) {
        UniqueFd fd = try_lock(dir.get(), plan.lock_dir, plan.uids.first + i);
        if (!fd) continue;
        UniqueFd fd_also = also ? try_lock(also.get(), plan.lock_dir_also, plan.uids.first + i) : UniqueFd();
        if (also && !fd_also) continue;  // taken by a run that locks only there
        maps_ = host_id_maps(plan, i);
        lock_ = std::move(fd);
        lock_also_ = std::move(fd_also);
        return;
    }
    throw JailError(kStep,
                    fmt::format("all {} host ids from {} are taken by running jails", plan.uids.count,
                                plan.uids.first),
                    0,
                    plan.kind == HostIdKind::OwnRange ? "give a larger range (--host-ids FIRST:COUNT)"
                                                      : "ask root for a larger range in /etc/subuid and /etc/subgid");
}

bool HostIdLease::supervisor_writes_maps() const {
    return ::geteuid() == 0 || plan_.kind == HostIdKind::Subordinate;
}

void HostIdLease::write_maps(pid_t jail_pid) const {
    if (plan_.kind == HostIdKind::Subordinate) {
        run_helper(newidmap_argv(plan_.newuidmap, jail_pid, maps_.uid_map));
        run_helper(newidmap_argv(plan_.newgidmap, jail_pid, maps_.gid_map));
        return;
    }
    const char* failed = "";
    if (int e = write_id_maps(fmt::format("/proc/{}/", jail_pid), maps_.uid_map, maps_.gid_map, failed); e != 0)
        throw JailError("id maps", fmt::format("cannot write {} ({} / {})", failed, maps_.uid_map.substr(0, maps_.uid_map.size() - 1),
                                               maps_.gid_map.substr(0, maps_.gid_map.size() - 1)),
                        e);
}

std::vector<UniqueFd> HostIdLease::idmapped_sources(const MountPlan& mounts) const {
    std::vector<UniqueFd> fds;
    fds.resize(mounts.sources.size());
    if (!plan_.idmap_binds || plan_.kind != HostIdKind::OwnRange) return fds;
    UniqueFd ns = make_userns(idmapped_bind_map(plan_.files_uid, maps_.host_uid),
                              idmapped_bind_map(plan_.files_gid, maps_.host_gid));
    for (std::size_t slot = 1; slot < mounts.sources.size(); ++slot) {
        const SourceRef& src = mounts.sources[slot];
        if (src.content) continue;
        int fd;
        {
            AsFilesOwner as(plan_.files_uid, plan_.files_gid);
            fd = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, src.host_path.c_str(),
                                            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
        }
        if (fd < 0)
            throw JailError(kStep, fmt::format("cannot open {} as uid {}", src.host_path, plan_.files_uid), errno);
        fds[slot].reset(fd);
        mount_attr attr{};
        attr.attr_set = MOUNT_ATTR_IDMAP;
        attr.userns_fd = static_cast<std::uint64_t>(ns.get());
        if (::syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
            // A filesystem that cannot idmap (tmpfs before Linux 6.3, for one): a read-only
            // bind is then made by the jail's pid 1 from the path itself, opened with the
            // jail's own id, whose rights on the host are those of any user (never more than
            // --host-user's). A writable one cannot be: the jail's files would not be
            // --host-user's, so the run is refused.
            int e = errno;
            if ((e == EINVAL || e == EOPNOTSUPP || e == ENOSYS) && !bound_writable(mounts, static_cast<int>(slot))) {
                fds[slot].reset();
                continue;
            }
            throw JailError(kStep, fmt::format("cannot make an idmapped mount of {}", src.host_path), e,
                            "its filesystem may not support idmapped mounts; --host-ids shared runs the jail "
                            "as --host-user, without one");
        }
    }
    return fds;
}

}  // namespace pyjail::supervisor
