// Profile files: a small, strict subset of TOML. One `key = value` per line, where value is a
// "string", a 'literal string', a number, true/false, or an [array, of, those] (which may span
// lines); `#` starts a comment. Keys are the long option names of option_table(). Anything
// else is an error that names the file, the line and the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "options.hpp"

namespace pyjail {

struct ProfileEntry {
    std::string key;
    std::vector<std::string> values;
    bool is_list = false;
    int line = 0;
};

struct Profile {
    std::string path;
    std::vector<ProfileEntry> entries;
};

// Parses the text of a profile; `path` is only used in messages. Throws UsageError.
Profile parse_profile(std::string_view text, const std::string& path);

// Lays a profile over `settings`: its values replace the defaults. Throws UsageError for keys
// that are not profile keys, or a list where one value is expected and the reverse.
void apply_profile(Settings& settings, const Profile& profile);

}  // namespace pyjail
