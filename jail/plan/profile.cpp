#include "profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <set>

#include "error.hpp"

namespace pyjail {

namespace {

class Parser {
public:
    Parser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

    Profile parse() {
        Profile p{path_, {}};
        std::set<std::string> seen;
        while (true) {
            skip_blank_lines();
            if (at_end()) break;
            int line = line_;
            if (peek() == '[')
                fail(line, "tables ([section]) are not part of the profile format; "
                           "write `key = value` lines");
            std::string key = parse_key();
            skip_spaces();
            if (at_end() || peek() != '=') fail(line, fmt::format("expected '=' after key '{}'", key));
            ++pos_;
            skip_spaces();
            ProfileEntry e;
            e.key = key;
            e.line = line;
            if (!at_end() && peek() == '[') {
                e.is_list = true;
                e.values = parse_array(key);
            } else {
                e.values.push_back(parse_scalar(key));
            }
            end_of_line(key);
            if (!seen.insert(key).second)
                fail(line, fmt::format("key '{}' is set twice", key));
            p.entries.push_back(std::move(e));
        }
        return p;
    }

private:
    [[noreturn]] void fail(int line, const std::string& what) const {
        throw UsageError(fmt::format("{}:{}: {}", path_, line, what));
    }

    bool at_end() const { return pos_ >= text_.size(); }
    char peek() const { return text_[pos_]; }

    void skip_spaces() {
        while (!at_end() && (peek() == ' ' || peek() == '\t')) ++pos_;
    }
    void skip_comment() {
        while (!at_end() && peek() != '\n') ++pos_;
    }
    // Blank lines, comment lines, and (inside arrays) newlines.
    void skip_blank_lines() {
        while (!at_end()) {
            char c = peek();
            if (c == ' ' || c == '\t' || c == '\r') ++pos_;
            else if (c == '#') skip_comment();
            else if (c == '\n') { ++pos_; ++line_; }
            else break;
        }
    }

    std::string parse_key() {
        std::size_t start = pos_;
        while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '-' ||
                             peek() == '_'))
            ++pos_;
        if (pos_ == start) {
            std::size_t end = text_.find('\n', pos_);
            fail(line_, fmt::format("expected `key = value`, found '{}'",
                                    text_.substr(pos_, end == std::string_view::npos ? end : end - pos_)));
        }
        return std::string(text_.substr(start, pos_ - start));
    }

    std::string parse_scalar(const std::string& key) {
        if (at_end() || peek() == '\n' || peek() == '#')
            fail(line_, fmt::format("key '{}' has no value", key));
        char c = peek();
        if (c == '"') return parse_basic_string(key);
        if (c == '\'') return parse_literal_string(key);
        std::size_t start = pos_;
        while (!at_end() && !std::isspace(static_cast<unsigned char>(peek())) && peek() != ',' &&
               peek() != ']' && peek() != '#')
            ++pos_;
        std::string word(text_.substr(start, pos_ - start));
        if (word == "true" || word == "false") return word;
        bool numeric = !word.empty();
        for (std::size_t i = 0; i < word.size(); ++i) {
            char ch = word[i];
            bool ok = std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' ||
                      ((ch == '+' || ch == '-') && i == 0);
            if (!ok) numeric = false;
        }
        if (!numeric)
            fail(line_, fmt::format("key '{}': value {} is not a quoted string, number or "
                                    "true/false (strings need quotes: {} = \"{}\")",
                                    key, word, key, word));
        std::string digits;
        for (char ch : word)
            if (ch != '_' && ch != '+') digits += ch;
        return digits;
    }

    std::string parse_basic_string(const std::string& key) {
        ++pos_;  // opening quote
        std::string out;
        while (true) {
            if (at_end() || peek() == '\n')
                fail(line_, fmt::format("key '{}': string is not closed with \"", key));
            char c = text_[pos_++];
            if (c == '"') return out;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (at_end()) fail(line_, fmt::format("key '{}': string ends in a lone \\", key));
            char e = text_[pos_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                default:
                    fail(line_, fmt::format("key '{}': unknown escape \\{} (use 'literal "
                                            "strings' for backslashes)", key, e));
            }
        }
    }

    std::string parse_literal_string(const std::string& key) {
        ++pos_;
        std::size_t start = pos_;
        while (!at_end() && peek() != '\'' && peek() != '\n') ++pos_;
        if (at_end() || peek() != '\'')
            fail(line_, fmt::format("key '{}': string is not closed with '", key));
        std::string out(text_.substr(start, pos_ - start));
        ++pos_;
        return out;
    }

    std::vector<std::string> parse_array(const std::string& key) {
        int open_line = line_;
        ++pos_;  // [
        std::vector<std::string> items;
        while (true) {
            skip_blank_lines();
            if (at_end()) fail(open_line, fmt::format("key '{}': array is not closed with ]", key));
            if (peek() == ']') { ++pos_; return items; }
            if (peek() == '[') fail(line_, fmt::format("key '{}': nested arrays are not allowed", key));
            items.push_back(parse_scalar(key));
            skip_blank_lines();
            if (!at_end() && peek() == ',') { ++pos_; continue; }
            skip_blank_lines();
            if (!at_end() && peek() == ']') { ++pos_; return items; }
            fail(line_, fmt::format("key '{}': expected ',' or ']' in array", key));
        }
    }

    void end_of_line(const std::string& key) {
        skip_spaces();
        if (!at_end() && peek() == '#') skip_comment();
        if (!at_end() && peek() == '\r') ++pos_;
        if (!at_end() && peek() != '\n')
            fail(line_, fmt::format("key '{}': unexpected text after the value", key));
    }

