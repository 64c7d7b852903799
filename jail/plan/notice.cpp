#include "notice.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <utility>

#include "utc_time.hpp"

namespace pyjail {

std::optional<StateDirPlan> state_dir_plan(const char* xdg_state_home, const char* home) {
    // The XDG base directory rules: a relative $XDG_STATE_HOME is invalid and ignored.
    if (xdg_state_home != nullptr && xdg_state_home[0] == '/')
        return StateDirPlan{xdg_state_home, {"pyjail"}};
    if (home != nullptr && home[0] == '/') return StateDirPlan{home, {".local", "state", "pyjail"}};
    return std::nullopt;
}

std::vector<StateDirPlan> state_dir_plans(const StateDirEnv& env, std::uint32_t euid) {
    std::vector<StateDirPlan> plans;
    // The state directory first: it is where XDG puts state, it outlives a login session, and
    // it is where the stamps always were.
    if (auto state = state_dir_plan(env.xdg_state_home, env.home)) plans.push_back(*state);
    // Then the runtime directory, before /tmp: logind makes it the user's own (mode 0700), so
    // no other user can take the name or deny the stamp there, as one can in a shared /tmp.
    // Its end with the session only means the notice is said once more that day.
    if (env.xdg_runtime_dir != nullptr && env.xdg_runtime_dir[0] == '/')
        plans.push_back(StateDirPlan{env.xdg_runtime_dir, {"pyjail"}});
    // Last, what a cron job without a usable home has: a directory of its own in the
    // temporary directory, $TMPDIR where the job names one (as for any program's temporary
    // files), else /tmp. Whatever it names is checked as a shared /tmp is (`shared`); the name
    // is per user, as the id locks' /tmp/pyjail-ids-UID (hostid.hpp).
    const bool tmpdir = env.tmpdir != nullptr && env.tmpdir[0] == '/';
    plans.push_back(StateDirPlan{tmpdir ? env.tmpdir : "/tmp", {fmt::format("pyjail-state-{}", euid)}, true});
    return plans;
}

std::string cgroup_notice_tail(NoticeMode mode) {
    return mode == NoticeMode::Daily ? " (said once a day; --cgroup-notice off silences it)" : "";
}

std::string utc_day(std::time_t t) {
    const UtcTime u = utc_time(t);
    return fmt::format("{:04}-{:02}-{:02}", u.year, u.month, u.day);
}

namespace {

// The stamp's lines "DAY REASON", in order; a line without its newline (cut at the read's
// limit) or that does not start with a day is not one.
std::vector<std::pair<std::string, std::string>> stamp_lines(const std::string& stamp) {
    std::vector<std::pair<std::string, std::string>> lines;
    std::size_t start = 0;
    for (std::size_t end; (end = stamp.find('\n', start)) != std::string::npos; start = end + 1) {
        std::string line = stamp.substr(start, end - start);
        const bool dated = line.size() > 11 && line[4] == '-' && line[7] == '-' && line[10] == ' ';
        if (dated) lines.emplace_back(line.substr(0, 10), line.substr(11));
    }
    return lines;
}

// One line: a reason holds no newline (it is printed as one line too).
std::string stamp_reason(const std::string& reason) {
    std::string r = reason;
    for (char& c : r)
        if (c == '\n') c = ' ';
    return r;
}

}  // namespace

std::string notice_stamp_text(const std::string& stamp, const std::string& day, const std::string& reason) {
    const std::string said = stamp_reason(reason);
    // Today's other reasons, oldest first; an older day's say nothing about today.
    std::vector<std::string> kept;
    for (const auto& [d, r] : stamp_lines(stamp))
        if (d == day && r != said) kept.push_back(d + " " + r + "\n");
    kept.push_back(day + " " + said + "\n");
    // Bounded: the oldest lines go first, the one just said stays (even alone over the bound:
    // it is then only said again, as when no stamp can be kept).
    std::size_t first = kept.size() > kMaxStampReasons ? kept.size() - kMaxStampReasons : 0;
    std::size_t bytes = 0;
    for (std::size_t i = first; i < kept.size(); ++i) bytes += kept[i].size();
    while (first + 1 < kept.size() && bytes > kMaxStampBytes) bytes -= kept[first++].size();
    std::string out;
    for (std::size_t i = first; i < kept.size(); ++i) out += kept[i];
    return out;
}

bool is_cron_daemon(const std::string& comm) {
    return comm == "cron" || comm == "crond" || comm == "anacron" || comm == "fcron";
}

bool daily_notice_due(const std::string& stamp, const std::string& day, const std::string& reason) {
    const std::string said = stamp_reason(reason);
    for (const auto& [d, r] : stamp_lines(stamp))
        if (d == day && r == said) return false;
    return true;
}

}  // namespace pyjail
