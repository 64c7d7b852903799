// uid/gid maps of the jail's user namespace. The jailed program always runs as the jail user
// (uid/gid 1000 inside, named in the rootfs's /etc/passwd). Outside, that is the invoking user
// -- or, when pyjail runs as root, an unprivileged host user (nobody by default): root's jail
// must never be host root, so host uid 0 is never mapped at all. Which host ids a run
// actually takes (one of its own, where it can) is hostid.hpp's.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>

namespace pyjail {

inline constexpr uid_t kJailUid = 1000;
inline constexpr gid_t kJailGid = 1000;

struct IdMaps {
    std::string uid_map;  // text for /proc/PID/uid_map
    std::string gid_map;
    uid_t host_uid = 0;   // what the jail user is on the host
    gid_t host_gid = 0;
};

// `invoker_uid/gid`: pyjail's effective ids. `root_maps_to_*`: the host user for root's jails.
// Throws JailError if the result would map anything to host root.
IdMaps plan_idmaps(uid_t invoker_uid, gid_t invoker_gid, uid_t root_maps_to_uid,
                   gid_t root_maps_to_gid);

// (uid, gid) of the user named `name` -- or, given `uid`, of that uid -- in the text of an
// /etc/passwd file. Malformed lines are skipped.
std::optional<std::pair<uid_t, gid_t>> find_passwd_entry(const std::string& passwd_text,
                                                         const std::string& name,
                                                         std::optional<uid_t> uid);

}  // namespace pyjail
