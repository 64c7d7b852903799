#include "profiles_command.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "error.hpp"
#include "options.hpp"
#include "paths.hpp"
#include "profile.hpp"

namespace pyjail {

namespace {

// A file name as a terminal shows it: a control character in it is not acted on.
std::string listed_printable(std::string s) {
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return s;
}

}  // namespace

std::string format_profile_list(const std::vector<ProfileListing>& profiles) {
    std::size_t width = 8;
    for (const auto& p : profiles) width = std::max(width, p.name.size());
    std::string out = fmt::format("{:<{}}  DESCRIPTION\n", "NAME", width);
    for (const auto& p : profiles) {
        std::string about = p.problem.empty() ? p.description : "cannot be used: " + p.problem;
        out += fmt::format("{:<{}}  {}\n", listed_printable(p.name), width, listed_printable(about));
        out += fmt::format("{:<{}}  {}{}\n", "", width, listed_printable(p.path), p.is_default ? " (the default)" : "");
    }
    return out;
}

int run_profiles_command() {
    DataDirs dirs = find_data_dirs();
    const std::string default_name = setting(default_settings(), "profile").value;
    std::vector<ProfileListing> listed;
    for (const auto& name : list_profiles(dirs)) {
        ProfileListing p{name, "", dirs.profiles + "/" + name + ".toml", name == default_name, ""};
        // Read as --profile NAME reads it: a file others could change is not used, and says so.
        try {
            FoundFile f = read_profile(name, dirs);
            p.path = f.path;
            p.description = profile_description(f.text, name);
        } catch (const JailError& e) {
            p.problem = e.one_line();
        }
        listed.push_back(std::move(p));
    }
    if (listed.empty())
        throw JailError("profiles", fmt::format("no profiles in {}", dirs.profiles), 0,
                        "reinstall pyjail (cmake --install), or give --profile a profile file");
    std::fputs(format_profile_list(listed).c_str(), stdout);
    return 0;
}

}  // namespace pyjail
