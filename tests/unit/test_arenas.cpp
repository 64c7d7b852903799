// Which slot each of a template's object arenas takes (template/arenas.hpp): in address order
// inside 2 MiB-aligned blocks, so that arenas made one after another fill whole huge-page
// chunks; a freed slot before a fresh one; and an arena that is not ours (made before the
// template's allocator was installed) never taken for one.
#include <doctest/doctest.h>

#include "arenas.hpp"

using namespace pyjail::template_;

namespace {
constexpr std::uintptr_t kBase = 0x7f0000000000;  // 2 MiB-aligned, as reserve_block makes it
}

TEST_CASE("ArenaSlots: no block, no slot") {
    ArenaSlots s;
    CHECK(s.take() == 0);
    CHECK_FALSE(s.owns(kBase));
}

TEST_CASE("ArenaSlots: slots in address order, two to a huge-page chunk, until the block is full") {
    ArenaSlots s;
    s.add_block(kBase);
    const std::size_t per_block = kArenaBlock / kArenaSlot;
    for (std::size_t k = 0; k < per_block; ++k) CHECK(s.take() == kBase + k * kArenaSlot);
    CHECK(s.take() == 0);  // full: the caller adds a block
    s.add_block(kBase + 4 * kArenaBlock);
    CHECK(s.take() == kBase + 4 * kArenaBlock);
    CHECK(s.blocks().size() == 2);
}

TEST_CASE("ArenaSlots: a freed slot is taken again before a fresh one") {
    ArenaSlots s;
    s.add_block(kBase);
    std::uintptr_t a = s.take(), b = s.take(), c = s.take();
    s.give_back(b);
    s.give_back(a);
    CHECK(s.take() == a);
    CHECK(s.take() == b);
    CHECK(s.take() == c + kArenaSlot);
}

TEST_CASE("ArenaSlots: owns only slot addresses inside its blocks") {
    ArenaSlots s;
    s.add_block(kBase);
    CHECK(s.owns(kBase));
    CHECK(s.owns(kBase + kArenaBlock - kArenaSlot));
    CHECK_FALSE(s.owns(kBase + kArenaBlock));      // the next block's, not added
    CHECK_FALSE(s.owns(kBase - kArenaSlot));
    CHECK_FALSE(s.owns(kBase + 4096));             // inside, but no slot starts there
    CHECK_FALSE(s.owns(0x55d0c0000000));           // an arena the default allocator made
}
