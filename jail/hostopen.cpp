#include "hostopen.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "error.hpp"
#include "trust.hpp"

namespace pyjail {

namespace {

// Why a path was refused; each public function turns it into its own one-line error.
struct Refused {
    std::string why;
    int err = 0;
};

NodeFacts facts_of(const struct stat& st) {
    return {st.st_uid, st.st_gid, st.st_mode, static_cast<std::uint64_t>(st.st_nlink)};
}

NodeFacts fstat_facts(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Refused{fmt::format("cannot stat {}", path), errno};
    return facts_of(st);
}

bool protected_hardlinks() { return read_trimmed("/proc/sys/fs/protected_hardlinks") == "1"; }

std::string join(const std::string& dir, const std::string& name) {
    return dir == "/" ? "/" + name : dir + "/" + name;
}

std::deque<std::string> split_path(const std::string& path) {
    std::deque<std::string> parts;
    std::size_t i = 0;
    while (i < path.size()) {
        std::size_t j = path.find('/', i);
        if (j == std::string::npos) j = path.size();
        if (j > i) parts.push_back(path.substr(i, j - i));
        i = j + 1;
    }
    return parts;
}

enum class Links {
    Refuse,           // no component may be a symbolic link
    FollowUnplanted,  // only links nobody but a trusted user could have put there
};

struct WalkRules {
    TrustedUids trusted;
    Links links = Links::Refuse;
    bool trusted_dirs = false;  // every directory on the way must be trusted (trust.hpp)
    bool resolve_last = false;  // open the last component too (else only its directory)
};

// Where a walk ended: the directory holding the last component, and, with resolve_last, the
// last component itself (O_PATH) if it exists.
struct Walked {
    UniqueFd dir;
    NodeFacts dir_facts;
    std::string dir_path;  // physical: symlinks resolved
    std::string name;
    UniqueFd node;
    NodeFacts node_facts;
};

// Resolves an absolute host path one component at a time, each opened O_NOFOLLOW from the
// descriptor of the directory before it, so what is checked is what is used: no symlink is
// followed behind our back, and nothing can be swapped between the check and the open.
Walked walk(const std::string& path, const WalkRules& r) {
    if (path.empty() || path[0] != '/') throw Refused{fmt::format("{} is not an absolute path", path)};
    UniqueFd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!cur) throw Refused{"cannot open /", errno};
    NodeFacts cur_facts = fstat_facts(cur.get(), "/");
    std::string cur_path = "/";
    if (r.trusted_dirs)
        if (std::string why = untrusted_directory_on_the_way("/", cur_facts, "/", cur_facts, r.trusted);
            !why.empty())
            throw Refused{why};
    std::deque<std::string> parts = split_path(path);
    if (parts.empty()) throw Refused{"/ is a directory"};
    int links = 0;
    while (!parts.empty()) {
        std::string name = std::move(parts.front());
        parts.pop_front();
        if (name == ".") continue;
        const bool last = parts.empty();
        if (name == "..") {
            // Back to a directory this walk has already checked on its way down.
            UniqueFd up(::openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
            if (!up) throw Refused{fmt::format("cannot open {}/..", cur_path), errno};
            cur = std::move(up);
            cur_facts = fstat_facts(cur.get(), cur_path);
            cur_path = cur_path.substr(0, cur_path.rfind('/'));
            if (cur_path.empty()) cur_path = "/";
            if (last) throw Refused{fmt::format("{} ends in ..", path)};
            continue;
        }
        std::string here = join(cur_path, name);
        if (last && !r.resolve_last) return {std::move(cur), cur_facts, cur_path, name, {}, {}};
        UniqueFd fd(::openat(cur.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) {
            if (errno == ENOENT && last) return {std::move(cur), cur_facts, cur_path, name, {}, {}};
            throw Refused{fmt::format("cannot open {}", here), errno};
        }
        NodeFacts f = fstat_facts(fd.get(), here);
        if (S_ISLNK(f.mode)) {
            // A link another user could have planted would choose the file for us.
            if (r.links == Links::Refuse) throw Refused{fmt::format("{} is a symbolic link", here)};
            if (std::string why = who_could_plant(cur_facts, f, r.trusted); !why.empty())
                throw Refused{fmt::format("{} is a symbolic link in {}, which is {}", here, cur_path, why)};
            if (++links > 40) throw Refused{fmt::format("cannot resolve {}", path), ELOOP};
            char buf[PATH_MAX];
            ssize_t n = ::readlinkat(fd.get(), "", buf, sizeof buf - 1);
            if (n <= 0) throw Refused{fmt::format("cannot read the link {}", here), errno};
            std::string target(buf, static_cast<std::size_t>(n));
            std::deque<std::string> more = split_path(target);
            parts.insert(parts.begin(), more.begin(), more.end());
            if (target[0] == '/') {
                cur.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
                if (!cur) throw Refused{"cannot open /", errno};
                cur_facts = fstat_facts(cur.get(), "/");
                cur_path = "/";
            }
            if (parts.empty()) throw Refused{fmt::format("{} is a link to /", here)};
            continue;
        }
        if (last) return {std::move(cur), cur_facts, cur_path, name, std::move(fd), f};
        if (!S_ISDIR(f.mode)) throw Refused{fmt::format("{} is not a directory", here), ENOTDIR};
        if (r.trusted_dirs)
            if (std::string why = untrusted_directory_on_the_way(cur_path, cur_facts, here, f, r.trusted);
                !why.empty())
                throw Refused{why};
        cur = std::move(fd);
        cur_facts = f;
        cur_path = here;
    }
    throw Refused{fmt::format("{} names no file", path)};
}

// The jail's host user's file-system identity for the duration of an open: fsuid and fsgid
// (which the kernel checks for file access; the effective ids stay root's) and no
// supplementary groups (root's groups, e.g. shadow, are not the host user's). Linux drops
// CAP_DAC_OVERRIDE and the other file capabilities from the effective set while fsuid is not
// 0, so the open is checked exactly as the host user's would be.
class AsHostUser {
public:
    explicit AsHostUser(const HostUserIds& ids) {
        // setfsuid acts on the calling thread only, setgroups (glibc) on every thread: the
        // supervisor has only one while it prepares a run, and we check it does.
        if (std::string n = status_threads(); !n.empty() && n != "1")
            throw JailError("script", fmt::format("internal: {} threads while preparing the run", n));
        int n = ::getgroups(0, nullptr);
        if (n < 0) throw JailError("script", "cannot read the supplementary groups", errno);
        groups_.resize(static_cast<std::size_t>(n));
        if (n > 0 && ::getgroups(n, groups_.data()) != n)
            throw JailError("script", "cannot read the supplementary groups", errno);
        if (::setgroups(0, nullptr) != 0)
            throw JailError("script", "cannot drop the supplementary groups", errno);
        old_gid_ = static_cast<gid_t>(::setfsgid(ids.gid));
        old_uid_ = static_cast<uid_t>(::setfsuid(ids.uid));
        if (current_fsuid() != ids.uid || current_fsgid() != ids.gid) {
            restore();
            throw JailError("script", fmt::format("cannot take the host user's file ids {}:{}", ids.uid, ids.gid));
        }
    }
    AsHostUser(const AsHostUser&) = delete;
    AsHostUser& operator=(const AsHostUser&) = delete;
    ~AsHostUser() { restore(); }

private:
    // setfsuid with an invalid id changes nothing and returns the current one.
    static uid_t current_fsuid() { return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))); }
    static gid_t current_fsgid() { return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))); }

    static std::string status_threads() {
        std::string status;
        if (!try_read_file("/proc/self/status", status)) return "";
        auto at = status.find("\nThreads:");
        if (at == std::string::npos) return "";
        auto start = status.find_first_not_of(" \t", at + 9);
        auto end = status.find('\n', start);
        return status.substr(start, end - start);
    }

    void restore() noexcept {
        ::setfsuid(old_uid_);
        ::setfsgid(old_gid_);
        int set = ::setgroups(groups_.size(), groups_.data());
        // Going on as anyone but ourselves would be worse than stopping.
        if (set != 0 || current_fsuid() != old_uid_ || current_fsgid() != old_gid_) {
            std::fputs("pyjail: internal error: cannot restore its own file ids\n", stderr);
            std::abort();
        }
    }

    std::vector<gid_t> groups_;
    uid_t old_uid_ = 0;
    gid_t old_gid_ = 0;
};

