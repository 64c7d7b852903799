#include "notice.hpp"

#include <fmt/format.h>

namespace pyjail {

std::optional<StateDirPlan> state_dir_plan(const char* xdg_state_home, const char* home) {
    // The XDG base directory rules: a relative $XDG_STATE_HOME is invalid and ignored.
    if (xdg_state_home != nullptr && xdg_state_home[0] == '/')
        return StateDirPlan{xdg_state_home, {"pyjail"}};
    if (home != nullptr && home[0] == '/') return StateDirPlan{home, {".local", "state", "pyjail"}};
    return std::nullopt;
}

std::string utc_day(std::time_t t) {
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    return fmt::format("{:04}-{:02}-{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

std::string notice_stamp_text(const std::string& day, const std::string& reason) {
    // One line: a reason holds no newline (it is printed as one line too).
    std::string r = reason;
    for (char& c : r)
        if (c == '\n') c = ' ';
    return day + " " + r + "\n";
}

bool daily_notice_due(const std::string& stamp, const std::string& day, const std::string& reason) {
    return stamp != notice_stamp_text(day, reason);
}

}  // namespace pyjail
