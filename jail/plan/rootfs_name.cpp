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
    // No leading '.' or '-': not "..", not a hidden directory, not an option.
    if (!alnum(name[0])) return "it must start with a letter or a digit";
    for (char c : name)
        if (!alnum(c) && c != '.' && c != '_' && c != '-')
            return "it may hold only letters, digits, '.', '_' and '-'";
    return "";
}

namespace {

bool ends_in_builder_token(std::string_view name) {
    constexpr std::size_t token = 8;  // tempfile.mkdtemp's random part
    if (name.size() < token) return false;
    for (char c : name.substr(name.size() - token)) {
        bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_';
        if (!word) return false;
    }
    std::string_view head = name.substr(0, name.size() - token);
    for (std::string_view kind : {"tmp-", "pip-", "old-"}) {
        if (!head.ends_with(kind)) continue;
        head.remove_suffix(kind.size());
        return head.ends_with(".pyjail-") || head.ends_with(".");
    }
    return false;
}

}  // namespace

bool is_builder_sibling_name(std::string_view name) {
    // "NAME.pyjail-tmp-XXXXXXXX.old": the previous tree, on a kernel without renameat2.
    return ends_in_builder_token(name) ||
           (name.ends_with(".old") && ends_in_builder_token(name.substr(0, name.size() - 4)));
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
