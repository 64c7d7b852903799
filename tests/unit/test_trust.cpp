#include <doctest/doctest.h>
#include <sys/stat.h>

#include "trust.hpp"

using namespace pyjail;

namespace {

NodeFacts dir(std::uint32_t uid, std::uint32_t perms, std::uint32_t gid = 0) {
    return {uid, gid, S_IFDIR | perms, 2};
}
NodeFacts file(std::uint32_t uid, std::uint32_t perms, std::uint64_t nlink = 1) {
    return {uid, 0, S_IFREG | perms, nlink};
}
NodeFacts link(std::uint32_t uid) { return {uid, 0, S_IFLNK | 0777, 1}; }

const TrustedIds kRoot{0};
const TrustedIds kRootAndMe{0, 1000};

}  // namespace

TEST_CASE("who else writes a file or directory: its owner if untrusted, its group, everyone") {
    CHECK(who_else_writes(dir(0, 0755), kRoot) == "");
    CHECK(who_else_writes(dir(1000, 0700), kRoot) == "owned by uid 1000");
    CHECK(who_else_writes(dir(1000, 0700), kRootAndMe) == "");
    CHECK(who_else_writes(dir(0, 0775, 27), kRoot) == "writable by group 27");
    CHECK(who_else_writes(file(0, 0666), kRoot) == "writable by everyone");
    CHECK(who_else_writes(dir(0, 01777), kRoot) == "writable by everyone");  // /tmp
}

TEST_CASE("an entry could be planted unless only trusted users write its directory") {
    CHECK(who_could_plant(dir(0, 0755), link(1000), kRoot) == "");  // root put it there
    CHECK(who_could_plant(dir(1000, 0755), file(0, 0600), kRoot) == "owned by uid 1000");
    CHECK(who_could_plant(dir(0, 0777), file(0, 0600), kRoot) == "writable by everyone");
    // /tmp: others cannot rename or remove what root owns, but they own what they planted.
    CHECK(who_could_plant(dir(0, 01777), file(0, 0600), kRoot) == "");
    CHECK(who_could_plant(dir(0, 01777), link(1000), kRoot) == "writable by everyone");
    CHECK(who_could_plant(dir(1000, 01777), file(0, 0600), kRoot) == "owned by uid 1000");
}

TEST_CASE("a directory on the way to trusted data: trusted, or a trusted sticky one") {
    CHECK(untrusted_directory_on_the_way("/", dir(0, 0755), "/usr", dir(0, 0755), kRoot) == "");
    CHECK(untrusted_directory_on_the_way("/", dir(0, 0755), "/tmp", dir(0, 01777), kRoot) == "");
    CHECK(untrusted_directory_on_the_way("/tmp", dir(0, 01777), "/tmp/job", dir(1000, 0755), kRoot) ==
          "/tmp/job is owned by uid 1000");
    CHECK(untrusted_directory_on_the_way("/tmp", dir(0, 01777), "/tmp/stage", dir(0, 0755), kRoot) == "");
    CHECK(untrusted_directory_on_the_way("/srv", dir(0, 0755), "/srv/x", dir(0, 0777), kRoot) ==
          "/srv/x is writable by everyone");
    CHECK(untrusted_directory_on_the_way("/srv", dir(0, 0755), "/srv/x", dir(0, 0770, 50), kRoot) ==
          "/srv/x is writable by group 50");
    // A sticky directory someone else owns: they may remove anything in it.
    CHECK(untrusted_directory_on_the_way("/srv", dir(0, 0755), "/srv/x", dir(1000, 01777), kRoot) ==
          "/srv/x is owned by uid 1000");
}

TEST_CASE("the end of a trusted path: nobody else writes it, and no planted hard link") {
    CHECK(untrusted_end("/root", dir(0, 0700), "/root/job.py", file(0, 0600), kRoot, false) == "");
    CHECK(untrusted_end("/root", dir(0, 0700), "/root/job.py", file(0, 0666), kRoot, false) ==
          "/root/job.py is writable by everyone");
    CHECK(untrusted_end("/home/a", dir(1000, 0755), "/home/a/job.py", file(0, 0600), kRoot, true) ==
          "/home/a is owned by uid 1000");
    CHECK(untrusted_end("/root", dir(0, 0700), "/root/job.py", file(1000, 0600), kRoot, true) ==
          "/root/job.py is owned by uid 1000");
    // A second link of a root file: harmless where only root adds entries...
    CHECK(untrusted_end("/root", dir(0, 0700), "/root/job.py", file(0, 0600, 2), kRoot, false) == "");
    // ... a possible plant in /tmp unless the kernel protects hard links.
    CHECK(untrusted_end("/tmp", dir(0, 01777), "/tmp/job.py", file(0, 0600, 2), kRoot, false) ==
          "/tmp/job.py has 2 hard links in /tmp, which others can write (and fs.protected_hardlinks is off)");
    CHECK(untrusted_end("/tmp", dir(0, 01777), "/tmp/job.py", file(0, 0600, 2), kRoot, true) == "");
}

TEST_CASE("an existing report file: only a regular file nobody else planted") {
    CHECK(report_file_refusal(dir(0, 01777), {1000, 0, S_IFIFO | 0666, 1}, 0, true) ==
          "it is a FIFO, not a regular file");
    CHECK(report_file_refusal(dir(0, 0755), {0, 0, S_IFCHR | 0666, 1}, 0, true) ==
          "it is a character device, not a regular file");
    CHECK(report_file_refusal(dir(0, 0755), dir(0, 0755), 0, true) == "it is a directory, not a regular file");
    CHECK(report_file_refusal(dir(0, 01777), file(1000, 0666), 0, true) ==
          "it belongs to uid 1000 and lies in a sticky directory others can write");
    CHECK(report_file_refusal(dir(0, 01777), file(1000, 0644), 1000, true) == "");  // one's own
    CHECK(report_file_refusal(dir(1000, 01777), file(1000, 0644), 0, true) == "");  // the dir owner's
    CHECK(report_file_refusal(dir(1000, 0755), file(1000, 0644), 0, true) == "");  // not sticky
    CHECK(report_file_refusal(dir(0, 0777), file(0, 0644, 2), 0, false) ==
          "it has 2 hard links and lies in a directory others can write (and fs.protected_hardlinks is off)");
    CHECK(report_file_refusal(dir(0, 0777), file(0, 0644, 2), 0, true) == "");
    CHECK(report_file_refusal(dir(0, 0755), file(0, 0644, 2), 0, false) == "");
}

TEST_CASE("a group nobody untrusted is in may write: root's group on a tree unpacked by root") {
    const TrustedIds root_group({0}, {0});
    CHECK(who_else_writes(dir(0, 0775, 0), root_group) == "");
    CHECK(who_else_writes(dir(0, 0775, 27), root_group) == "writable by group 27");
    CHECK(who_else_writes(dir(0, 0777, 0), root_group) == "writable by everyone");
    CHECK(untrusted_directory_on_the_way("/", dir(0, 0755), "/src", dir(0, 0775, 0), root_group) == "");
    CHECK(untrusted_directory_on_the_way("/", dir(0, 0755), "/src", dir(0, 0775, 0), kRoot) ==
          "/src is writable by group 0");
}
