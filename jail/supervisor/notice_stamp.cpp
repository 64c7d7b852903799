// The daily fallback notice's stamp (notice.hpp): read and written by the supervisor, with its
// own rights (root's, when root runs pyjail), in the first of the invoking user's state
// directories (state_dir_plans) where it can be.
//
// The directories are named by the user's environment, but nothing below a base is followed
// through a symbolic link, and every directory on the way and the stamp must be writable by
// nobody but the user (or root): a link planted there by someone else must not make pyjail --
// perhaps root -- create or overwrite a file elsewhere. /tmp is shared with every user: there
// the name pyjail-state-UID may have been made first by someone else, made open to others,
// or be a link; each of those is refused (the next place, or none), never repaired. Whatever
// fails, the notice is said and the run goes on: a stamp is a convenience, never a reason to
// fail.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <utility>

#include "error.hpp"
#include "hostopen.hpp"
#include "notice.hpp"
#include "notice_stamp.hpp"
#include "proc_stat.hpp"
#include "sys.hpp"
#include "trust.hpp"

namespace pyjail::supervisor {

namespace {

// Root and whoever runs pyjail.
TrustedIds stamp_trusted_ids() { return {0, static_cast<std::uint32_t>(::geteuid())}; }

// What fstat says of `fd`, or nothing.
std::optional<NodeFacts> stamp_facts_of(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::nullopt;
    return NodeFacts{st.st_uid, st.st_gid, st.st_mode, static_cast<std::uint64_t>(st.st_nlink)};
}

// Writable by nobody but root and us, and of the expected type.
bool ours(int fd, bool directory) {
    auto f = stamp_facts_of(fd);
    if (!f) return false;
    if (directory ? !S_ISDIR(f->mode) : !S_ISREG(f->mode)) return false;
    // A second hard link could be another user's file that we would rewrite.
    if (!directory && f->nlink != 1) return false;
    return who_else_writes(*f, stamp_trusted_ids()).empty();
}

// Whether pyjail may make or open its directory in `base` (attack: root making one in another
// user's directory, which that user could then swap for a link). Yes when nobody else writes
// it; for a shared base (/tmp), also when it is sticky and root's or ours: nobody else can
// then rename or remove what we make there, only take the name first, which ours() refuses.
bool may_hold_ours(int base, bool shared) {
    auto f = stamp_facts_of(base);
    if (!f || !S_ISDIR(f->mode)) return false;
    if (who_else_writes(*f, stamp_trusted_ids()).empty()) return true;
    return shared && (f->mode & S_ISVTX) != 0 && is_trusted(f->uid, stamp_trusted_ids());
}

// Whether root may use `plan`'s place. Root with another user's environment (sudo -E, su
// without -) must not follow that user's link to a directory of root's own and make pyjail's
// there (/etc/pyjail, a cgroup in /sys/fs/cgroup): the way is walked as pyjail's data are
// (trusted_data_path: no directory on it, nor link, that another user could have made or
// changed), so the open below resolves what nobody else can change. The way is the base, which
// must exist; for a shared base (/tmp, which others write, sticky) the way goes on to pyjail's
// own directory in it, whose name another user may have taken. For any other user than root,
// their environment's links lead only where they could write themselves.
bool root_may_use(const StateDirPlan& plan) {
    if (::geteuid() != 0) return true;
    std::string way = plan.base;
    if (plan.shared && !plan.below.empty()) way += "/" + plan.below.front();
    try {
        (void)trusted_data_path(way);
        return true;
    } catch (const JailError&) {
        return false;
    }
}

// The directory of `plan`, created as needed, or an invalid fd.
UniqueFd open_state_dir(const StateDirPlan& plan) {
    if (!root_may_use(plan)) return {};
    UniqueFd dir(::open(plan.base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir || !may_hold_ours(dir.get(), plan.shared)) return {};
    for (const auto& name : plan.below) {
        // 0700: nobody else has business in it. O_NOFOLLOW: a link in its place is refused.
        // What mkdirat found (EEXIST) may be anyone's: only the checks on what was opened
        // count, on the descriptor, so a swap after them changes nothing we write.
        if (::mkdirat(dir.get(), name.c_str(), 0700) != 0 && errno != EEXIST) return {};
        UniqueFd next(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next || !ours(next.get(), true)) return {};
        dir = std::move(next);
    }
    return dir;
}

// The stamp `name`, opened read-write in the first of the user's state directories where it
// can be, or an invalid fd.
UniqueFd open_stamp(const char* name) {
    StateDirEnv env{std::getenv("XDG_STATE_HOME"), std::getenv("HOME"), std::getenv("XDG_RUNTIME_DIR"),
                    std::getenv("TMPDIR")};
    for (const auto& plan : state_dir_plans(env, static_cast<std::uint32_t>(::geteuid()))) {
        UniqueFd dir = open_state_dir(plan);
        if (!dir) continue;
        // O_NOFOLLOW: not through a link; O_NONBLOCK: a FIFO in its place cannot hang us.
        UniqueFd fd(::openat(dir.get(), name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
                             0600));
        if (fd && ours(fd.get(), false)) return fd;
    }
    return {};
}

}  // namespace

bool notice_wanted(NoticeMode mode, const std::string& reason, const char* stamp_name) {
    if (mode == NoticeMode::Off) return false;
    if (mode == NoticeMode::Always) return true;
    UniqueFd fd = open_stamp(stamp_name);
    if (!fd) return true;
    const std::string day = utc_day(::time(nullptr));
    // At most kMaxStampBytes, whatever the file holds: a huge or hostile stamp costs no more.
    char buf[kMaxStampBytes];
    ssize_t n = ::pread(fd.get(), buf, sizeof buf, 0);
    std::string stamp = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    if (!daily_notice_due(stamp, day, reason)) return false;
    // Said now; a failure to record it only means it is said again next time.
    std::string text = notice_stamp_text(stamp, day, reason);
    if (::ftruncate(fd.get(), 0) == 0) (void)!::pwrite(fd.get(), text.data(), text.size(), 0);
    return true;
}

namespace {

bool under_cron() {
    long pid = static_cast<long>(::getppid());
    for (int i = 0; i < kMaxAncestors && pid > 1; ++i) {
        std::string text;
        if (!try_read_file(fmt::format("/proc/{}/stat", pid), text)) return false;
        auto st = parse_proc_stat(text);
        if (!st) return false;
        if (is_cron_daemon(st->comm)) return true;
        pid = st->ppid;
    }
    return false;
}

}  // namespace

std::optional<NoticeCadence> env_notice_when() {
    if (under_cron()) return NoticeCadence::EveryRun;
    if (::isatty(STDERR_FILENO) == 1 && notice_wanted(NoticeMode::Daily, "environment", kEnvNoticeStampName))
        return NoticeCadence::Daily;
    return std::nullopt;
}

}  // namespace pyjail::supervisor
