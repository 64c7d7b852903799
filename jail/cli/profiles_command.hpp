// `pyjail profiles`: the profiles --profile NAME finds (host/paths.hpp, list_profiles), each
// with the first line of its file's opening comment (profile.hpp, profile_description) and
// the file it is read from.
#pragma once

#include <string>
#include <vector>

namespace pyjail {

// One profile as listed: `problem` is why it cannot be used ("" when it can).
struct ProfileListing {
    std::string name;
    std::string description;
    std::string path;
    bool is_default = false;
    std::string problem;
};

// A header, then per profile its name and description, and below them its file. Pure.
std::string format_profile_list(const std::vector<ProfileListing>& profiles);

// Prints the list and returns the exit status: 0, or 125 when no profile is found.
int run_profiles_command();

}  // namespace pyjail
