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

TEST_CASE("--host-user names are found in /etc/passwd") {
    std::string passwd = "root:x:0:0:root:/root:/bin/bash\n"
                         "broken line\n"
                         "odd:x:notanumber:1::/:/bin/false\n"
                         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
                         "builder:x:1001:1002::/home/builder:/bin/sh";  // no final newline
    using P = std::pair<uid_t, gid_t>;
    CHECK(find_passwd_entry(passwd, "nobody", std::nullopt) == P{65534, 65534});
    CHECK(find_passwd_entry(passwd, "builder", std::nullopt) == P{1001, 1002});
    CHECK(find_passwd_entry(passwd, "", uid_t{1001}) == P{1001, 1002});
    CHECK_FALSE(find_passwd_entry(passwd, "odd", std::nullopt));
    CHECK_FALSE(find_passwd_entry(passwd, "broken line", std::nullopt));
    CHECK_FALSE(find_passwd_entry(passwd, "nobod", std::nullopt));
    CHECK_FALSE(find_passwd_entry("", "root", std::nullopt));
}
