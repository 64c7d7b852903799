#include "idmap.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

#include "error.hpp"
#include "policy.hpp"

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

std::optional<std::pair<uid_t, gid_t>> find_passwd_entry(const std::string& passwd_text,
                                                         const std::string& name,
                                                         std::optional<uid_t> uid) {
    std::string_view text(passwd_text);
    while (!text.empty()) {
        std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        // name:password:uid:gid:gecos:home:shell
        std::string_view field[4];
        std::size_t n = 0;
        for (std::size_t from = 0; n < 4; ++n) {
            std::size_t colon = line.find(':', from);
            if (colon == std::string_view::npos) break;
            field[n] = line.substr(from, colon - from);
            from = colon + 1;
        }
        auto u = n == 4 ? parse_id(field[2]) : std::nullopt;
        auto g = n == 4 ? parse_id(field[3]) : std::nullopt;
        if (!u || !g) continue;
        if (uid ? *u == *uid : field[0] == name) return std::make_pair(*u, *g);
    }
    return std::nullopt;
}

}  // namespace pyjail
