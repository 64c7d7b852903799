#include <doctest/doctest.h>

#include "error.hpp"
#include "idmap.hpp"

using namespace pyjail;

TEST_CASE("an unprivileged invoker is the jail user") {
    IdMaps m = plan_idmaps(1001, 1002, 0, 0);
    CHECK(m.uid_map == "1000 1001 1\n");
    CHECK(m.gid_map == "1000 1002 1\n");
    CHECK(m.host_uid == 1001);
}

TEST_CASE("root's jail runs as the unprivileged host user, never as root") {
    IdMaps m = plan_idmaps(0, 0, 65534, 65534);
    CHECK(m.uid_map == "1000 65534 1\n");
    CHECK(m.gid_map == "1000 65534 1\n");
    CHECK_THROWS_AS(plan_idmaps(0, 0, 0, 65534), JailError);
    CHECK_THROWS_AS(plan_idmaps(0, 0, 65534, 0), JailError);
    // Host uid 0 is never in the maps.
    CHECK(m.uid_map.find(" 0 ") == std::string::npos);
}
