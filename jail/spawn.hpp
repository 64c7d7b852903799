// The parent side of a run, from a validated Policy to the program's exit status.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cgroup.hpp"
#include "command.hpp"
#include "idmap.hpp"
#include "mountplan.hpp"
#include "paths.hpp"
#include "limits.hpp"
#include "policy.hpp"
#include "report.hpp"
#include "seccomp.hpp"
#include "sys.hpp"

namespace pyjail {

// Everything a run needs, decided and opened before any process exists.
struct Prepared {
    Policy policy;
    std::string rootfs;
    UniqueFd rootfs_fd;
    ResolvedCommand command;
    std::vector<std::string> argv;  // as the program gets it (script path made in-jail)
    std::vector<std::string> env;
    MountPlan mounts;
    IdMaps ids;
    std::optional<SeccompSet> seccomp;        // none: --seccomp off
    std::vector<sock_filter> seccomp_filter;  // ready before any process exists
    std::string seccomp_compiled_at;          // the build-time file it came from, or ""
    CgroupSite cgroup;              // where the jail's cgroup goes, or why it cannot
    LimitPlan limits;               // every limit and the mechanism enforcing it
    std::vector<int> content_fds;   // per mounts.sources: fd of a copied-in source, else -1
    std::vector<UniqueFd> owned_fds;
};

// Steps 1-3 of a run: gather facts, plan, open what the child needs. Throws JailError.
Prepared prepare_from_parent(Policy policy, const DataDirs& dirs);

// Steps 4-6: create the jail, release it, supervise it. Returns pyjail's exit status and
// fills `facts` for the report.
int spawn_and_supervise_from_parent(Prepared& prepared, char** host_argv, RunFacts& facts);

// Where the result report goes (--report FILE, --report-fd N), opened before anything runs
// so that an unwritable report fails the run up front.
class ReportTarget {
public:
    // `path` ("" for none) or `fd` (-1 for none).
    static ReportTarget open_from_parent(const std::string& path, int fd);
    bool wanted() const { return fd_ >= 0; }
    void write(const RunFacts& facts) const;  // failures are reported on stderr

private:
    UniqueFd owned_;
    int fd_ = -1;
    std::string name_;
};

}  // namespace pyjail
