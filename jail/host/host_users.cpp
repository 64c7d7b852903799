#include "host_users.hpp"

#include <algorithm>

#include "whole_number.hpp"

namespace pyjail {

namespace {

std::string_view next_line(std::string_view& text) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    return line;
}

// Splits `line` at ':' into at most `want` fields; the count found.
std::size_t split_fields(std::string_view line, std::string_view* field, std::size_t want) {
    std::size_t n = 0;
    for (std::size_t from = 0; n < want; ++n) {
        std::size_t colon = line.find(':', from);
        field[n] = line.substr(from, colon == std::string_view::npos ? std::string_view::npos : colon - from);
        if (colon == std::string_view::npos) return n + 1;
        from = colon + 1;
    }
    return n;
}

// name:password:uid:gid:gecos:home:shell
std::optional<PasswdEntry> parse_passwd_line(std::string_view line) {
    std::string_view f[7];
    if (split_fields(line, f, 7) < 6) return std::nullopt;
    auto uid = whole_number<std::uint32_t>(f[2]);
    auto gid = whole_number<std::uint32_t>(f[3]);
    if (!uid || !gid || f[0].empty()) return std::nullopt;
    return PasswdEntry{std::string(f[0]), *uid, *gid, std::string(f[5])};
}

}  // namespace

std::optional<PasswdEntry> passwd_entry_of(std::string_view passwd_text, uid_t uid) {
    while (!passwd_text.empty())
        if (auto e = parse_passwd_line(next_line(passwd_text)); e && e->uid == uid) return e;
    return std::nullopt;
}

bool group_holds_only(std::string_view passwd_text, std::string_view group_text, gid_t gid,
                      const std::vector<std::uint32_t>& uids) {
    auto trusted = [&](uid_t u) { return std::find(uids.begin(), uids.end(), u) != uids.end(); };
    std::vector<PasswdEntry> users;
    for (std::string_view t = passwd_text; !t.empty();)
        if (auto e = parse_passwd_line(next_line(t))) {
            if (e->gid == gid && !trusted(e->uid)) return false;
            users.push_back(std::move(*e));
        }
    // name:password:gid:member,member,...
    bool listed = false;
    for (std::string_view t = group_text; !t.empty();) {
        std::string_view f[4];
        if (split_fields(next_line(t), f, 4) != 4 || whole_number<std::uint32_t>(f[2]) != gid) continue;
        listed = true;
        for (std::string_view members = f[3]; !members.empty();) {
            std::size_t comma = members.find(',');
            std::string_view name = members.substr(0, comma);
            members = comma == std::string_view::npos ? std::string_view() : members.substr(comma + 1);
            if (name.empty()) continue;
            auto u = std::find_if(users.begin(), users.end(), [&](const PasswdEntry& e) { return e.name == name; });
            if (u == users.end() || !trusted(u->uid)) return false;
        }
    }
    return listed;
}

}  // namespace pyjail
