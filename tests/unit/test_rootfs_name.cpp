#include <doctest/doctest.h>

#include "rootfs_name.hpp"

using namespace pyjail;

TEST_CASE("a rootfs value without '/' is a name, with one a path") {
    CHECK(is_rootfs_name("data"));
    CHECK(is_rootfs_name("py3.11-data"));
    CHECK_FALSE(is_rootfs_name("./data"));
    CHECK_FALSE(is_rootfs_name("/opt/rootfs"));
    CHECK_FALSE(is_rootfs_name("build/rootfs"));
    CHECK_FALSE(is_rootfs_name(""));
}

TEST_CASE("names cannot leave their directory or look like the builder's temporaries") {
    CHECK(rootfs_name_problem("data") == "");
    CHECK(rootfs_name_problem("Data_2.x-y") == "");
    CHECK(rootfs_name_problem("..") == "it must start with a letter or a digit");
    CHECK(rootfs_name_problem(".hidden") == "it must start with a letter or a digit");
    CHECK(rootfs_name_problem("-x") == "it must start with a letter or a digit");
    CHECK(rootfs_name_problem("a b") == "it may hold only letters, digits, '.', '_' and '-'");
    CHECK(rootfs_name_problem("a\nb") == "it may hold only letters, digits, '.', '_' and '-'");
    CHECK(rootfs_name_problem("") == "it is empty");
    CHECK(rootfs_name_problem(std::string(65, 'a')) == "it is longer than 64 characters");
}

TEST_CASE("the user's directory: XDG_DATA_HOME when absolute, else HOME") {
    CHECK(user_rootfs_dir("/x/data", "/home/u") == "/x/data/pyjail/rootfs");
    CHECK(user_rootfs_dir("relative", "/home/u") == "/home/u/.local/share/pyjail/rootfs");
    CHECK(user_rootfs_dir(nullptr, "/home/u") == "/home/u/.local/share/pyjail/rootfs");
    CHECK(user_rootfs_dir(nullptr, nullptr) == "");
    CHECK(user_rootfs_dir("", "") == "");
}

TEST_CASE("a name is looked up in the user's directory first, then in the installed one") {
    auto dirs = rootfs_search_dirs("/home/u/.local/share/pyjail/rootfs", "/usr/lib/pyjail/rootfs.d");
    REQUIRE(dirs.size() == 2);
    CHECK(dirs[0].where == "user");
    CHECK(dirs[1].path == "/usr/lib/pyjail/rootfs.d");
    CHECK(rootfs_search_dirs("", "/i").size() == 1);
}

TEST_CASE("root builds named rootfses into the installed directory, others into their own") {
    CHECK(rootfs_build_dir(0, "/root/.local/share/pyjail/rootfs", "/usr/lib/pyjail/rootfs.d") ==
          "/usr/lib/pyjail/rootfs.d");
    CHECK(rootfs_build_dir(1000, "/home/u/x", "/usr/lib/pyjail/rootfs.d") == "/home/u/x");
}

TEST_CASE("the names the builder gives what it leaves beside a rootfs are no rootfs names") {
    CHECK(is_builder_sibling_name("data.pyjail-tmp-abcd_123"));
    CHECK(is_builder_sibling_name("data.pyjail-pip-x1y2z3w4"));
    CHECK(is_builder_sibling_name("data.pyjail-old-ABCDEFGH"));
    CHECK(is_builder_sibling_name("data.pyjail-tmp-abcd_123.old"));
    // As earlier versions named them (and as people name backups): still not listed.
    CHECK(is_builder_sibling_name("data.old-20240101"));
    CHECK(is_builder_sibling_name("py.tmp-2024_jan"));
    CHECK(is_builder_sibling_name("data.tmp-abcdefgh.old"));
    CHECK_FALSE(is_builder_sibling_name("data"));
    CHECK_FALSE(is_builder_sibling_name("data.old"));
    CHECK_FALSE(is_builder_sibling_name("data.old-2024"));           // 8 characters, no fewer
    CHECK_FALSE(is_builder_sibling_name("data.old-2024-01-01"));     // nor others
    CHECK_FALSE(is_builder_sibling_name("data-old-20240101"));
    CHECK_FALSE(is_builder_sibling_name("data.pyjail-new-abcdefgh"));
    CHECK_FALSE(is_builder_sibling_name("data.pyjail-tmp-abcdefgh.new"));
    CHECK_FALSE(is_builder_sibling_name("old-abcdefgh"));
    CHECK_FALSE(is_builder_sibling_name(""));
}