    std::string_view text_;
    const std::string& path_;
    std::size_t pos_ = 0;
    int line_ = 1;
};

}  // namespace

Profile parse_profile(std::string_view text, const std::string& path) {
    return Parser(text, path).parse();
}

void apply_profile(Settings& settings, const Profile& profile) {
    for (const auto& e : profile.entries) {
        if (e.key == "extends") continue;  // profile_chain's
        std::string where = fmt::format("{}:{}", profile.path, e.line);
        // A list of hosts reads as a plural in a profile (`allow-hosts = ["pypi.org"]`); the
        // option's own name works too.
        const std::string key = e.key == "allow-hosts" ? std::string("allow-host") : e.key;
        const OptionSpec* spec = find_option(key);
        if (spec == nullptr || !spec->profile_key) {
            std::string hint;
            if (spec != nullptr) {
                hint = fmt::format("'{}' is a command-line option only", e.key);
            } else if (auto s = suggest_option(e.key); !s.empty()) {
                hint = fmt::format("did you mean '{}'?", s);
            } else {
                hint = "see `pyjail --help` for the keys";
            }
            throw UsageError(fmt::format("{}: unknown key '{}'", where, e.key), hint);
        }
        if (spec->kind == OptKind::List && !e.is_list)
            throw UsageError(fmt::format("{}: key '{}' takes a list, e.g. {} = [\"{}\"]", where,
                                         e.key, e.key, e.values.front()));
        if (spec->kind != OptKind::List && e.is_list)
            throw UsageError(fmt::format("{}: key '{}' takes one value, not a list", where, e.key));
        auto& items = settings[key];
        items.clear();
        for (const auto& v : e.values) items.push_back({v, Source::Profile, where});
    }
}

namespace {

// The profile's `extends` entry, or null; it holds one non-empty name (the parser refuses a
// key set twice).
const ProfileEntry* extends_entry(const Profile& p) {
    const ProfileEntry* found = nullptr;
    for (const auto& e : p.entries) {
        if (e.key != "extends") continue;
        std::string where = fmt::format("{}:{}", p.path, e.line);
        if (e.is_list || e.values.size() != 1 || e.values[0].empty())
            throw UsageError(fmt::format("{}: key 'extends' takes one profile name or file", where),
                             "e.g. extends = \"standard\" or extends = \"base.toml\"");
        found = &e;
    }
    return found;
}

}  // namespace

std::vector<Profile> profile_chain(const std::string& name, const ProfileLoader& load) {
    std::vector<Profile> chain;  // leaf first, reversed at the end
    std::vector<std::string> seen;
    std::optional<std::string> root_identity;
    std::string next = name, from, where;  // where: "FILE:LINE" of the `extends` naming next
    while (true) {
        LoadedProfile loaded;
        try {
            loaded = load(next, from);
        } catch (const JailError& e) {
            if (where.empty()) throw;
            std::string why = e.message();
            if (e.err() != 0) why += std::string(": ") + std::strerror(e.err());
            throw UsageError(fmt::format("{}: extends '{}': {}", where, next, why), e.hint());
        }
        for (std::size_t i = 0; i < seen.size(); ++i)
            if (seen[i] == loaded.identity) {
                std::string path;
                for (std::size_t j = i; j < chain.size(); ++j) path += chain[j].path + " -> ";
                throw UsageError(fmt::format("{}: profiles extend each other in a cycle: {}{}", where,
                                             path, loaded.path),
                                 "remove one of their `extends` lines");
            }
        if (chain.size() >= static_cast<std::size_t>(kMaxProfileDepth))
            throw UsageError(fmt::format("{}: profiles extend each other more than {} deep", where,
                                         kMaxProfileDepth),
                             "extend a shipped profile directly");
        seen.push_back(loaded.identity);
        chain.push_back(parse_profile(loaded.text, loaded.path));
        const ProfileEntry* base = extends_entry(chain.back());
        if (base != nullptr) {
            next = base->values[0];
            where = fmt::format("{}:{}", loaded.path, base->line);
        } else {
            // No `extends`: strict, unless this is strict itself.
            if (!root_identity) root_identity = next == kRootProfile ? loaded.identity : load(kRootProfile, "").identity;
            if (loaded.identity == *root_identity) break;
            next = kRootProfile;
            where = fmt::format("{} (no `extends`: based on {})", loaded.path, kRootProfile);
        }
        from = loaded.path;
    }
    std::reverse(chain.begin(), chain.end());
    return chain;
}

Settings settings_from_chain(const std::vector<Profile>& chain) {
    Settings s = default_settings();
    for (const auto& p : chain) apply_profile(s, p);
    return s;
}

std::string profile_description(std::string_view text, std::string_view name) {
    std::string line;
    for (std::size_t start = 0; start < text.size();) {
        std::size_t end = std::min(text.find('\n', start), text.size());
        std::string_view l = text.substr(start, end - start);
        start = end + 1;
        std::size_t first = l.find_first_not_of(" \t\r");
        if (first == std::string_view::npos) continue;  // blank lines before the comment
        if (l[first] != '#') break;                       // a key: the file opens with none
        l.remove_prefix(first + 1);
        first = l.find_first_not_of("# \t");
        if (first == std::string_view::npos) continue;  // a rule or an empty comment line
        line = std::string(l.substr(first));
        break;
    }
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    const std::string prefix = std::string(name) + ": ";
    if (line.rfind(prefix, 0) == 0) line.erase(0, prefix.size());
    if (line.size() > kMaxDescription) {
        std::size_t cut = kMaxDescription - 3;
        while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
        line = line.substr(0, cut) + "...";
    }
    for (char& c : line)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return line;
}

}  // namespace pyjail
