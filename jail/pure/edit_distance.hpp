// How far apart two words are, for "did you mean ...?" after a typo: of an option, a profile
// key, a profile's name, one of pyjail's own subcommands.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

// More edits than this, and a word is not a typo of another.
inline constexpr std::size_t kTypoEdits = 2;

// Levenshtein distance: insertions, deletions and substitutions of one byte each.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

// Of `candidates` (strings), the one `word` is most likely a typo of, ignoring case: at most
// kTypoEdits away and fewer edits than `word` has letters (so that "ab" is no typo of "cd").
// "" when none is.
template <typename Range>
std::string closest_word(std::string_view word, const Range& candidates) {
    auto lower = [](std::string_view s) {
        std::string out(s);
        for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    };
    const std::string w = lower(word);
    std::string best;
    std::size_t best_d = std::min(kTypoEdits + 1, w.size());
    for (const auto& c : candidates) {
        std::size_t d = edit_distance(w, lower(c));
        if (d < best_d) {
            best_d = d;
            best = std::string(c);
        }
    }
    return best;
}

}  // namespace pyjail
