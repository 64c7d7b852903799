#include "idmap.hpp"

#include <fmt/format.h>

#include "error.hpp"

namespace pyjail {

IdMaps plan_idmaps(uid_t invoker_uid, gid_t invoker_gid, uid_t root_maps_to_uid,
                   gid_t root_maps_to_gid) {
    IdMaps m;
    bool root = invoker_uid == 0;
    m.host_uid = root ? root_maps_to_uid : invoker_uid;
    // A root invoker's gid is replaced too: gid 0 on the host opens root-group files.
    m.host_gid = root ? root_maps_to_gid : invoker_gid;
    if (m.host_uid == 0 || (root && m.host_gid == 0))
        throw JailError("idmap", "the jail user would be host root (uid or gid 0)", 0,
                        "set --host-user to an unprivileged user such as nobody");
    // One id each: nothing else of the host has a name inside, so files of other users show
    // as nobody and cannot be chowned to.
    m.uid_map = fmt::format("{} {} 1\n", kJailUid, m.host_uid);
    m.gid_map = fmt::format("{} {} 1\n", kJailGid, m.host_gid);
    return m;
}

}  // namespace pyjail
