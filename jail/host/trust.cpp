#include "trust.hpp"

#include <sys/stat.h>

#include <algorithm>

#include <fmt/format.h>

namespace pyjail {

namespace {

std::string kind_of(std::uint32_t mode) {
    switch (mode & S_IFMT) {
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO";
        case S_IFSOCK: return "a socket";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        case S_IFLNK: return "a symbolic link";
        default: return "not a regular file";
    }
}

bool others_may_add_entries(const NodeFacts& dir) { return (dir.mode & (S_IWGRP | S_IWOTH)) != 0; }

}  // namespace

bool is_trusted(std::uint32_t uid, const TrustedIds& trusted) {
    return std::find(trusted.uids.begin(), trusted.uids.end(), uid) != trusted.uids.end();
}

std::string who_else_writes(const NodeFacts& node, const TrustedIds& trusted) {
    if (!is_trusted(node.uid, trusted)) return fmt::format("owned by uid {}", node.uid);
    if ((node.mode & S_IWOTH) != 0) return "writable by everyone";
    if ((node.mode & S_IWGRP) != 0 &&
        std::find(trusted.gids.begin(), trusted.gids.end(), node.gid) == trusted.gids.end())
        return fmt::format("writable by group {}", node.gid);
    return "";
}

std::string who_could_plant(const NodeFacts& dir, const NodeFacts& entry, const TrustedIds& trusted) {
    std::string why = who_else_writes(dir, trusted);
    if (why.empty()) return "";
    // /tmp: others add entries, but cannot rename or remove one a trusted user owns.
    if ((dir.mode & S_ISVTX) != 0 && is_trusted(dir.uid, trusted) && is_trusted(entry.uid, trusted))
        return "";
    return why;
}

std::string untrusted_directory_on_the_way(const std::string& parent_path, const NodeFacts& parent,
                                           const std::string& dir_path, const NodeFacts& dir,
                                           const TrustedIds& trusted) {
    // The directory itself first: it names the culprit (/tmp/job, not /tmp).
    std::string why = who_else_writes(dir, trusted);
    // A sticky directory of a trusted owner may hold the path; its next entry must then be a
    // trusted user's (who_could_plant, on the next step).
    if (!why.empty() && !((dir.mode & S_ISVTX) != 0 && is_trusted(dir.uid, trusted)))
        return fmt::format("{} is {}", dir_path, why);
    if (std::string plant = who_could_plant(parent, dir, trusted); !plant.empty())
        return fmt::format("{} is {}", parent_path, plant);
    return "";
}

std::string untrusted_end(const std::string& parent_path, const NodeFacts& parent,
                          const std::string& path, const NodeFacts& node, const TrustedIds& trusted,
                          bool protected_hardlinks) {
    if (std::string why = who_else_writes(node, trusted); !why.empty())
        return fmt::format("{} is {}", path, why);
    if (std::string plant = who_could_plant(parent, node, trusted); !plant.empty())
        return fmt::format("{} is {}", parent_path, plant);
    // In a directory others write, a second link of a trusted file may be anyone's plant
    // (a hard link to /etc/shadow keeps root as its owner), unless the kernel forbids linking
    // files one may not write.
    if (!S_ISDIR(node.mode) && node.nlink > 1 && !protected_hardlinks && others_may_add_entries(parent))
        return fmt::format("{} has {} hard links in {}, which others can write "
                           "(and fs.protected_hardlinks is off)",
                           path, node.nlink, parent_path);
    return "";
}

std::string report_file_refusal(const NodeFacts& dir, const NodeFacts& file, std::uint32_t euid,
                                bool protected_hardlinks) {
    // A FIFO would hang pyjail in open() or write(), a device would take the report.
    if (!S_ISREG(file.mode)) return fmt::format("it is {}, not a regular file", kind_of(file.mode));
    // protected_regular: a file another user left in /tmp is theirs to swap or read back.
    if ((dir.mode & S_ISVTX) != 0 && others_may_add_entries(dir) && file.uid != euid && file.uid != dir.uid)
        return fmt::format("it belongs to uid {} and lies in a sticky directory others can write",
                           file.uid);
    // A planted hard link would make us truncate the file it names.
    if (file.nlink > 1 && !protected_hardlinks && !who_else_writes(dir, {0, euid}).empty())
        return fmt::format("it has {} hard links and lies in a directory others can write "
                           "(and fs.protected_hardlinks is off)",
                           file.nlink);
    return "";
}

}  // namespace pyjail
