// The supervisor's side of a jail's host identity (hostid.hpp plans it): the lock that makes
// one id of a range this jail's alone, the maps written for it, and (root) the idmapped
// clones of the host binds.
#pragma once

#include <sys/types.h>

#include <vector>

#include "hostid.hpp"
#include "mountplan.hpp"
#include "sys.hpp"

namespace pyjail::supervisor {

class HostIdLease {
public:
    // Takes a free id of the plan's candidates: a flock on a file named by the id, held while
    // this lease (and the jail's pid 1, which inherits it) lives and dropped by the kernel
    // however pyjail ends. Fixed ids (HostUser, Invoker) take no lock. Throws JailError.
    explicit HostIdLease(const HostIdPlan& plan);
    HostIdLease(const HostIdLease&) = delete;
    HostIdLease& operator=(const HostIdLease&) = delete;

    const IdMaps& maps() const { return maps_; }

    // Whether the supervisor writes the maps (root; a user's subordinate ids, through the
    // setuid helpers) rather than the jail's pid 1 (a user's own ids).
    bool supervisor_writes_maps() const;

    // Writes the jail's uid and gid maps. Throws JailError.
    void write_maps(pid_t jail_pid) const;

    // When root runs pyjail and host binds are idmapped: a detached clone of each bind
    // source, idmapped so the jail's id writes and reads as the files' owner (the plan's
    // files_uid), by mount plan source slot (none: -1). The sources are opened with the
    // files owner's rights. Throws JailError.
    std::vector<UniqueFd> idmapped_sources(const MountPlan& mounts) const;

private:
    const HostIdPlan& plan_;
    IdMaps maps_;
    UniqueFd lock_, lock_also_;
};

}  // namespace pyjail::supervisor
