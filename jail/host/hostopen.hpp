// Opening host paths for a jail. The supervisor may be root (a cron job, a service) while the
// jail is --host-user on the host; every host file the supervisor itself opens on the jail's
// behalf goes through here, so that another user's planted symlink, FIFO or hard link cannot
// make root read or write a file for the jail:
//   - the script the jail runs: opened with the host user's rights; root's own file only on a
//     path nobody else could have planted (trust.hpp);
//   - the report: no symlink planted by others on the way, only a regular file, replaced whole
//     by a new one when the run is over;
//   - the audit log: the same rules, appended to and never truncated;
//   - neither where the jail could write (writable_place.hpp): inside --workdir or a writable
//     --bind, or on a way that goes through one;
//   - pyjail's own data (profiles, rootfs, compiled filters): only on a path that only root
//     and the invoking user can change.
// Bind sources and --workdir are not opened here: the jail's pid 1 opens them after it has
// become the jail user (child.cpp, open_sources), so it reaches only what that user can.
#pragma once

#include <memory>

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "mountplan.hpp"
#include "policy.hpp"
#include "sys.hpp"
#include "writable_place.hpp"

namespace pyjail {

// The host ids a jail started by root has (--host-user).
struct HostUserIds {
    uid_t uid = 0;
    gid_t gid = 0;
};

namespace setup {

// What the jail's host user can do with a bind's source, asked as that user: `host_user` when
// root runs pyjail, else the invoking user, whose rights a user's jail with a bind has
// (hostid.hpp). Each 0, or the errno.
struct HostUserReach {
    int open_err = 0;   // opening it as the jail's pid 1 will, to bind it (O_PATH: every
                        // directory above it searchable)
    int enter_err = 0;  // a directory: searching it, which O_PATH does not ask (a 0700 one
                        // opens, yet the jail could use nothing in it)
    int write_err = 0;  // writing it, asked only for a writable bind: the kernel's answer, which
                        // counts ACLs and read-only mounts as the mode bits alone do not
};
HostUserReach reach_as_host_user(const std::string& path, const std::optional<HostUserIds>& host_user,
                                 bool writable);

// After the jail is gone: removes what its pid 1 made in host directories as mount points
// (MountPlan::host_mount_points), as the jail's host user (`host_user` when root runs pyjail),
// each only while it is an empty directory or an empty regular file of one link, and never
// through a symbolic link. Anything else -- what the program put there, a directory of the
// user's -- stays. Best effort: nothing here fails the run.
void remove_host_mount_points(const std::vector<HostMountPoint>& points,
                              const std::optional<HostUserIds>& host_user) noexcept;

// The script the jail runs, open for reading (O_NONBLOCK: a FIFO cannot hang us), a regular
// file. `host_user`: pyjail runs as root and the jail as this user. `shown`: the name the user
// gave. Throws JailError (step "script").
UniqueFd open_script(const std::string& path, const std::string& shown,
                     const std::optional<HostUserIds>& host_user);

// The report file (absolute path), checked before the run: no symlink on the way that another
// user could have planted, at the path nothing but a regular file pyjail may replace, and a
// directory pyjail can write. Nothing is created. Throws JailError (step "report").
void check_report(const std::string& path);

// Writes the report when the run is over: a new file in the checked directory, renamed over
// `path` (so what is found there is this file, whoever held the old one), after refusing a
// path the jail could have changed (one of `places` holds it or the way to it). Throws
// JailError (step "report").
void write_report(const std::string& path, const std::string& text,
                  const std::vector<WritablePlace>& places);

// Refuse (JailError, step "report" or "audit log") an output that one of `places` could
// reach: the check before the jail starts.
void check_report_place(const std::string& path, const std::vector<WritablePlace>& places);
void check_audit_log_place(const std::string& path, const std::vector<WritablePlace>& places);

// The audit log (absolute path), open for appending (O_APPEND), by the same rules as the
// report: created 0600 when missing, never truncated; and not where one of `places` could
// reach it. Throws JailError (step "audit log").
UniqueFd open_audit_log(const std::string& path, const std::vector<WritablePlace>& places);

// The host places a jail with these binds can write (the writable ones: --bind, --workdir),
// as the jail's pid 1 will open them. Throws JailError (step "bind").
std::vector<WritablePlace> writable_places(const std::vector<BindSpec>& binds);

}  // namespace setup

// The physical path of a directory of pyjail's own data, after checking that only root and
// the invoking user can change it or anything on the way to it. A missing one is returned as
// it is (what uses it says it is missing). Throws JailError (step "data").
std::string trusted_data_path(const std::string& path);

// Directories trusted_data_path has checked on the way to a data path, each held open: the
// next call with the same TrustedWalks walks on from the deepest one its path lies under,
// rather than from / (find_data_dirs checks four paths under one tree, 8 us per directory
// opened and checked). Only directories checked under the same trusted ids are reused; they
// are closed with it, so none outlives the lookups (no descriptor of the host's tree reaches
// a jail's pid 1).
class TrustedWalks {
  public:
    TrustedWalks();
    ~TrustedWalks();
    TrustedWalks(const TrustedWalks&) = delete;
    TrustedWalks& operator=(const TrustedWalks&) = delete;
    struct Dirs;
    std::unique_ptr<Dirs> dirs;
};
std::string trusted_data_path(const std::string& path, TrustedWalks& walks);

// The same check for a data file already open as `path`. Throws JailError (step "data").
void require_trusted_data_file(int fd, const std::string& path);

}  // namespace pyjail
