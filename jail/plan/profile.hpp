// Profile files: a small, strict subset of TOML. One `key = value` per line, where value is a
// "string", a 'literal string', a number, true/false, or an [array, of, those] (which may span
// lines); `#` starts a comment. Keys are the long option names of option_table(). Anything
// else is an error that names the file, the line and the key.
#pragma once

#include <cstddef>
#include <functional>
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

// A profile's base: `extends = "strict"|"standard"|"batch"|FILE` (any profile name, or a file,
// relative to the directory of the profile that names it). A profile without `extends` starts
// from strict, so that a hand-written profile keeps strict's limits for the keys it leaves
// out; strict itself (the shipped one) starts from the built-in defaults of option_table().
// Each profile's keys replace its base's, a list as a whole.
inline constexpr const char* kRootProfile = "strict";
inline constexpr int kMaxProfileDepth = 8;

// A profile as read: its path (for messages and relative bases), its text, and what makes it
// the same file as another (for cycles), e.g. its real path.
struct LoadedProfile {
    std::string path;
    std::string text;
    std::string identity;
};

// Reads a profile by name or path; `from` is the path of the profile that names it ("" for
// the command line). Throws (UsageError, JailError) when there is none.
using ProfileLoader = std::function<LoadedProfile(const std::string& name_or_path, const std::string& from)>;

// The chain of profiles `name` stands for, its root first: the profile, its `extends`, and so
// on down to strict. Throws UsageError (one line, exit 125) for a missing base (naming the
// file and line of its `extends`), a cycle, a chain deeper than kMaxProfileDepth, or an
// `extends` that is not one name.
std::vector<Profile> profile_chain(const std::string& name, const ProfileLoader& load);

// default_settings() with each profile of the chain laid over it in turn.
Settings settings_from_chain(const std::vector<Profile>& chain);

// What `pyjail profiles` says of a profile: the first line of the comment that opens its file
// (before any key), without `#`, the spaces around it and a leading "NAME: "; at most
// kMaxDescription bytes, each byte a terminal would act on (a control character) shown as
// '?'. "" when the file opens with no comment.
inline constexpr std::size_t kMaxDescription = 100;
std::string profile_description(std::string_view text, std::string_view name);

}  // namespace pyjail
