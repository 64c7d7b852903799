// Which of a template's mappings are collapsed into huge pages (huge_pages.hpp): only private,
// writable, anonymous memory and the heap, in whole aligned 2 MiB chunks; never a file's pages,
// the stack, or a chunk mostly not resident.
#include <doctest/doctest.h>

#include <cerrno>

#include "huge_pages.hpp"

using namespace pyjail::template_;

TEST_CASE("huge_page_chunks: the aligned 2 MiB chunks of anonymous writable mappings and the heap") {
    const char* maps =
        "55d0c0000000-55d0c0600000 rw-p 00000000 00:00 0                          [heap]\n"
        "7f0000100000-7f0000500000 rw-p 00000000 00:00 0 \n"
        "7f0000600000-7f0000a00000 rw-p 00000000 08:01 1234                       /usr/lib/libpython3.11.so\n"
        "7f0000a00000-7f0000e00000 r--p 00000000 00:00 0 \n"
        "7f0001000000-7f0001400000 rw-s 00000000 00:01 77                         /dev/zero (deleted)\n"
        "7f0002000000-7f0002100000 rw-p 00000000 00:00 0 \n"
        "7ffc00000000-7ffc00400000 rw-p 00000000 00:00 0                          [stack]\n"
        "7f0003000000-7f0003400000 ---p 00000000 00:00 0 \n";
    std::vector<MemoryRange> got = huge_page_chunks(maps);
    // The heap: three whole chunks. The unaligned anonymous mapping 0x7f0000100000-0x7f0000500000
    // holds one aligned chunk, 0x7f0000200000-0x7f0000400000. The file, the read-only, shared,
    // too-small (1 MiB), stack and inaccessible mappings give none.
    std::vector<MemoryRange> want = {
        {0x55d0c0000000, 0x55d0c0200000},
        {0x55d0c0200000, 0x55d0c0400000},
        {0x55d0c0400000, 0x55d0c0600000},
        {0x7f0000200000, 0x7f0000400000},
    };
    CHECK(got == want);
}

TEST_CASE("huge_page_chunks: malformed or empty text gives nothing, and no chunk runs past its mapping") {
    CHECK(huge_page_chunks("").empty());
    CHECK(huge_page_chunks("garbage\n\n-- rw-p\nzz-yy rw-p 0 00:00 0\n").empty());
    // end before start
    CHECK(huge_page_chunks("7f0000400000-7f0000200000 rw-p 00000000 00:00 0\n").empty());
    // an aligned mapping one page short of two chunks holds one
    auto one = huge_page_chunks("7f0000200000-7f00005ff000 rw-p 00000000 00:00 0");
    REQUIRE(one.size() == 1);
    CHECK(one[0] == MemoryRange{0x7f0000200000, 0x7f0000400000});
}

TEST_CASE("worth_collapsing: three quarters resident at least") {
    CHECK(worth_collapsing(512, 512));
    CHECK(worth_collapsing(384, 512));
    CHECK_FALSE(worth_collapsing(383, 512));
    CHECK_FALSE(worth_collapsing(0, 512));
    CHECK_FALSE(worth_collapsing(0, 0));
}

TEST_CASE("describe_collapse: what was collapsed, left alone and refused, in one line") {
    CHECK(describe_collapse({8, 36, 0, 0}) == "16 MiB in huge pages (8 chunks; 36 mostly empty left alone)");
    CHECK(describe_collapse({1, 0, 0, 0}) == "2 MiB in huge pages (1 chunk; 0 mostly empty left alone)");
    CHECK(describe_collapse({0, 2, 6, EINVAL}) ==
          "0 MiB in huge pages (0 chunks; 2 mostly empty left alone; 6 refused: Invalid argument (no "
          "MADV_COLLAPSE before Linux 6.1, or huge pages turned off for this process))");
    CHECK(describe_collapse({3, 0, 1, ENOMEM}) ==
          "6 MiB in huge pages (3 chunks; 0 mostly empty left alone; 1 refused: Cannot allocate memory)");
}