void require_regular_script(int fd, const std::string& shown) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        throw JailError("script", fmt::format("{} is not a regular file", shown), 0,
                        "to run a directory or zip, bind it with --ro-bind and give its in-jail path");
}

constexpr int kScriptFlags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;

// Root's own script, which the host user may not read: only on a path that nobody but root
// could have planted -- no symlink anywhere, every directory and the file root's and written
// by nobody else (a sticky /tmp may be on the way, for a file root owns).
UniqueFd open_roots_own_script(const std::string& path) {
    const TrustedUids root_only{0};
    Walked w = walk(path, {root_only, Links::Refuse, true, false});
    std::string here = join(w.dir_path, w.name);
    UniqueFd fd(::openat(w.dir.get(), w.name.c_str(), kScriptFlags | O_NOFOLLOW));
    if (!fd) {
        if (errno == ELOOP) throw Refused{fmt::format("{} is a symbolic link", here)};
        throw Refused{fmt::format("cannot open {}", here), errno};
    }
    NodeFacts f = fstat_facts(fd.get(), here);
    if (!S_ISREG(f.mode)) return fd;  // the caller's "not a regular file"
    if (std::string why = untrusted_end(w.dir_path, w.dir_facts, here, f, root_only, protected_hardlinks());
        !why.empty())
        throw Refused{why};
    return fd;
}

}  // namespace

