#include <doctest/doctest.h>

#include "writable_place.hpp"

using namespace pyjail;

namespace {

constexpr std::uint64_t kDisk = 8, kOther = 9;

WritablePlace workdir() { return {{kDisk, 100}, true, "/home/u/work", "/home/u/work", "--workdir"}; }

// /home/u/logs (ino 300) in /home/u (20) in /home (10) in / (2), one filesystem.
LookupDir logs_dir() { return {"/home/u/logs", {{kDisk, 300}, {kDisk, 20}, {kDisk, 10}, {kDisk, 2}}, {{kDisk, "/"}}}; }

// /home/u/work/out (ino 400) in the work directory (100).
LookupDir out_in_work() {
    return {"/home/u/work/out", {{kDisk, 400}, {kDisk, 100}, {kDisk, 20}, {kDisk, 10}, {kDisk, 2}}, {{kDisk, "/"}}};
}

}  // namespace

TEST_CASE("fs_path_within: the path itself or below it, by whole components") {
    CHECK(fs_path_within("/a/b", "/a"));
    CHECK(fs_path_within("/a", "/a"));
    CHECK(fs_path_within("/a", "/"));
    CHECK_FALSE(fs_path_within("/ab", "/a"));
    CHECK_FALSE(fs_path_within("/a", "/a/b"));
    CHECK_FALSE(fs_path_within("/a", ""));
}

TEST_CASE("an output beside the work directory is the jail's to reach only inside it") {
    OutputPath out{{logs_dir()}, FileId{kDisk, 301}, 1};
    CHECK(jail_writable_reason(out, {workdir()}, false) == "");
    CHECK(jail_writable_reason(out, {workdir()}, true) == "");
    CHECK(jail_writable_reason(out, {}, false) == "");
}

TEST_CASE("an output whose directory lies inside a writable bind is refused, however it was named") {
    // The directory itself, or any ancestor: by identity, not by the path as written (a
    // symlink to it, or '..', reaches the same directory).
    OutputPath out{{out_in_work()}, std::nullopt, 1};
    CHECK(jail_writable_reason(out, {workdir()}, true) ==
          "its directory /home/u/work/out lies inside --workdir /home/u/work, which the jail can write");
    OutputPath top{{{"/home/u/work", {{kDisk, 100}, {kDisk, 20}, {kDisk, 2}}, {{kDisk, "/"}}}}, std::nullopt, 1};
    CHECK(jail_writable_reason(top, {workdir()}, false).starts_with("its directory /home/u/work lies inside"));
}

TEST_CASE("a way to the output that passes through a writable bind is refused") {
    // /home/u/work/link -> /var/log/x: the jail can point the link elsewhere.
    OutputPath out{{out_in_work(), {"/var/log/x", {{kDisk, 500}, {kDisk, 2}}, {{kDisk, "/"}}}}, std::nullopt, 1};
    CHECK(jail_writable_reason(out, {workdir()}, true) ==
          "the way to it goes through /home/u/work/out, which lies inside --workdir /home/u/work, which "
          "the jail can write");
}

TEST_CASE("the same directory reached through another mount of its filesystem is still inside") {
    // /mnt/w is a bind mount of /home/u/work/sub: its ancestors are /mnt's, but the mount's
    // root lies inside the work directory within the filesystem.
    LookupDir alias{"/mnt/w", {{kDisk, 600}, {kOther, 5}, {kOther, 2}}, {{kDisk, "/home/u/work/sub"}, {kOther, "/"}}};
    OutputPath out{{alias}, std::nullopt, 1};
    CHECK(jail_writable_reason(out, {workdir()}, true) ==
          "its directory /mnt/w lies inside --workdir /home/u/work, which the jail can write");
    // Another directory of that filesystem, or the same path on another one, is not.
    LookupDir beside{"/mnt/w", {{kDisk, 600}, {kOther, 5}, {kOther, 2}}, {{kDisk, "/home/u/works"}, {kOther, "/"}}};
    CHECK(jail_writable_reason({{beside}, std::nullopt, 1}, {workdir()}, true) == "");
    LookupDir elsewhere{"/mnt/w", {{kOther, 600}, {kOther, 2}}, {{kOther, "/home/u/work/sub"}}};
    CHECK(jail_writable_reason({{elsewhere}, std::nullopt, 1}, {workdir()}, true) == "");
    // Unknown path within the filesystem: identities only.
    WritablePlace unknown = workdir();
    unknown.fs_path.clear();
    CHECK(jail_writable_reason(out, {unknown}, true) == "");
}

TEST_CASE("an appended file bound writable, or with a second link, is refused; a replaced one is not") {
    WritablePlace file_bind{{kDisk, 301}, false, "/home/u/logs/audit.jsonl", "/home/u/logs/audit.jsonl", "--bind"};
    OutputPath out{{logs_dir()}, FileId{kDisk, 301}, 1};
    CHECK(jail_writable_reason(out, {file_bind}, false) ==
          "it is the source of --bind /home/u/logs/audit.jsonl, which the jail can write");
    CHECK(jail_writable_reason(out, {file_bind}, true) == "");
    OutputPath linked{{logs_dir()}, FileId{kDisk, 301}, 2};
    CHECK(jail_writable_reason(linked, {workdir()}, false) ==
          "it has 2 hard links, and another could lie where the jail can write");
    CHECK(jail_writable_reason(linked, {workdir()}, true) == "");
    CHECK(jail_writable_reason(linked, {}, false) == "");  // nothing the jail writes
}
