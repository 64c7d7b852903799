#include "huge_pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

#include "sys.hpp"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace pyjail::template_ {

namespace {

std::string_view next_field(std::string_view& line) {
    std::size_t at = line.find_first_not_of(' ');
    if (at == std::string_view::npos) return line = {};
    line.remove_prefix(at);
    std::size_t end = line.find(' ');
    std::string_view field = line.substr(0, end);
    line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    return field;
}

bool parse_hex(std::string_view s, std::uintptr_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && p == s.data() + s.size();
}

// One line of /proc/self/maps: "start-end perms offset dev inode [path]".
bool anonymous_writable(std::string_view line, MemoryRange& r) {
    std::string_view range = next_field(line), perms = next_field(line);
    (void)next_field(line);  // offset
    (void)next_field(line);  // device
    std::string_view inode = next_field(line), path = next_field(line);
    std::size_t dash = range.find('-');
    if (dash == std::string_view::npos || perms.size() != 4 || !parse_hex(range.substr(0, dash), r.start) ||
        !parse_hex(range.substr(dash + 1), r.end))
        return false;
    // Private and writable; no file behind it (inode 0), and of the named ones only the heap:
    // the stack grows down a page at a time, and [vvar], [vdso] are the kernel's.
    return perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && inode == "0" &&
           (path.empty() || path == "[heap]");
}

}  // namespace

std::vector<MemoryRange> huge_page_chunks(std::string_view maps) {
    std::vector<MemoryRange> chunks;
    while (!maps.empty()) {
        std::size_t nl = maps.find('\n');
        std::string_view line = maps.substr(0, nl);
        maps.remove_prefix(nl == std::string_view::npos ? maps.size() : nl + 1);
        MemoryRange m;
        if (!anonymous_writable(line, m) || m.end <= m.start) continue;
        std::uintptr_t first = (m.start + kHugePage - 1) & ~(kHugePage - 1);
        for (std::uintptr_t at = first; at <= m.end && m.end - at >= kHugePage; at += kHugePage)
            chunks.push_back({at, at + kHugePage});
    }
    return chunks;
}

bool worth_collapsing(std::size_t resident, std::size_t pages) {
    return pages > 0 && resident * 4 >= pages * 3;
}

std::string describe_collapse(const CollapseResult& r) {
    std::string out = std::to_string(r.chunks * (kHugePage >> 20)) + " MiB in huge pages (" +
                      std::to_string(r.chunks) + (r.chunks == 1 ? " chunk; " : " chunks; ") +
                      std::to_string(r.sparse) + " mostly empty left alone";
    if (r.refused > 0) {
        out += "; " + std::to_string(r.refused) + " refused: " + std::strerror(r.last_errno);
        if (r.last_errno == EINVAL) out += " (no MADV_COLLAPSE before Linux 6.1, or huge pages turned off for this process)";
    }
    return out + ")";
}

CollapseResult collapse_into_huge_pages() {
    CollapseResult out;
    std::string maps;
    if (!try_read_file("/proc/self/maps", maps)) return out;
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> present(kHugePage / page);
    for (const MemoryRange& c : huge_page_chunks(maps)) {
        void* at = reinterpret_cast<void*>(c.start);
        if (::mincore(at, kHugePage, present.data()) != 0) continue;
        std::size_t resident = 0;
        for (unsigned char p : present) resident += p & 1;
        if (!worth_collapsing(resident, present.size())) {
            ++out.sparse;
            continue;
        }
        if (::madvise(at, kHugePage, MADV_COLLAPSE) == 0) {
            ++out.chunks;
        } else {
            ++out.refused;
            out.last_errno = errno;
        }
    }
    return out;
}

}  // namespace pyjail::template_