namespace setup {

// Where a script that does not exist was looked for: a relative name is taken from the
// current directory, which is not always the one the user thinks (cron starts in $HOME).
static std::string missing_script_hint(int err, const std::string& path, const std::string& shown) {
    if (err != ENOENT && err != ENOTDIR) return "";
    return shown == path ? "check the path; the script is a host file, named on pyjail's command line"
                         : fmt::format("looked for {}: a relative name is taken from the current "
                                       "directory; give the script's full path",
                                       path);
}

UniqueFd open_script(const std::string& path, const std::string& shown,
                     const std::optional<HostUserIds>& host_user) {
    if (!host_user) {
        // The invoking user is the jail's host user: its own rights are the jail's.
        UniqueFd fd(::open(path.c_str(), kScriptFlags));
        if (!fd) {
            int e = errno;
            throw JailError("script", fmt::format("cannot open {}", shown), e,
                            missing_script_hint(e, path, shown));
        }
        require_regular_script(fd.get(), shown);
        return fd;
    }
    // Root: a symlink planted in the script's directory (task.py -> /etc/shadow) must not make
    // root read a file for the jail that the jail's host user could not.
    UniqueFd fd;
    int err = 0;
    {
        AsHostUser as(*host_user);
        fd.reset(::open(path.c_str(), kScriptFlags));
        err = errno;
    }
    if (!fd && err != EACCES && err != EPERM)
        throw JailError("script",
                        fmt::format("cannot open {} as uid {}, the jail's host user", shown, host_user->uid),
                        err, missing_script_hint(err, path, shown));
    if (!fd) {
        try {
            fd = open_roots_own_script(path);
        } catch (const Refused& r) {
            throw JailError(
                "script",
                fmt::format("{} is not readable by uid {} (the jail's host user), and root reads a "
                            "script for it only on a path nobody else could have planted: {}{}",
                            shown, host_user->uid, r.why,
                            r.err != 0 ? fmt::format(" ({})", std::strerror(r.err)) : ""),
                0,
                fmt::format("make it readable by uid {}, or choose a --host-user who can read it",
                            host_user->uid));
        }
    }
    require_regular_script(fd.get(), shown);
    return fd;
}

namespace {

// A file pyjail writes with its own rights (perhaps root's) at a path the user named: the
// report, the audit log.
struct OutputFile {
    const char* step;      // "report", "audit log"
    const char* what;      // "the report file", "the audit log"
    bool append;           // O_APPEND and never truncated; else truncated after the checks
    mode_t create_mode;
};

UniqueFd open_output(const std::string& path, const OutputFile& o) {
    const uid_t euid = ::geteuid();
    auto refuse = [&](const std::string& why, int err, const std::string& hint) {
        return JailError(o.step, fmt::format("refusing to write {}: {}", path, why), err, hint);
    };
    const std::string fix = "give a path in a directory only you can write, e.g. your home";
    auto symlink_error = [&] {
        return JailError(o.step, fmt::format("cannot write {}", path), ELOOP,
                         fmt::format("{} must not be a symbolic link", o.what));
    };
    try {
        // No symlink another user could have planted, at any component: the file is written
        // with pyjail's rights (perhaps root's).
        Walked w = walk(path, {{0, euid}, Links::FollowUnplanted, false, false});
        std::string here = join(w.dir_path, w.name);
        // Look before opening: a FIFO would block open() (or take the file), a device acts
        // on open.
        struct stat st {};
        if (::fstatat(w.dir.get(), w.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISLNK(st.st_mode)) throw symlink_error();
            if (std::string why = report_file_refusal(w.dir_facts, facts_of(st), euid, protected_hardlinks());
                !why.empty())
                throw refuse(why, 0, fix);
        }
        // No O_TRUNC: nothing is truncated before the checks; O_NONBLOCK: a FIFO swapped in
        // since cannot block us; O_NOFOLLOW: nor can a symlink.
        UniqueFd fd(::openat(w.dir.get(), w.name.c_str(),
                             O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK |
                                 (o.append ? O_APPEND : 0),
                             o.create_mode));
        if (!fd) {
            int e = errno;
            if (e == ELOOP) throw symlink_error();
            if (e == ENXIO) throw refuse("it is a FIFO, not a regular file", 0, fix);
            throw JailError(o.step, fmt::format("cannot write {}", path), e);
        }
        // What was really opened decides.
        if (std::string why = report_file_refusal(w.dir_facts, fstat_facts(fd.get(), here), euid,
                                                  protected_hardlinks());
            !why.empty())
            throw refuse(why, 0, fix);
        if (!o.append && ::ftruncate(fd.get(), 0) != 0)
            throw JailError(o.step, fmt::format("cannot truncate {}", path), errno);
        int fl = ::fcntl(fd.get(), F_GETFL);
        if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0)
            throw JailError(o.step, fmt::format("cannot write {}", path), errno);
        return fd;
    } catch (const Refused& r) {
        // A directory on the way that is missing or unreadable is a plain failure.
        if (r.err != 0) throw JailError(o.step, fmt::format("cannot write {}", path), r.err);
        throw refuse(r.why, 0, fix);
    }
}

}  // namespace

