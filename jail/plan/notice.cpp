#include "notice.hpp"

#include <fmt/format.h>


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

std::string utc_day(std::time_t t) {
    const UtcTime u = utc_time(t);
    return fmt::format("{:04}-{:02}-{:02}", u.year, u.month, u.day);
}

std::string notice_stamp_text(const std::string& day, const std::string& reason) {
    // One line: a reason holds no newline (it is printed as one line too).
    std::string r = reason;
    for (char& c : r)
        if (c == '\n') c = ' ';
    return day + " " + r + "\n";
}

bool is_cron_daemon(const std::string& comm) {
    return comm == "cron" || comm == "crond" || comm == "anacron" || comm == "fcron";
}

bool daily_notice_due(const std::string& stamp, const std::string& day, const std::string& reason) {
    return stamp != notice_stamp_text(day, reason);
}

}  // namespace pyjail
