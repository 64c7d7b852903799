#include "hostroot.hpp"

namespace pyjail {

namespace {

// The n-th space-separated field of `s` (0-based), or "".
std::string_view field(std::string_view s, std::size_t n) {
    std::size_t i = 0;
    for (std::size_t k = 0;; ++k) {
        while (i < s.size() && s[i] == ' ') ++i;
        std::size_t start = i;
        while (i < s.size() && s[i] != ' ') ++i;
        if (start == i) return {};
        if (k == n) return s.substr(start, i - start);
    }
}

}  // namespace

bool root_is_initramfs(std::string_view mountinfo) {
    bool initramfs = false;
    while (!mountinfo.empty()) {
        std::size_t nl = mountinfo.find('\n');
        std::string_view line = mountinfo.substr(0, nl);
        mountinfo = nl == std::string_view::npos ? std::string_view() : mountinfo.substr(nl + 1);
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER"
        if (field(line, 4) != "/") continue;
        std::size_t dash = line.find(" - ");
        if (dash == std::string_view::npos) continue;
        // A later mount on / hides the earlier one: the last decides. Only the initial rootfs
        // itself is its own parent; a bind of it moved onto / (as a VM's or a container's init
        // makes) is a mount pivot_root can leave.
        initramfs = field(line.substr(dash + 3), 0) == "rootfs" && field(line, 0) == field(line, 1);
    }
    return initramfs;
}

}  // namespace pyjail