UniqueFd open_report(const std::string& path) {
    return open_output(path, {"report", "the report file", false, 0644});
}

UniqueFd open_audit_log(const std::string& path) {
    // 0600: what ran, by whom, is the log owner's business. Appended, never truncated: a run
    // must not be able to erase the record of the runs before it.
    return open_output(path, {"audit log", "the audit log", true, 0600});
}

}  // namespace setup

std::string trusted_data_path(const std::string& path) {
    const TrustedUids trusted{0, ::geteuid()};
    try {
        Walked w = walk(path, {trusted, Links::FollowUnplanted, true, true});
        std::string here = join(w.dir_path, w.name);
        if (!w.node) return path;  // missing: nobody else can create it in a trusted directory
        if (std::string why = untrusted_end(w.dir_path, w.dir_facts, here, w.node_facts, trusted, true);
            !why.empty())
            throw Refused{why};
        return here;
    } catch (const Refused& r) {
        throw JailError("data",
                        fmt::format("refusing pyjail's data in {}: {}, so others could choose the "
                                    "jail's profiles, filter or rootfs{}",
                                    path, r.why,
                                    r.err != 0 ? fmt::format(" ({})", std::strerror(r.err)) : ""),
                        0, "make it and its directories owned by root (or you) and not writable by others (chmod go-w)");
    }
}

void require_trusted_data_file(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw JailError("data", fmt::format("cannot stat {}", path), errno);
    if (std::string why = who_else_writes(facts_of(st), {0, ::geteuid()}); !why.empty())
        throw JailError("data",
                        fmt::format("refusing {}: it is {}, so others could choose the jail's "
                                    "profiles or filter", path, why),
                        0, "make it owned by root (or you) and not writable by others (chmod go-w)");
}

}  // namespace pyjail
