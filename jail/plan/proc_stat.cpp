#include "proc_stat.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace pyjail {

std::optional<ProcStat> parse_proc_stat(const std::string& text) {
    // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so it ends at the
    // last ')'.
    auto open = text.find('(');
    auto close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
    ProcStat st;
    st.comm = text.substr(open + 1, close - open - 1);
    char state = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &st.ppid) != 2) return std::nullopt;
    // Fields 14-17 (proc(5)): utime, stime, cutime, cstime. The children's are signed in the
    // kernel's format; a negative one is not a time.
    unsigned long long u = 0, s = 0;
    long long cu = 0, cs = 0;
    if (std::sscanf(text.c_str() + close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
                    &u, &s, &cu, &cs) == 4 &&
        cu >= 0 && cs >= 0) {
        st.has_times = true;
        st.utime = u;
        st.stime = s;
        st.cutime = static_cast<std::uint64_t>(cu);
        st.cstime = static_cast<std::uint64_t>(cs);
    }
    return st;
}

std::vector<pid_t> parse_child_pids(const std::string& text, std::size_t max) {
    std::vector<pid_t> pids;
    const char* p = text.c_str();
    while (*p != '\0' && pids.size() < max) {
        char* end = nullptr;
        errno = 0;
        long v = std::strtol(p, &end, 10);
        if (end == p) break;  // not a number: the rest is not a list of pids
        if (errno == 0 && v > 0 && v <= 0x7fffffff) pids.push_back(static_cast<pid_t>(v));
        p = end;
    }
    return pids;
}

}  // namespace pyjail
