// The rlimit fallback notice ("pyjail: no cgroup v2 for the limits (...)"): on a host without a
// delegated cgroup v2 every run would say it, and a cron job would mail it every time. By
// default (--cgroup-notice daily) it is said once a day per user and per reason: a stamp in
// the user's state directory (or, where a job has none, a directory of the user's own in the
// runtime directory or /tmp) records the reasons said today, so a new reason (the host
// changed) is said at once, and each of two reasons once. Errors and time-limit messages are never
// affected; the report always names each limit's mechanism.
//
// Pure: where the stamp may live, in which order, and whether the notice is due. The stamp is
// read and written by notice_stamp.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "policy.hpp"

namespace pyjail {

// A directory the stamps may live in: an existing directory `base` (named by the user's
// environment, followed as it is) and the directories below it that pyjail creates (0700) and
// never follows as links.
struct StateDirPlan {
    std::string base;
    std::vector<std::string> below;
    // `base` is a temporary directory others may add entries to (/tmp): it is used only when
    // it is sticky and root's or the user's, so that nobody else can rename or remove the
    // directory pyjail made there; that directory (the one name in `below`) must still be the
    // user's own, writable by nobody else.
    bool shared = false;
};

// $XDG_STATE_HOME/pyjail, else $HOME/.local/state/pyjail; nothing when neither is an absolute
// path.
std::optional<StateDirPlan> state_dir_plan(const char* xdg_state_home, const char* home);

// The environment state_dir_plans reads (null: unset).
struct StateDirEnv {
    const char* xdg_state_home = nullptr;
    const char* home = nullptr;
    const char* xdg_runtime_dir = nullptr;
    const char* tmpdir = nullptr;
};

// Where the stamps may live, in the order they are tried (the first place where a stamp can be
// opened is used): the state directory (state_dir_plan); $XDG_RUNTIME_DIR/pyjail; and last
// pyjail-state-EUID in $TMPDIR, or in /tmp when that is not an absolute path. Never empty, so
// a cron job whose HOME is /nonexistent is quiet after its first run of the day too.
std::vector<StateDirPlan> state_dir_plans(const StateDirEnv& env, std::uint32_t euid);

constexpr const char* kNoticeStampName = "cgroup-notice";
constexpr const char* kEnvNoticeStampName = "env-notice";

// Whether `comm` is a cron daemon's (cron, crond, anacron, fcron).
bool is_cron_daemon(const std::string& comm);

// How many ancestors are looked at for a cron daemon (a crontab runs a shell that runs a
// script that runs pyjail, perhaps through sudo or setpriv).
inline constexpr int kMaxAncestors = 16;

// What ends the fallback line under `mode`: how often it is said and what silences it alone
// (--quiet silences every line of pyjail's but errors), "" where the user chose every run.
std::string cgroup_notice_tail(NoticeMode mode);

// "2026-12-01" (UTC).
std::string utc_day(std::time_t t);

// The stamp holds one line "DAY REASON" per reason said on that day, so that runs taking turns
// with two reasons (--cgroup off and a default run) each hear theirs once a day, not on every
// run. Only the newest day's lines are kept, at most kMaxStampReasons of them, in at most
// kMaxStampBytes: the stamp is read through a buffer of that size, whatever its file holds.
inline constexpr std::size_t kMaxStampBytes = 4096;
inline constexpr std::size_t kMaxStampReasons = 16;

// What the stamp holds once the notice for `reason` was said on `day`, given what it held
// (`stamp`, "" when missing; any text: a line that does not parse is dropped).
std::string notice_stamp_text(const std::string& stamp, const std::string& day, const std::string& reason);

// Whether a daily notice is due: no line of `stamp` (any text, "" when missing) says `reason`
// was said on `day`.
bool daily_notice_due(const std::string& stamp, const std::string& day, const std::string& reason);

}  // namespace pyjail
