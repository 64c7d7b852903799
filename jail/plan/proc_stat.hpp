// What /proc says of a process, parsed: /proc/PID/stat (its parent, its name, the CPU time it
// and its reaped children used) and /proc/PID/task/TID/children (its children's pids). Pure:
// the files are read by the callers (host/process_tree.cpp, supervisor/notice_stamp.cpp,
// template/serve.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pyjail {

// From /proc/PID/stat: the process's parent and its command name (comm), and, when the line
// goes that far, its CPU time in clock ticks (utime, stime: its own threads'; cutime, cstime:
// its children's that it has waited for). Nothing when the text does not parse.
struct ProcStat {
    long ppid = 0;
    std::string comm;
    bool has_times = false;
    std::uint64_t utime = 0;
    std::uint64_t stime = 0;
    std::uint64_t cutime = 0;
    std::uint64_t cstime = 0;
};
std::optional<ProcStat> parse_proc_stat(const std::string& text);

// The CPU time a ProcStat counts for its process and the children it reaped, in ticks.
inline std::uint64_t ticks_with_reaped(const ProcStat& st) {
    return st.utime + st.stime + st.cutime + st.cstime;
}

// The pids of /proc/PID/task/TID/children ("12 13 "): positive numbers only, at most `max`.
std::vector<pid_t> parse_child_pids(const std::string& text, std::size_t max);

}  // namespace pyjail
