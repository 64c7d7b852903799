#include "arenas.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <mutex>

#include "huge_pages.hpp"

namespace pyjail::template_ {

void ArenaSlots::add_block(std::uintptr_t base) {
    blocks_.push_back(base);
    next_ = base;
    end_ = base + kArenaBlock;
}

std::uintptr_t ArenaSlots::take() {
    if (!free_.empty()) {
        std::uintptr_t at = free_.back();
        free_.pop_back();
        return at;
    }
    if (next_ == end_) return 0;
    std::uintptr_t at = next_;
    next_ += kArenaSlot;
    return at;
}

bool ArenaSlots::owns(std::uintptr_t at) const {
    return at % kArenaSlot == 0 &&
           std::any_of(blocks_.begin(), blocks_.end(), [at](std::uintptr_t b) { return at >= b && at < b + kArenaBlock; });
}

void ArenaSlots::give_back(std::uintptr_t at) { free_.push_back(at); }

namespace {

// The interpreter calls its arena allocator under its own lock (the GIL) in the versions a
// rootfs ships; this one is for an interpreter whose subinterpreters each hold their own. Held
// across a fork (arena_fork_guard), so that no child starts with it taken by a thread it lacks.
std::mutex g_lock;
ArenaSlots g_slots;
bool g_settled = false;

// A block of PROT_NONE address space (no memory, not counted by RLIMIT_DATA), on a 2 MiB
// boundary: a larger reservation trimmed at both ends.
std::uintptr_t reserve_block() {
    void* got = ::mmap(nullptr, kArenaBlock + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (got == MAP_FAILED) return 0;
    auto start = reinterpret_cast<std::uintptr_t>(got);
    std::uintptr_t base = (start + kHugePage - 1) & ~(kHugePage - 1);
    if (base > start) ::munmap(got, base - start);
    std::uintptr_t tail = start + kArenaBlock + kHugePage;
    if (tail > base + kArenaBlock) ::munmap(reinterpret_cast<void*>(base + kArenaBlock), tail - (base + kArenaBlock));
    if (g_settled) (void)::madvise(reinterpret_cast<void*>(base), kArenaBlock, MADV_NOHUGEPAGE);
    return base;
}

}  // namespace

void* take_arena() {
    std::lock_guard<std::mutex> hold(g_lock);
    std::uintptr_t at = g_slots.take();
    if (at == 0) {
        std::uintptr_t block = reserve_block();
        if (block == 0) return nullptr;
        g_slots.add_block(block);
        at = g_slots.take();
    }
    // Writable from now on; its pages come on first touch, zeroed, as a fresh mmap's do.
    if (::mprotect(reinterpret_cast<void*>(at), kArenaSlot, PROT_READ | PROT_WRITE) != 0) {
        g_slots.give_back(at);
        return nullptr;
    }
    return reinterpret_cast<void*>(at);
}

bool give_back_arena(void* at) {
    std::lock_guard<std::mutex> hold(g_lock);
    auto a = reinterpret_cast<std::uintptr_t>(at);
    if (!g_slots.owns(a)) return false;
    // Its memory returned and its address space no longer writable, as munmap would leave it.
    (void)::madvise(at, kArenaSlot, MADV_DONTNEED);
    (void)::mprotect(at, kArenaSlot, PROT_NONE);
    g_slots.give_back(a);
    return true;
}

void arena_fork_guard() {
    (void)::pthread_atfork([] { g_lock.lock(); }, [] { g_lock.unlock(); }, [] { g_lock.unlock(); });
}

void settle_arena_blocks() {
    std::lock_guard<std::mutex> hold(g_lock);
    g_settled = true;
    for (std::uintptr_t b : g_slots.blocks()) (void)::madvise(reinterpret_cast<void*>(b), kArenaBlock, MADV_NOHUGEPAGE);
}

}  // namespace pyjail::template_
