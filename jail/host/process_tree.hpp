// The CPU time a jail's processes have used, summed from /proc: --cpu-time where no cgroup
// counts it (the rlimit fallback). RLIMIT_CPU bounds each process alone, so without this sum
// a jail that forks N workers could use N times its --cpu-time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>

namespace pyjail {

// At most this many processes are read per sum: more than any pids limit a shipped profile
// sets. Beyond it the sum is short, and RLIMIT_CPU still bounds each process.
inline constexpr std::size_t kMaxSummedProcesses = 16384;

// Seconds of CPU (user and system) used by `root` (a host pid) and every process below it,
// those that have ended and been reaped included; nothing once `root` is gone.
std::optional<double> process_tree_cpu_s(pid_t root);

}  // namespace pyjail
