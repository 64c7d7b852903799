// The template interpreter's object arenas, carved out of 2 MiB-aligned blocks.
//
// Why: CPython keeps its small objects (nearly every object a template's preloads make) in
// 1 MiB arenas, each its own mmap by default. The kernel places each wherever a hole fits, so
// few of them line up into a whole aligned 2 MiB chunk, and collapse_into_huge_pages
// (huge_pages.hpp) can turn almost none of them into huge pages: with numpy and pandas, a
// dozen arenas stayed in 4 KiB pages, thousands of page-table entries that every run's fork
// copies and its exit frees. Here each arena is a 1 MiB slot of a block that starts on a
// 2 MiB boundary, taken in order, so the template's settled arenas fill whole chunks that
// collapse.
//
// What it keeps as the default allocator has it: an arena not in use holds no memory (its
// pages are dropped) and is no writable mapping (PROT_NONE: RLIMIT_DATA, a memory limit
// without cgroups, counts only the arenas in use, as it counts the default's mmaps); an
// arena that cannot be had is nullptr (MemoryError). Once the template serves
// (settle_arena_blocks) its blocks take no new huge page at a fault: under a host's
// `transparent_hugepage=always`, a run's new arena would otherwise cost a zeroed 2 MiB page
// for each first touch, and fewer sessions would fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pyjail::template_ {

inline constexpr std::size_t kArenaSlot = std::size_t{1} << 20;    // CPython's arena size
inline constexpr std::size_t kArenaBlock = std::size_t{32} << 20;  // reserved at a time

// Pure: which slot each arena takes. Blocks are added by address (each kArenaBlock long);
// fresh slots are taken in address order, and a freed one (the last freed first) before any
// fresh one.
class ArenaSlots {
public:
    void add_block(std::uintptr_t base);
    // A slot's address, or 0 when every block is full (add one, and take again).
    std::uintptr_t take();
    // Whether `at` is one of our slots (not a foreign arena, made before ours were).
    bool owns(std::uintptr_t at) const;
    // `at`, a slot taken before, free again.
    void give_back(std::uintptr_t at);
    const std::vector<std::uintptr_t>& blocks() const { return blocks_; }

private:
    std::vector<std::uintptr_t> blocks_;
    std::vector<std::uintptr_t> free_;  // given back; taken again last-in first
    std::uintptr_t next_ = 0, end_ = 0; // the last block's slots never taken
};

// In the template's interpreter (module.cpp installs them as its arena allocator, and hands
// any size but kArenaSlot, or an arena it did not make, to the allocator before them).
// nullptr: the block or the slot could not be had.
void* take_arena();
// False: `at` is not ours.
bool give_back_arena(void* at);
// Once (module.cpp installs the allocator once), before the first arena: the slots' lock is
// taken around every fork (pthread_atfork).
void arena_fork_guard();
// Once, as the template starts serving, after collapse_into_huge_pages: no block takes a huge
// page at a fault from now on (the ones made later neither).
void settle_arena_blocks();

}  // namespace pyjail::template_
