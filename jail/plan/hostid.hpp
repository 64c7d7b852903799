// Which host uid/gid a jail runs as. Per-user kernel budgets (epoll watches, pipe pages,
// pending signals, RLIMIT_NPROC, inotify, keyrings) are counted per host uid: a jail that
// shares its host uid with anything else can exhaust that thing's budgets, and an escaped
// process would hold its identity. So each jail takes a host id of its own where the kernel
// lets pyjail give it one:
//   - root: a free id of a range (--host-ids, default kDefaultRootIdRange), one per jail;
//     an explicit --host-user keeps the old, fixed identity;
//   - a user with a subordinate range in /etc/subuid and /etc/subgid: a free id of it, mapped
//     by shadow's setuid helpers newuidmap/newgidmap (pyjail itself is never setuid) -- as
//     long as the jail sees none of the user's files (a bind), which the user could not have
//     it read or write as another uid (only root may make an idmapped mount);
//   - otherwise the invoking user's own ids, and the budgets are shared (the report says so).
// Everything here is pure: the supervisor (hostid_lease.cpp) takes the lock of one candidate
// and runs the helpers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "error.hpp"
#include "idmap.hpp"

namespace pyjail {

struct IdRange {
    std::uint32_t first = 0;
    std::uint32_t count = 0;
    bool operator==(const IdRange&) const = default;
};

// Root's default: 0x70000000 and the 65535 ids after it. Above every range useradd hands
// out (users up to 60000, subordinate ranges from 100000 to 600100000), above systemd's
// dynamic users (61184-65519) and nspawn's container ranges (524288-1879048191), below its
// "foreign" range (from 2147352576) and below 2^31, which some tools read as negative.
inline constexpr IdRange kDefaultRootIdRange{1879048192u, 65536u};

// --host-ids: auto, shared, or FIRST:COUNT (root's range).
struct HostIdsSetting {
    enum class Mode { Auto, Shared, Range } mode = Mode::Auto;
    IdRange range = kDefaultRootIdRange;
};
// Throws UsageError naming `where`.
HostIdsSetting parse_host_ids(std::string_view value, const std::string& where);

enum class HostIdKind {
    OwnRange,     // root: one id of the range per jail
    Subordinate,  // a user: one id of its /etc/subuid range per jail, through newuidmap
    HostUser,     // root with --host-user (or --host-ids shared): that fixed user
    Invoker,      // the invoking user's own ids: budgets shared with the user
};
const char* host_id_kind_name(HostIdKind k);  // "range", "subordinate", "host-user", "invoker"

struct HostIdPlan {
    HostIdKind kind = HostIdKind::Invoker;
    // The candidates: the jail takes uids.first + i and gids.first + i for one free i.
    IdRange uids, gids;
    // Who owns what the jail writes through a host bind (root: --host-user, by an idmapped
    // mount when the jail's own id differs; a user: the user).
    uid_t files_uid = 0;
    gid_t files_gid = 0;
    bool idmap_binds = false;  // host binds are idmapped from files_uid/gid to the jail's id
    // When kind is HostUser or Invoker: whose budgets the jail shares, and why; "" otherwise.
    std::string shared_with, why_shared;
    // Where the lock of each candidate id lives (a file named by the uid); and, if not "", a
    // second directory where the id must be free too (user_lock_dir_also).
    std::string lock_dir;
    std::string lock_dir_also;
    // The subordinate helpers (kind Subordinate).
    std::string newuidmap, newgidmap;
};

struct HostIdFacts {
    uid_t invoker_uid = 0;
    gid_t invoker_gid = 0;
    std::string invoker_name;          // from /etc/passwd, or ""
    HostIdsSetting setting;
    bool host_user_explicit = false;   // --host-user named (profile or command line)
    uid_t host_user_uid = 65534;       // --host-user, resolved (root only)
    gid_t host_user_gid = 65534;
    std::string subuid_text, subgid_text;  // /etc/subuid and /etc/subgid, or ""
    std::string newuidmap, newgidmap;  // the helpers' paths, or "" when missing
    std::vector<std::string> host_binds;   // host paths bound into the jail (not the rootfs)
    std::string runtime_dir;           // the user's lock directory (see user_lock_dir)
    std::string runtime_dir_also;      // and the second one (user_lock_dir_also), or ""
    // pyjail's own /proc/self/uid_map and gid_map: in a container, root may map only the ids
    // its user namespace has. "" reads as the initial namespace's (every id).
    std::string own_uid_map, own_gid_map;
};

// Whether every id of `r` is mapped in a /proc/PID/uid_map text ("" is the initial user
// namespace: all are).
bool range_is_mapped(const std::string& map_text, IdRange r);

// Throws UsageError for a range a user cannot have and JailError for one that would map root.
HostIdPlan plan_host_ids(const HostIdFacts& f);

// The user's first range in the text of /etc/subuid or /etc/subgid ("name-or-uid:first:count"
// lines); a range holding id 0 or wrapping past 2^32-1 is skipped.
std::optional<IdRange> find_subordinate_range(std::string_view text, const std::string& name, uid_t uid);

// The name of `uid` in the text of /etc/passwd, or "".
std::string passwd_name(std::string_view passwd_text, uid_t uid);

// The jail's maps once candidate `index` is taken.
IdMaps host_id_maps(const HostIdPlan& plan, std::uint32_t index);

// newuidmap/newgidmap's command line: helper PID INSIDE OUTSIDE COUNT, from a one-line map.
std::vector<std::string> newidmap_argv(const std::string& helper, pid_t pid, const std::string& map);

// The map of the user namespace an idmapped bind is made with: the files' owner on disk
// (inside) is the jail's host id (outside), so what the jail writes lands as the owner's;
// every other id but the jail's maps to itself.
std::string idmapped_bind_map(std::uint32_t on_disk, std::uint32_t jail_host_id);

// Where a user's lock files go: $XDG_RUNTIME_DIR/pyjail-ids if given, else
// /tmp/pyjail-ids-UID (checked to be the user's own, mode 0700, before use).
std::string user_lock_dir(const char* xdg_runtime_dir, uid_t uid);
// Where else a run with $XDG_RUNTIME_DIR locks its id: /tmp/pyjail-ids-UID, where the same
// user's runs without one (cron, su) lock theirs, so the two never take the same id; "" when
// the first is that directory already.
std::string user_lock_dir_also(const char* xdg_runtime_dir, uid_t uid);
inline constexpr const char* kRootLockDir = "/run/pyjail/ids";

// What is at a lock directory's path (its fstat, or its lstat when it cannot be opened).
struct LockDirFacts {
    enum class Kind { Directory, Link, Other } kind = Kind::Directory;
    uid_t owner = 0;
    std::string owner_named;         // "uid 1 (daemon)"
    std::uint32_t permissions = 0;   // st_mode & 07777
};

// Why `dir` must not hold the locks of `euid`'s jails, as the error to stop the run with;
// none when it may: it is a directory of euid's that nobody else can write (a user's: that
// nobody else can open). Attack: another user who owns it (made first in a shared /tmp) or
// can write it could hold every id's lock, or plant links.
std::optional<JailError> lock_dir_refusal(const std::string& dir, const LockDirFacts& f, uid_t euid);

}  // namespace pyjail
