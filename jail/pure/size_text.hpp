// A size in bytes as pyjail's options take it (--memory 512M, --fsize 1G): what messages
// print, so that a limit reads back the way it was written.
#pragma once

#include <cstdint>
#include <string>

namespace pyjail {

// "8G", "512M", "4K", or bytes ("1000") when not a whole number of those.
inline std::string format_size(std::uint64_t bytes) {
    static constexpr struct {
        char unit;
        int shift;
    } kUnits[] = {{'G', 30}, {'M', 20}, {'K', 10}};
    for (const auto& u : kUnits)
        if (bytes != 0 && bytes % (1ULL << u.shift) == 0) return std::to_string(bytes >> u.shift) + u.unit;
    return std::to_string(bytes);
}

}  // namespace pyjail
