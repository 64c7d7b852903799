// The one table of settings. Every profile key is also a command-line option with the same
// name, so this table feeds the CLI parser, the profile reader, --explain and the docs alike.
// Values stay text here; policy.cpp turns them into typed values and names the origin of any
// bad one.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

enum class OptKind {
    Text,  // one value; a later source replaces an earlier one
    List,  // repeatable; the command line appends to what the profile set
    Flag,  // command line only, no value
};

struct OptionSpec {
    std::string_view name;           // long option and profile key, e.g. "wall-time"
    OptKind kind;
    std::string_view default_value;  // as it would be written on the command line
    std::string_view value_name;     // for --help, e.g. "SECONDS"
    std::string_view help;
    bool profile_key;                // may be set by a profile file
};

const std::vector<OptionSpec>& option_table();

// Whether the option's value is a number (SECONDS, N or X: wall-time, pids, cpus, ...), which
// --explain writes bare, as a profile may; sizes (512M) and words are strings.
bool is_number_option(const OptionSpec& o);
const OptionSpec* find_option(std::string_view name);

// The closest known profile key to a misspelt one, or "" when nothing is close (more than
// kTypoEdits away). `command_line`: among every option, also those no profile may set
// (--profile, --explain, ...).
std::string suggest_option(std::string_view unknown, bool command_line = false);

enum class Source { Default, Profile, CommandLine };

struct SettingItem {
    std::string value;
    Source source;
    std::string origin;  // "default", "FILE:LINE", or "--option"
};

// Settings by option name. Text options hold one item, lists any number, flags "true"/"false".
using Settings = std::map<std::string, std::vector<SettingItem>, std::less<>>;

Settings default_settings();

// The value of a Text/Flag setting, and where it came from.
const SettingItem& setting(const Settings& s, std::string_view name);

}  // namespace pyjail
