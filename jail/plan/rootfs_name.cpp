#include "rootfs_name.hpp"

namespace pyjail {

bool is_rootfs_name(std::string_view value) {
    return !value.empty() && value.find('/') == std::string_view::npos;
}

std::string rootfs_name_problem(std::string_view name) {
    if (name.empty()) return "it is empty";
    if (name.size() > 64) return "it is longer than 64 characters";
    auto alnum = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    };
    // No leading '.' or '-': not "..", not a hidden or temporary directory of the builder
    // (NAME.tmp-XXXX), not an option.
    if (!alnum(name[0])) return "it must start with a letter or a digit";
    for (char c : name)
        if (!alnum(c) && c != '.' && c != '_' && c != '-')
            return "it may hold only letters, digits, '.', '_' and '-'";
    return "";
}

std::string user_rootfs_dir(const char* xdg_data_home, const char* home) {
    if (xdg_data_home != nullptr && xdg_data_home[0] == '/')
        return std::string(xdg_data_home) + "/pyjail/rootfs";
    if (home != nullptr && home[0] == '/') return std::string(home) + "/.local/share/pyjail/rootfs";
    return "";
}

std::vector<RootfsDir> rootfs_search_dirs(const std::string& user_dir,
                                          const std::string& installed_dir) {
    std::vector<RootfsDir> out;
    if (!user_dir.empty()) out.push_back({"user", user_dir});
    if (!installed_dir.empty()) out.push_back({"installed", installed_dir});
    return out;
}

std::string rootfs_build_dir(unsigned euid, const std::string& user_dir,
                             const std::string& installed_dir) {
    return euid == 0 ? installed_dir : user_dir;
}

}  // namespace pyjail
