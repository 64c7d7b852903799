#include "process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proc_stat.hpp"
#include "sys.hpp"

namespace pyjail {

namespace {

// The children of every thread of `pid` (a child belongs to the thread that forked it).
void add_children(pid_t pid, std::vector<std::pair<pid_t, pid_t>>& todo) {
    UniqueFd dir(::open(fmt::format("/proc/{}/task", pid).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return;
    DIR* d = ::fdopendir(dir.get());
    if (d == nullptr) return;
    (void)dir.release();
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        std::string text;
        if (!try_read_file(fmt::format("/proc/{}/task/{}/children", pid, e->d_name), text)) continue;
        for (pid_t child : parse_child_pids(text, kMaxSummedProcesses)) todo.emplace_back(child, pid);
        if (todo.size() > kMaxSummedProcesses) break;
    }
    ::closedir(d);
}

}  // namespace

std::optional<double> process_tree_cpu_s(pid_t root) {
    static const long ticks_per_s = ::sysconf(_SC_CLK_TCK);
    if (ticks_per_s <= 0) return std::nullopt;
    std::vector<std::pair<pid_t, pid_t>> todo{{root, 0}};  // (pid, the parent that listed it)
    std::uint64_t ticks = 0;
    std::size_t read = 0;
    while (!todo.empty() && read < kMaxSummedProcesses) {
        auto [pid, parent] = todo.back();
        todo.pop_back();
        std::string text;
        std::optional<ProcStat> st;
        if (try_read_file(fmt::format("/proc/{}/stat", pid), text)) st = parse_proc_stat(text);
        if (!st || !st->has_times) {
            if (pid == root) return std::nullopt;
            continue;  // ended since its parent listed it: its time is in the parent's cutime
        }
        // A pid reused since its parent listed it names another user's process: not counted.
        if (parent != 0 && st->ppid != parent) continue;
        ++read;
        ticks += ticks_with_reaped(*st);
        add_children(pid, todo);
    }
    return static_cast<double>(ticks) / static_cast<double>(ticks_per_s);
}

}  // namespace pyjail
