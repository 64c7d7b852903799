// The template's memory in huge pages, so that each run's fork and exit handle it in 2 MiB
// pieces instead of 4 KiB ones.
//
// Why: a run is a fork of the template (forked_run.cpp). The kernel copies the page tables of
// the template's anonymous memory at each fork (about 40 MiB with numpy and pandas: 10,000
// entries, each a reference to take) and frees the run's copy at its exit: milliseconds on
// every run's way to its first line and to its end. A 2 MiB huge page is one entry to copy and
// one to free. Since Linux 5.8 a write to a shared huge page copies
// 4 KiB, not 2 MiB (the run's entry is split, the page stays whole in the template), so a run
// costs no more memory for it; Linux 6.1's MADV_COLLAPSE turns the template's settled memory
// into huge pages on request, whatever /sys/kernel/mm/transparent_hugepage/enabled says
// (`never` included, as madvise(2) says: the process asks for it at its own expense). Only
// whole aligned 2 MiB chunks collapse: arenas.hpp places the interpreter's arenas so that
// they make such chunks.
//
// What it must not do: set MADV_HUGEPAGE on the mappings (a run inherits it, and each 4 KiB it
// touched afresh would cost a zeroed 2 MiB page: fewer sessions per machine), or grow the
// template by much (a chunk is collapsed only when most of it is already resident, see
// worth_collapsing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail::template_ {

inline constexpr std::uintptr_t kHugePage = std::uintptr_t{1} << 21;

struct MemoryRange {
    std::uintptr_t start = 0, end = 0;
    bool operator==(const MemoryRange&) const = default;
};

// Pure: the 2 MiB-aligned chunks of the private, writable, anonymous mappings (the heap
// included, the stack and every file mapping not) in /proc/self/maps' text. A mapping shorter
// than one aligned chunk gives none.
std::vector<MemoryRange> huge_page_chunks(std::string_view maps);

// Pure: whether a chunk with `resident` of its 4 KiB pages present is worth collapsing: three
// quarters at least, so the template grows by a third of a chunk at most.
bool worth_collapsing(std::size_t resident, std::size_t pages);

struct CollapseResult {
    std::size_t chunks = 0;     // collapsed into huge pages
    std::size_t sparse = 0;     // left alone: mostly not resident
    std::size_t refused = 0;    // the kernel would not: no MADV_COLLAPSE before Linux 6.1 (EINVAL),
                                // no free huge page (ENOMEM), busy pages (EAGAIN)
    int last_errno = 0;         // the last refusal's
};

// Pure: the outcome in one line, for `pyjail serve --verbose`: "16 MiB in huge pages (8 chunks;
// 36 mostly empty left alone)", and the refusals with the last one's reason.
std::string describe_collapse(const CollapseResult& r);

// In the template, once its preloads are imported and frozen, before it serves: collapses its
// settled anonymous memory into huge pages. Never fails a template: a kernel without
// MADV_COLLAPSE, or a chunk it refuses, leaves the memory as it was.
CollapseResult collapse_into_huge_pages();

}  // namespace pyjail::template_
