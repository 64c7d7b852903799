#include "hostopen.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/random.h>
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
#include "host_users.hpp"
#include "sys.hpp"
#include "trust.hpp"
#include "writable_place.hpp"

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

struct Lookups;

struct WalkRules {
    TrustedIds trusted;
    Links links = Links::Refuse;
    bool trusted_dirs = false;  // every directory on the way must be trusted (trust.hpp)
    bool resolve_last = false;  // open the last component too (else only its directory)
    Lookups* lookups = nullptr;  // where to note each directory a name is looked up in
    TrustedWalks::Dirs* checked = nullptr;  // with trusted_dirs: directories checked before
};

}  // namespace

// A directory a trusted walk checked (every directory from / to it trusted), held open.
struct TrustedWalks::Dirs {
    struct Dir {
        std::string path;  // physical, as the walk reached it
        UniqueFd fd;
        NodeFacts facts;
        std::vector<std::uint32_t> uids, gids;  // the trusted ids it was checked under
    };
    std::vector<Dir> dirs;

    // The deepest directory `path` lies strictly under, checked under `trusted`.
    const Dir* start_for(const std::string& path, const TrustedIds& trusted) const {
        const Dir* best = nullptr;
        for (const Dir& d : dirs)
            if (d.uids == trusted.uids && d.gids == trusted.gids && path.size() > d.path.size() + 1 &&
                path.compare(0, d.path.size(), d.path) == 0 && path[d.path.size()] == '/' &&
                (best == nullptr || d.path.size() > best->path.size()))
                best = &d;
        return best;
    }
    // Takes a checked directory the walk is done with (one already kept is closed).
    void keep(const std::string& path, UniqueFd fd, const NodeFacts& facts, const TrustedIds& trusted) {
        if (path == "/" || !fd) return;
        for (const Dir& d : dirs)
            if (d.path == path && d.uids == trusted.uids && d.gids == trusted.gids) return;
        dirs.push_back({path, std::move(fd), facts, trusted.uids, trusted.gids});
    }
};

TrustedWalks::TrustedWalks() : dirs(std::make_unique<Dirs>()) {}
TrustedWalks::~TrustedWalks() = default;

