// A whole number written in decimal, all of `text` and nothing else (no sign, no space, no
// exponent), that fits T: what pyjail reads from id fields, request ids and the like.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <type_traits>

namespace pyjail {

template <typename T>
std::optional<T> whole_number(std::string_view text) {
    static_assert(std::is_unsigned_v<T>, "a whole number has no sign");
    T v = 0;
    if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
}

}  // namespace pyjail
