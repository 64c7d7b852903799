// Who could have planted a host path: the rule pyjail applies before it reads or writes a host
// file that another user might control -- its own data (profiles, rootfs, compiled filters),
// root's fallback for a script the jail's host user cannot read, the report file. It is the
// rule sshd and sudo apply to their own files: every directory on the way and the file itself
// belong to a trusted user and nobody else can write them. Pure: facts in, a reason out.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace pyjail {

// What stat() says about one path component (st_mode holds the file type bits too).
struct NodeFacts {
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::uint32_t mode = 0;
    std::uint64_t nlink = 1;
};

// The users whose files pyjail trusts: root and whoever runs pyjail; and the groups nobody
// else is in (root's group, when only root is in it: a tree root unpacked from a tarball, or
// made with a umask of 002, has directories writable by group 0).
struct TrustedIds {
    std::vector<std::uint32_t> uids;
    std::vector<std::uint32_t> gids;
    TrustedIds(std::initializer_list<std::uint32_t> u, std::vector<std::uint32_t> g = {})
        : uids(u), gids(std::move(g)) {}
};

bool is_trusted(std::uint32_t uid, const TrustedIds& trusted);

// Why someone not in `trusted` could change `node` itself (a file's bytes, a directory's
// entries): "owned by uid 1000", "writable by group 27", "writable by everyone"; "" when
// nobody else can (a group in `trusted.gids` may write). A sticky directory (/tmp) counts as writable by others: anyone may add
// entries to it.
std::string who_else_writes(const NodeFacts& node, const TrustedIds& trusted);

// Why an entry of `dir` could have been planted, or swapped for another, by someone not in
// `trusted`; "" when it could not. Nobody else writes the directory; or it is a sticky
// directory of a trusted owner and a trusted user owns the entry (in a sticky directory only
// an entry's owner and the directory's owner may rename or remove it).
std::string who_could_plant(const NodeFacts& dir, const NodeFacts& entry, const TrustedIds& trusted);

// A directory on the way to a trusted file (`name`, an entry of `parent`): "" or why it is not
// trusted, naming the culprit ("/tmp/job is owned by uid 1000"). A sticky directory of a trusted owner may be on the way (/tmp holding a trusted
// install); the next component is then checked by who_could_plant.
std::string untrusted_directory_on_the_way(const std::string& parent_path, const NodeFacts& parent,
                                           const std::string& dir_path, const NodeFacts& dir,
                                           const TrustedIds& trusted);

// The file (or data directory) at the end of a trusted path: "" or why it is not trusted.
// `protected_hardlinks`: fs.protected_hardlinks is 1, so nobody could have linked a file they
// may not write; without it a second link of a trusted file in a directory others write may
// be anyone's (a hard link keeps the owner and mode of the file it names).
std::string untrusted_end(const std::string& parent_path, const NodeFacts& parent,
                          const std::string& path, const NodeFacts& node, const TrustedIds& trusted,
                          bool protected_hardlinks);

// Whether an existing file at the report path may be written (opened without O_TRUNC, not yet
// truncated): "" or why not. Only a regular file; not one that another user put in a sticky
// directory others write (the kernel's protected_regular rule, whatever the sysctl says); not
// a second link of a file in a directory others write when links are not protected.
std::string report_file_refusal(const NodeFacts& dir, const NodeFacts& file, std::uint32_t euid,
                                bool protected_hardlinks);

}  // namespace pyjail
