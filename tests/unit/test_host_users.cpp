#include <doctest/doctest.h>

#include "host_users.hpp"
#include "whole_number.hpp"

using namespace pyjail;

namespace {
const char* kPasswd =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "broken line\n"
    "odd:x:notanumber:0::/:/bin/sh\n"
    "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin";  // no final newline
const char* kGroup =
    "root:x:0:\n"
    "daemon:x:1:\n"
    "adm:x:4:alice\n"
    "staff:x:50:ghost\n"
    "users:x:100:root\n";
}  // namespace

TEST_CASE("a passwd entry by uid: name, ids and home; malformed lines skipped") {
    auto alice = passwd_entry_of(kPasswd, 1000);
    REQUIRE(alice);
    CHECK(alice->name == "alice");
    CHECK(alice->gid == 1000);
    CHECK(alice->home == "/home/alice");
    CHECK(passwd_entry_of(kPasswd, 65534)->home == "/nonexistent");
    CHECK_FALSE(passwd_entry_of(kPasswd, 4242));
    CHECK_FALSE(passwd_entry_of("", 0));
    CHECK_FALSE(passwd_entry_of("x:x:0\n", 0));  // too few fields
}

TEST_CASE("a group holds only trusted users: primary members and listed members both count") {
    CHECK(group_holds_only(kPasswd, kGroup, 0, {0}));
    // daemon's primary group is 1: trusting root alone is not enough.
    CHECK_FALSE(group_holds_only(kPasswd, kGroup, 1, {0}));
    CHECK(group_holds_only(kPasswd, kGroup, 1, {0, 1}));
    CHECK_FALSE(group_holds_only(kPasswd, kGroup, 4, {0}));       // alice listed
    CHECK(group_holds_only(kPasswd, kGroup, 4, {0, 1000}));
    CHECK_FALSE(group_holds_only(kPasswd, kGroup, 50, {0, 1000}));  // a member with no passwd entry
    CHECK(group_holds_only(kPasswd, kGroup, 100, {0}));
    CHECK_FALSE(group_holds_only(kPasswd, kGroup, 27, {0}));  // not listed: members unknown
    // The odd line's primary gid 0 is unparsable: skipped, as the C library would.
    CHECK(group_holds_only(kPasswd, kGroup, 0, {0}));
}

TEST_CASE("whole_number: all of the text, decimal digits only, within the type") {
    CHECK(whole_number<std::uint32_t>("0") == 0u);
    CHECK(whole_number<std::uint32_t>("4294967295") == 4294967295u);
    CHECK(whole_number<std::uint64_t>("18446744073709551615") == 18446744073709551615ull);
    for (const char* bad : {"", "4294967296", "-1", "+1", " 1", "1 ", "1x", "0x10", "1e3"})
        CHECK_MESSAGE(!whole_number<std::uint32_t>(bad), bad);
    CHECK(!whole_number<std::uint64_t>("18446744073709551616"));
}
