// cgroup v2 without root: find a cgroup delegated to the invoking user, and give each run a
// leaf of its own there, born with the jail (CLONE_INTO_CGROUP), killed and removed after it.
//
// The rules of delegation (see systemd's CGROUP_DELEGATION.md) shape this: a cgroup with
// children holds no processes, so before enabling controllers for its children the processes
// of the starting cgroup move into a leaf ("pyjail-supervisor"); pyjail never writes outside
// the delegated cgroup; every run's leaf is named after its supervisor's pid, so a leaf left
// by a supervisor that was SIGKILLed is recognised and removed by the next run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sys.hpp"

namespace pyjail {

// Where the leaves go, or why cgroup v2 cannot be used here.
struct CgroupSite {
    bool ok = false;
    std::string base;     // absolute directory of the delegated cgroup
    std::string mount;    // where the cgroup2 hierarchy is mounted
    std::string why_not;  // one line: what is missing, and how to get it
    bool controllers_on_v1 = false;  // the host binds them to cgroup v1: no delegation helps
    // Not ok only because the cgroup is not delegated (the hierarchy has the controllers): a
    // delegated systemd scope would do (systemd_scope.hpp).
    bool not_delegated = false;
};

namespace setup {

// `wanted`: controllers the limits need ("memory", "pids", "cpu"). `parent`: --cgroup-parent.
// `invoker_uid`: who runs pyjail (root is told how to delegate a systemd unit's cgroup).
CgroupSite find_cgroup_site(const std::vector<std::string>& wanted, const std::string& parent,
                            uid_t invoker_uid);

// The cgroup directory pyjail runs in (the cgroup2 mount and /proc/self/cgroup's path), or ""
// without cgroup v2.
std::string own_cgroup_dir();

}  // namespace setup

struct CgroupStats {
    std::optional<std::uint64_t> memory_peak;
    std::optional<double> user_s, system_s, usage_s;
    std::uint64_t oom_kills = 0;
    std::uint64_t pids_limit_hits = 0;
};

namespace supervisor {

// One run's leaf. Created with its limit files written; killed and removed when destroyed.
class CgroupLeaf {
public:
    // Throws JailError naming the file that could not be written.
    CgroupLeaf(const CgroupSite& site,
               const std::vector<std::pair<std::string, std::string>>& files);
    // Another process's leaf (a run's, made by `pyjail serve`): read and killed through its
    // path, never removed by this handle.
    struct Observed {};
    CgroupLeaf(std::string path, std::string mount, Observed) : path_(std::move(path)), mount_(std::move(mount)), owner_(false) {}
    CgroupLeaf(const CgroupLeaf&) = delete;
    CgroupLeaf& operator=(const CgroupLeaf&) = delete;
    ~CgroupLeaf();

    int dir_fd() const { return dir_.get(); }  // for clone3's CLONE_INTO_CGROUP
    const std::string& mount() const { return mount_; }
    const std::string& path() const { return path_; }
    std::string relative_path() const;  // as /proc/PID/cgroup would name it

    // Every process in the leaf, at once (cgroup.kill; freeze and kill before Linux 5.14).
    void kill_all() noexcept;
    CgroupStats stats() const;
    // CPU seconds used so far by the whole jail.
    std::optional<double> cpu_usage_s() const;

private:
    std::string path_;
    std::string mount_;
    UniqueFd dir_;
    bool owner_ = true;
};

}  // namespace supervisor

}  // namespace pyjail