namespace {

FileId id_of(const struct stat& st) {
    return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

// The mount a descriptor lies on (/proc/self/fdinfo), or -1.
long mount_id_of(int fd) { return fdinfo_number(fd, "mnt_id").value_or(-1); }

// /proc/self/mountinfo's root and mount point of each mount, by id.
struct MountTable {
    struct Entry {
        long id;
        std::string root, point;
    };
    std::vector<Entry> entries;

    static std::string unescape(const std::string& s) {  // "\040" is a space
        std::string out;
        for (std::size_t i = 0; i < s.size(); ++i) {
            auto octal = [&](std::size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '7'; };
            if (s[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
                out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
                i += 3;
            } else {
                out += s[i];
            }
        }
        return out;
    }
    static MountTable read() {
        MountTable t;
        std::string text;
        if (!try_read_file("/proc/self/mountinfo", text)) return t;
        std::size_t at = 0;
        while (at < text.size()) {
            std::size_t end = text.find('\n', at);
            if (end == std::string::npos) end = text.size();
            std::vector<std::string> f;
            std::size_t i = at;
            while (i < end && f.size() < 5) {
                std::size_t j = text.find(' ', i);
                if (j == std::string::npos || j > end) j = end;
                f.push_back(text.substr(i, j - i));
                i = j + 1;
            }
            if (f.size() == 5) t.entries.push_back({std::strtol(f[0].c_str(), nullptr, 10), unescape(f[3]), unescape(f[4])});
            at = end + 1;
        }
        return t;
    }
    const Entry* find(long id) const {
        for (const Entry& e : entries)
            if (e.id == id) return &e;
        return nullptr;
    }
};

// The directories a walk looked names up in, each with what lies above it on the host: what
// a jail that can write one of them could have changed (writable_place.hpp).
struct Lookups {
    MountTable mounts = MountTable::read();
    std::vector<LookupDir> dirs;

    void note(int dir_fd, const std::string& path);
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
    std::optional<FileId> node_id = std::nullopt;  // set by walk_to_output
};

// Resolves an absolute host path one component at a time, each opened O_NOFOLLOW from the
// descriptor of the directory before it, so what is checked is what is used: no symlink is
// followed behind our back, and nothing can be swapped between the check and the open.
Walked walk_on(UniqueFd cur, NodeFacts cur_facts, std::string cur_path, std::deque<std::string> parts,
               const std::string& path, const WalkRules& r);

Walked walk(const std::string& path, const WalkRules& r) {
    if (path.empty() || path[0] != '/') throw Refused{fmt::format("{} is not an absolute path", path)};
    // From a directory an earlier walk checked (every one above it trusted), when there is one.
    const bool reuse = r.trusted_dirs && r.checked != nullptr && r.lookups == nullptr;
    if (const TrustedWalks::Dirs::Dir* d = reuse ? r.checked->start_for(path, r.trusted) : nullptr) {
        UniqueFd cur(::fcntl(d->fd.get(), F_DUPFD_CLOEXEC, 3));
        if (cur) return walk_on(std::move(cur), d->facts, d->path, split_path(path.substr(d->path.size())), path, r);
    }
    UniqueFd cur(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!cur) throw Refused{"cannot open /", errno};
    NodeFacts cur_facts = fstat_facts(cur.get(), "/");
    if (r.trusted_dirs)
        if (std::string why = untrusted_directory_on_the_way("/", cur_facts, "/", cur_facts, r.trusted);
            !why.empty())
            throw Refused{why};
    return walk_on(std::move(cur), cur_facts, "/", split_path(path), path, r);
}

// The walk's descent, from the directory `cur` (checked, at the physical path `cur_path`)
// through `parts`.
Walked walk_on(UniqueFd cur, NodeFacts cur_facts, std::string cur_path, std::deque<std::string> parts,
               const std::string& path, const WalkRules& r) {
    if (parts.empty()) throw Refused{"/ is a directory"};
    int links = 0;
    while (!parts.empty()) {
        std::string name = std::move(parts.front());
        parts.pop_front();
        if (name == ".") continue;
        const bool last = parts.empty();
        if (name == "..") {
            if (r.lookups != nullptr) r.lookups->note(cur.get(), cur_path);
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
        if (r.lookups != nullptr) r.lookups->note(cur.get(), cur_path);
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
        if (r.trusted_dirs && r.checked != nullptr) r.checked->keep(cur_path, std::move(cur), cur_facts, r.trusted);
        cur = std::move(fd);
        cur_facts = f;
        cur_path = here;
    }
    throw Refused{fmt::format("{} names no file", path)};
}

// Climbs from the directory by "..", which crosses mounts as the kernel resolves it, and notes
// the root of each mount on the way by its path within its filesystem: a bind mount shows a
// directory under another name, and its ancestors under that name are not its real ones.
void Lookups::note(int dir_fd, const std::string& path) {
    LookupDir d{path, {}, {}};
    UniqueFd cur(::openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!cur) throw Refused{fmt::format("cannot open {}", path), errno};
    struct stat st {};
    if (::fstat(cur.get(), &st) != 0) throw Refused{fmt::format("cannot stat {}", path), errno};
    long mnt = mount_id_of(cur.get());
    for (int depth = 0;; ++depth) {
        if (mnt < 0 || depth > 4096) throw Refused{fmt::format("cannot tell where {} lies", path), EIO};
        d.ancestors.push_back(id_of(st));
        UniqueFd up(::openat(cur.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
        struct stat up_st {};
        if (!up || ::fstat(up.get(), &up_st) != 0)
            throw Refused{fmt::format("cannot open the directories above {}", path), errno};
        long up_mnt = mount_id_of(up.get());
        const bool top = id_of(up_st) == id_of(st) && up_mnt == mnt;
        if (up_mnt != mnt || top) {
            const MountTable::Entry* m = mounts.find(mnt);
            if (m == nullptr) throw Refused{fmt::format("cannot tell where {} lies", path), EIO};
            d.mounts.push_back({static_cast<std::uint64_t>(st.st_dev), m->root});
        }
        if (top) break;
        cur = std::move(up);
        st = up_st;
        mnt = up_mnt;
    }
    dirs.push_back(std::move(d));
}

// The jail's host user's file-system identity for the duration of an open: fsuid and fsgid
// (which the kernel checks for file access; the effective ids stay root's) and no
// supplementary groups (root's groups, e.g. shadow, are not the host user's). Linux drops
// CAP_DAC_OVERRIDE and the other file capabilities from the effective set while fsuid is not
// 0, so the open is checked exactly as the host user's would be.
class AsHostUser {
public:
    // `step`: what the ids are taken for, should that fail ("script", "bind").
    explicit AsHostUser(const HostUserIds& ids, const char* step = "script") {
        // setfsuid acts on the calling thread only, setgroups (glibc) on every thread: the
        // supervisor has only one while it prepares a run, and we check it does.
        if (std::string n = status_threads(); !n.empty() && n != "1")
            throw JailError(step, fmt::format("internal: {} threads while preparing the run", n));
        int n = ::getgroups(0, nullptr);
        if (n < 0) throw JailError(step, "cannot read the supplementary groups", errno);
        groups_.resize(static_cast<std::size_t>(n));
        if (n > 0 && ::getgroups(n, groups_.data()) != n)
            throw JailError(step, "cannot read the supplementary groups", errno);
        if (::setgroups(0, nullptr) != 0)
            throw JailError(step, "cannot drop the supplementary groups", errno);
        old_gid_ = static_cast<gid_t>(::setfsgid(ids.gid));
        old_uid_ = static_cast<uid_t>(::setfsuid(ids.uid));
        if (current_fsuid() != ids.uid || current_fsgid() != ids.gid) {
            restore();
            throw JailError(step, fmt::format("cannot take the host user's file ids {}:{}", ids.uid, ids.gid));
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
        death_signal_.rearm();
    }

    ParentDeathSignal death_signal_;  // read before the ids change
    std::vector<gid_t> groups_;
    uid_t old_uid_ = 0;
    gid_t old_gid_ = 0;
};

void require_regular_script(int fd, const std::string& shown) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        throw JailError("script", fmt::format("{} is not a regular file", shown), 0,
                        "the script is copied into the jail: to run a directory's __main__.py, bind it "
                        "(--ro-bind DIR:/work/app) and run python -c \"import runpy; "
                        "runpy.run_path('/work/app', run_name='__main__')\"");
}

constexpr int kScriptFlags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;

// Root's own script, which the host user may not read: only on a path that nobody but root
// could have planted -- no symlink anywhere, every directory and the file root's and written
// by nobody else (a sticky /tmp may be on the way, for a file root owns).
UniqueFd open_roots_own_script(const std::string& path) {
    const TrustedIds root_only{0};
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

// A script that cannot be opened (`err`, as `as_uid` when root runs pyjail). One that does not
// exist says where it was looked for: a relative name is taken from the current directory,
// which is not always the one the user thinks (cron starts in $HOME).
static JailError script_open_error(int err, const std::string& path, const std::string& shown,
                                   std::optional<uid_t> as_uid) {
    if (err == ENOENT && shown != path)
        return JailError("script",
                         fmt::format("{} does not exist in the current directory: there is no {}", shown, path),
                         0,
                         "check its name; a job started elsewhere, as cron starts in $HOME, needs the "
                         "script's full path");
    std::string hint = err == ENOENT || err == ENOTDIR
                           ? "check the path; the script is a host file, named on pyjail's command line"
                           : "";
    if (as_uid)
        return JailError("script", fmt::format("cannot open {} as uid {}, the jail's host user", shown, *as_uid),
                         err, hint);
    return JailError("script", fmt::format("cannot open {}", shown), err, hint);
}

HostUserReach reach_as_host_user(const std::string& path, const std::optional<HostUserIds>& host_user,
                                 bool writable) {
    std::optional<AsHostUser> as;
    if (host_user) as.emplace(*host_user, "bind");
    HostUserReach r;
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!fd) {
        r.open_err = errno;
        return r;
    }
    // An O_PATH open asks only for the directories above. A directory the user may not search
    // (root's `mktemp -d` is 0700) opens too, and would fail only in the jail ("chdir: cannot
    // enter /work") with no word of who cannot enter what, or why.
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        r.open_err = errno;
        return r;
    }
    // Only the kernel's own answers count: a container's filter that refuses faccessat2
    // (EPERM, ENOSYS) leaves the question open, and the jail finds out for itself.
    auto denied = [&](int mode) {
        return ::faccessat(fd.get(), "", mode, AT_EACCESS | AT_EMPTY_PATH) != 0 && errno != EPERM &&
                       errno != ENOSYS
                   ? errno
                   : 0;
    };
    if (S_ISDIR(st.st_mode))
        if ((r.enter_err = denied(X_OK)) != 0) return r;  // writability is moot: this stops the run
    // AT_EACCESS: checked against the file ids (root's jails: the host user's now, without
    // root's file capabilities), not the real ids, which are root's. What is asked about is what
    // was opened.
    if (writable) r.write_err = denied(W_OK);
    return r;
}

// `made` (below `dir`), if it is still what pid 1 made: an empty directory, or an empty file.
// Attack: the program, which may write `dir`, moves a directory made on the way away and
// leaves a symbolic link in its place, so that this removal (with the host user's rights)
// empties another directory. Its directory is reached beneath `dir` and through no link, and
// a link is never what is removed. Returns whether it is gone.
static bool remove_made(int dir, const std::string& made) {
    auto slash = made.rfind('/');
    UniqueFd parent;
    if (slash != std::string::npos) {
        open_how how{};
        how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
        parent.reset(static_cast<int>(::syscall(SYS_openat2, dir, made.substr(0, slash).c_str(), &how, sizeof how)));
        if (!parent) return false;
    }
    int at = parent ? parent.get() : dir;
    std::string name = made.substr(slash == std::string::npos ? 0 : slash + 1);
    struct stat st {};
    if (::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    if (S_ISDIR(st.st_mode)) return ::unlinkat(at, name.c_str(), AT_REMOVEDIR) == 0;  // only if empty
    return S_ISREG(st.st_mode) && st.st_size == 0 && st.st_nlink == 1 && ::unlinkat(at, name.c_str(), 0) == 0;
}

void remove_host_mount_points(const std::vector<HostMountPoint>& points,
                              const std::optional<HostUserIds>& host_user) noexcept {
    if (points.empty()) return;
    try {
        std::optional<AsHostUser> as;
        if (host_user) as.emplace(*host_user, "bind");
        // The last made first: a directory two binds share is empty only once both are gone.
        for (auto p = points.rbegin(); p != points.rend(); ++p) {
            // By name, so perhaps through a link the program left where the directory was
            // (it may see that directory's parent through another bind): only the directory
            // planned is one to remove from.
            UniqueFd dir(::open(p->host_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
            struct stat st {};
            if (!dir || ::fstat(dir.get(), &st) != 0 || st.st_dev != p->dev || st.st_ino != p->ino) continue;
            for (const std::string& made : p->made)
                if (!remove_made(dir.get(), made)) break;  // what is left holds the rest
        }
    } catch (...) {  // the host user's ids could not be taken: leave them
    }
}

UniqueFd open_script(const std::string& path, const std::string& shown,
                     const std::optional<HostUserIds>& host_user) {
    if (!host_user) {
        // The invoking user is the jail's host user: its own rights are the jail's.
        UniqueFd fd(::open(path.c_str(), kScriptFlags));
        if (!fd) throw script_open_error(errno, path, shown, std::nullopt);
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
    if (!fd && err != EACCES && err != EPERM) throw script_open_error(err, path, shown, host_user->uid);
    if (!fd) {
        try {
            fd = open_roots_own_script(path);
        } catch (const Refused& r) {
            // The host user could not look, root could: the script is simply not there (a
            // typo in a directory closed to others), which "not readable by" would hide.
            if (r.err == ENOENT || r.err == ENOTDIR) throw script_open_error(r.err, path, shown, std::nullopt);
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
    bool append;           // O_APPEND and never truncated; else replaced whole
    mode_t create_mode;
};

const char* const kOutputFix = "give a path in a directory only you can write, e.g. your home";

JailError output_refused(const std::string& path, const OutputFile& o, const std::string& why) {
    return JailError(o.step, fmt::format("refusing to write {}: {}", path, why), 0, kOutputFix);
}

JailError output_symlink(const std::string& path, const OutputFile& o) {
    return JailError(o.step, fmt::format("cannot write {}", path), ELOOP,
                     fmt::format("{} must not be a symbolic link", o.what));
}

// The directory the output goes in, and what is there now (if anything) checked: no symlink
// another user could have planted on the way (the file is written with pyjail's rights,
// perhaps root's), and at the path only a regular file pyjail may write. Throws JailError.
Walked walk_to_output(const std::string& path, const OutputFile& o, Lookups* lookups = nullptr) {
    const uid_t euid = ::geteuid();
    try {
        WalkRules rules{{0, euid}, Links::FollowUnplanted, false, false};
        rules.lookups = lookups;
        Walked w = walk(path, rules);
        // Look before opening: a FIFO would block open() (or take the file), a device acts
        // on open.
        struct stat st {};
        if (::fstatat(w.dir.get(), w.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISLNK(st.st_mode)) throw output_symlink(path, o);
            if (std::string why = report_file_refusal(w.dir_facts, facts_of(st), euid, protected_hardlinks());
                !why.empty())
                throw output_refused(path, o, why);
            w.node_facts = facts_of(st);
            w.node_id = id_of(st);
        }
        return w;
    } catch (const Refused& r) {
        // A directory on the way that is missing or unreadable is a plain failure.
        if (r.err != 0) throw JailError(o.step, fmt::format("cannot write {}", path), r.err);
        throw output_refused(path, o, r.why);
    }
}

// Refuses an output the jail could have changed (writable_place.hpp): resolved again from
// its path, each directory on the way with its real ancestors.
void refuse_jail_writable(const std::string& path, const OutputFile& o,
                          const std::vector<WritablePlace>& places) {
    if (places.empty()) return;
    Lookups lookups;
    Walked w = walk_to_output(path, o, &lookups);
    OutputPath out{std::move(lookups.dirs), w.node_id, w.node_facts.nlink};
    if (std::string why = jail_writable_reason(out, places, !o.append); !why.empty())
        throw JailError(o.step, fmt::format("refusing to write {}: {}", path, why), 0,
                        "give a path outside the work directory and the writable binds, where "
                        "the jail cannot erase or forge it");
}

UniqueFd open_for_append(const std::string& path, const OutputFile& o) {
    Walked w = walk_to_output(path, o);
    std::string here = join(w.dir_path, w.name);
    // O_NONBLOCK: a FIFO swapped in since the look cannot block us; O_NOFOLLOW: nor can a
    // symlink.
    UniqueFd fd(::openat(w.dir.get(), w.name.c_str(),
                         O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK,
                         o.create_mode));
    if (!fd) {
        int e = errno;
        if (e == ELOOP) throw output_symlink(path, o);
        if (e == ENXIO) throw output_refused(path, o, "it is a FIFO, not a regular file");
        throw JailError(o.step, fmt::format("cannot write {}", path), e);
    }
    try {
        // What was really opened decides.
        if (std::string why = report_file_refusal(w.dir_facts, fstat_facts(fd.get(), here), ::geteuid(),
                                                  protected_hardlinks());
            !why.empty())
            throw output_refused(path, o, why);
    } catch (const Refused& r) {
        throw JailError(o.step, fmt::format("cannot write {}", path), r.err);
    }
    int fl = ::fcntl(fd.get(), F_GETFL);
    if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0)
        throw JailError(o.step, fmt::format("cannot write {}", path), errno);
    return fd;
}

const OutputFile kReport{"report", "the report file", false, 0644};
// 0600: what ran, by whom, is the log owner's business. Appended, never truncated: a run must
// not be able to erase the record of the runs before it.
const OutputFile kAuditLog{"audit log", "the audit log", true, 0600};

bool write_all(int fd, const std::string& text) {
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = ENOSPC;
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// A name for the new report beside the old one, until it is renamed into place.
std::string temp_name_for(const std::string& name) {
    unsigned char r[8] = {};
    if (::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
        throw JailError("report", "cannot draw a random name", errno);
    std::string suffix = ".pyjail-";
    for (unsigned char c : r) suffix += fmt::format("{:02x}", c);
    return "." + name.substr(0, 200) + suffix;
}

}  // namespace

void check_report(const std::string& path) {
    Walked w = walk_to_output(path, kReport);
    // The new report is made in this directory when the run is over.
    if (::faccessat(w.dir.get(), ".", W_OK | X_OK, AT_EACCESS) != 0)
        throw JailError("report", fmt::format("cannot write {}", path), errno);
}

void write_report(const std::string& path, const std::string& text,
                  const std::vector<WritablePlace>& places) {
    refuse_jail_writable(path, kReport, places);
    Walked w = walk_to_output(path, kReport);
    auto fail = [&](const char* what) { return JailError("report", fmt::format("{} {}", what, path), errno); };
    // Replaced whole, never written in place: whatever is at the path when the run ends is a
    // file pyjail made now, not one somebody else could have held open (or linked) meanwhile.
    // O_TMPFILE: nothing is left behind if pyjail dies before the rename.
    std::string temp = temp_name_for(w.name);
    UniqueFd fd(::openat(w.dir.get(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, kReport.create_mode));
    bool named = false;
    if (!fd && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        // A file system without O_TMPFILE: a named new file instead, removed on failure.
        fd.reset(::openat(w.dir.get(), temp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                          kReport.create_mode));
        named = static_cast<bool>(fd);
    }
    if (!fd) throw fail("cannot write");
    auto forget_temp = [&] {
        if (named) ::unlinkat(w.dir.get(), temp.c_str(), 0);
    };
    if (!write_all(fd.get(), text)) {
        JailError e = fail("cannot write");
        forget_temp();
        throw e;
    }
    if (!named &&
        ::linkat(AT_FDCWD, fmt::format("/proc/self/fd/{}", fd.get()).c_str(), w.dir.get(), temp.c_str(),
                 AT_SYMLINK_FOLLOW) != 0)
        throw fail("cannot write");
    if (::renameat(w.dir.get(), temp.c_str(), w.dir.get(), w.name.c_str()) != 0) {
        JailError e = fail("cannot put in place");
        ::unlinkat(w.dir.get(), temp.c_str(), 0);
        throw e;
    }
}

void check_report_place(const std::string& path, const std::vector<WritablePlace>& places) {
    refuse_jail_writable(path, kReport, places);
}

void check_audit_log_place(const std::string& path, const std::vector<WritablePlace>& places) {
    refuse_jail_writable(path, kAuditLog, places);
}

UniqueFd open_audit_log(const std::string& path, const std::vector<WritablePlace>& places) {
    refuse_jail_writable(path, kAuditLog, places);
    return open_for_append(path, kAuditLog);
}

std::vector<WritablePlace> writable_places(const std::vector<BindSpec>& binds) {
    std::vector<WritablePlace> places;
    MountTable mounts = MountTable::read();
    for (const BindSpec& b : binds) {
        if (!b.writable) continue;
        // Opened as the jail's pid 1 opens it, following links. A source that does not exist
        // cannot be bound either (the run fails then); any other failure leaves us unable to
        // tell what the jail could write, so the run stops here.
        UniqueFd fd(::open(b.source.c_str(), O_PATH | O_CLOEXEC));
        if (!fd && (errno == ENOENT || errno == ENOTDIR)) continue;
        if (!fd)
            throw JailError("bind", fmt::format("{}: cannot use {}", b.origin, b.source), errno,
                            "pyjail must see what the jail may write, to keep the report and "
                            "the audit log out of it");
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) throw JailError("bind", b.source, errno);
        WritablePlace p{id_of(st), S_ISDIR(st.st_mode), "", b.source, b.origin};
        // Its path within its filesystem: its mount's root, and its path below the mount point.
        char buf[PATH_MAX];
        ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd.get()).c_str(), buf, sizeof buf - 1);
        const MountTable::Entry* m = mounts.find(mount_id_of(fd.get()));
        if (n > 0 && m != nullptr) {
            std::string at(buf, static_cast<std::size_t>(n));
            if (m->point == "/" || fs_path_within(at, m->point)) {
                std::string below = m->point == "/" ? at : at.substr(m->point.size());
                p.fs_path = below.empty() ? m->root : m->root == "/" ? below : m->root + below;
            }
        }
        places.push_back(std::move(p));
    }
    return places;
}

}  // namespace setup

namespace {

// Root's group, when nobody but the trusted users is in it. Read only when a path fails
// without it (a tree unpacked by root from a tarball: git archive leaves directories 0775).
std::vector<std::uint32_t> root_group_if_trusted(const TrustedIds& trusted) {
    std::string passwd, group;
    if (!try_read_file("/etc/passwd", passwd) || !try_read_file("/etc/group", group)) return {};
    if (!group_holds_only(passwd, group, 0, trusted.uids)) return {};
    return {0};
}

std::string trusted_data_path_for(const std::string& path, const TrustedIds& trusted,
                                  TrustedWalks::Dirs* checked) {
    WalkRules rules{trusted, Links::FollowUnplanted, true, true};
    rules.checked = checked;
    Walked w = walk(path, rules);
    std::string here = join(w.dir_path, w.name);
    if (checked != nullptr) checked->keep(w.dir_path, std::move(w.dir), w.dir_facts, trusted);
    if (!w.node) return path;  // missing: nobody else can create it in a trusted directory
    if (std::string why = untrusted_end(w.dir_path, w.dir_facts, here, w.node_facts, trusted, true);
        !why.empty())
        throw Refused{why};
    return here;
}

}  // namespace

std::string trusted_data_path(const std::string& path) {
    TrustedWalks walks;
    return trusted_data_path(path, walks);
}

std::string trusted_data_path(const std::string& path, TrustedWalks& walks) {
    TrustedIds trusted{0, ::geteuid()};
    try {
        try {
            return trusted_data_path_for(path, trusted, walks.dirs.get());
        } catch (const Refused&) {
            trusted.gids = root_group_if_trusted(trusted);
            if (trusted.gids.empty()) throw;
            return trusted_data_path_for(path, trusted, walks.dirs.get());
        }
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
