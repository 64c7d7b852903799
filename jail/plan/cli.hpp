// The command line, parsed by CLI11 from a model built from the option table (options.hpp):
// `pyjail [OPTIONS] [--] COMMAND [ARGS...]` and its subcommands, `serve` (the same options),
// `doctor` and `rootfs` (their own), `profiles` and `launcher` (none: launcher.hpp). It only collects text; checking values is policy.cpp's
// job, the same as for profiles, so both report bad values the same way.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"

namespace pyjail {

enum class Subcommand { Run, Serve, Doctor, Rootfs, Profiles, Launcher };

struct CliArgs {
    Subcommand subcommand = Subcommand::Run;
    std::map<std::string, std::vector<std::string>, std::less<>> given;  // option -> values given
    std::vector<std::string> command;
    std::optional<int> exit_now;  // --help / --version were answered: exit with this
    std::string output;           // what to print for --help / --version
    bool help = false;            // --help: `output` shows the built-in defaults
    // pyjail doctor [--json] [--rootfs NAME|DIR ...]
    bool doctor_json = false;
    std::vector<std::string> doctor_rootfses;
    // pyjail rootfs ARGS...: the builder's own command line (rootfs_command.hpp)
    std::vector<std::string> rootfs_args;
};

// `args` excludes argv[0]. Throws UsageError for unknown options and missing values, and for
// what a subcommand does not take (a command for serve, a run's option for doctor).
CliArgs parse_cli(const std::vector<std::string>& args);

// Lays the command line over settings: it replaces profile values and appends to lists.
void apply_cli(Settings& settings, const CliArgs& cli);

// --help, with the built-in defaults, or with each option's value under a profile.
std::string usage_text();
std::string usage_text(const Settings& values, const std::string& profile);

// The profile `--help` is asked about (the last --profile before `--`), if one is named.
std::optional<std::string> help_profile(const std::vector<std::string>& args);

}  // namespace pyjail
