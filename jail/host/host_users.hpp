// The host's users and groups, read from the text of /etc/passwd and /etc/group, never through
// NSS: pyjail is linked statically, and a static binary cannot load NSS modules (glibc warns
// at link time that getpwuid would need the shared libraries of the build machine's glibc).
// Pure: file text in, facts out. Malformed lines are skipped.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

struct PasswdEntry {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::string home;
};

// The first entry for `uid` in an /etc/passwd text.
std::optional<PasswdEntry> passwd_entry_of(std::string_view passwd_text, uid_t uid);

// Whether every user who is in group `gid` is one of `uids`: each user whose primary group it
// is (/etc/passwd), and each member /etc/group lists (by name, looked up in /etc/passwd). A
// group /etc/group does not list, or a member with no passwd entry, counts as untrusted: its
// members are unknown.
bool group_holds_only(std::string_view passwd_text, std::string_view group_text, gid_t gid,
                      const std::vector<std::uint32_t>& uids);

}  // namespace pyjail
