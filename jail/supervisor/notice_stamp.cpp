// The daily fallback notice's stamp (notice.hpp): read and written by the supervisor, with its
// own rights (root's, when root runs pyjail), in the invoking user's state directory.
//
// The directory is the user's, named by the user's environment, but nothing below its base is
// followed through a symbolic link, and every directory on the way and the stamp must be
// writable by nobody but the user (or root): a link planted there by someone else must not
// make pyjail -- perhaps root -- create or overwrite a file elsewhere. Whatever fails, the
// notice is said and the run goes on: a stamp is a convenience, never a reason to fail.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <utility>

#include "notice.hpp"
#include "notice_stamp.hpp"
#include "sys.hpp"
#include "trust.hpp"

namespace pyjail::supervisor {

namespace {

// Writable by nobody but root and us, and of the expected type.
bool ours(int fd, bool directory) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return false;
    if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) return false;
    // A second hard link could be another user's file that we would rewrite.
    if (!directory && st.st_nlink != 1) return false;
    NodeFacts f{st.st_uid, st.st_gid, st.st_mode, static_cast<std::uint64_t>(st.st_nlink)};
    return who_else_writes(f, {0, static_cast<std::uint32_t>(::geteuid())}).empty();
}

// The state directory, created as needed, or an invalid fd.
UniqueFd open_state_dir() {
    auto plan = state_dir_plan(std::getenv("XDG_STATE_HOME"), std::getenv("HOME"));
    if (!plan) return {};
    UniqueFd dir(::open(plan->base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir || !ours(dir.get(), true)) return {};
    for (const auto& name : plan->below) {
        // 0700: nobody else has business in it. O_NOFOLLOW: a link in its place is refused.
        if (::mkdirat(dir.get(), name.c_str(), 0700) != 0 && errno != EEXIST) return {};
        UniqueFd next(::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next || !ours(next.get(), true)) return {};
        dir = std::move(next);
    }
    return dir;
}

}  // namespace

bool notice_wanted(NoticeMode mode, const std::string& reason, const char* stamp_name) {
    if (mode == NoticeMode::Off) return false;
    if (mode == NoticeMode::Always) return true;
    UniqueFd dir = open_state_dir();
    if (!dir) return true;
    // O_NOFOLLOW: not through a link; O_NONBLOCK: a FIFO in its place cannot hang us.
    UniqueFd fd(::openat(dir.get(), stamp_name,
                         O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600));
    if (!fd || !ours(fd.get(), false)) return true;
    const std::string day = utc_day(::time(nullptr));
    char buf[4096];
    ssize_t n = ::pread(fd.get(), buf, sizeof buf, 0);
    std::string stamp = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    if (!daily_notice_due(stamp, day, reason)) return false;
    // Said now; a failure to record it only means it is said again next time.
    std::string text = notice_stamp_text(day, reason);
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

bool env_notice_wanted() {
    if (under_cron()) return true;
    if (::isatty(STDERR_FILENO) == 1) return notice_wanted(NoticeMode::Daily, "environment", kEnvNoticeStampName);
    return false;
}

}  // namespace pyjail::supervisor
