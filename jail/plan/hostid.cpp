#include "hostid.hpp"

#include <fmt/format.h>

#include "error.hpp"

namespace pyjail {

namespace {

std::optional<std::uint64_t> parse_u64(std::string_view text) {
    if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    std::uint64_t n = 0;
    for (char c : text) n = n * 10 + static_cast<std::uint64_t>(c - '0');
    return n;
}

// A range of ids a jail may take: no id 0 (host root) and nothing past 2^32-2 ((uid_t)-1 is
// "no id").
bool usable_range(std::uint64_t first, std::uint64_t count) {
    return first > 0 && count > 0 && first + count - 1 <= 0xfffffffeull;
}

std::string_view next_line(std::string_view& text) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    return line;
}

}  // namespace

HostIdsSetting parse_host_ids(std::string_view value, const std::string& where) {
    HostIdsSetting s;
    if (value == "auto") return s;
    if (value == "shared") {
        s.mode = HostIdsSetting::Mode::Shared;
        return s;
    }
    std::size_t colon = value.find(':');
    auto first = parse_u64(value.substr(0, colon));
    auto count = colon == std::string_view::npos ? std::nullopt : parse_u64(value.substr(colon + 1));
    if (!first || !count)
        throw UsageError(fmt::format("{}: '{}' is not auto, shared or FIRST:COUNT", where, value),
                         fmt::format("e.g. {}:{}", kDefaultRootIdRange.first, kDefaultRootIdRange.count));
    if (!usable_range(*first, *count))
        throw UsageError(fmt::format("{}: {} ids from {} include uid 0 or pass 4294967294", where, *count, *first),
                         "choose a range of unused ids above every real user's");
    s.mode = HostIdsSetting::Mode::Range;
    s.range = {static_cast<std::uint32_t>(*first), static_cast<std::uint32_t>(*count)};
    return s;
}

const char* host_id_kind_name(HostIdKind k) {
    switch (k) {
        case HostIdKind::OwnRange: return "range";
        case HostIdKind::Subordinate: return "subordinate";
        case HostIdKind::HostUser: return "host-user";
        case HostIdKind::Invoker: return "invoker";
    }
    return "?";
}

std::optional<IdRange> find_subordinate_range(std::string_view text, const std::string& name, uid_t uid) {
    const std::string uid_text = std::to_string(uid);
    while (!text.empty()) {
        std::string_view line = next_line(text);
        std::size_t c1 = line.find(':');
        std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string_view::npos) continue;
        std::string_view who = line.substr(0, c1);
        if (who != uid_text && (name.empty() || who != name)) continue;
        auto first = parse_u64(line.substr(c1 + 1, c2 - c1 - 1));
        auto count = parse_u64(line.substr(c2 + 1));
        if (!first || !count || !usable_range(*first, *count)) continue;
        return IdRange{static_cast<std::uint32_t>(*first), static_cast<std::uint32_t>(*count)};
    }
    return std::nullopt;
}

std::string passwd_name(std::string_view text, uid_t uid) {
    const std::string uid_text = std::to_string(uid);
    while (!text.empty()) {
        std::string_view line = next_line(text);
        std::size_t c1 = line.find(':');
        std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
        std::size_t c3 = c2 == std::string_view::npos ? c2 : line.find(':', c2 + 1);
        if (c3 == std::string_view::npos) continue;
        if (line.substr(c2 + 1, c3 - c2 - 1) == uid_text) return std::string(line.substr(0, c1));
    }
    return {};
}

bool range_is_mapped(const std::string& map_text, IdRange r) {
    if (map_text.empty()) return true;
    std::string_view text = map_text;
    while (!text.empty()) {
        std::string_view line = next_line(text);
        std::uint64_t v[3];
        std::size_t n = 0;
        for (std::size_t at = 0; n < 3;) {
            at = line.find_first_not_of(' ', at);
            if (at == std::string_view::npos) break;
            std::size_t end = line.find(' ', at);
            auto x = parse_u64(line.substr(at, end == std::string_view::npos ? end : end - at));
            if (!x) break;
            v[n++] = *x;
            if (end == std::string_view::npos) break;
            at = end;
        }
        // "inside outside count": ids of this namespace are the inside column.
        if (n == 3 && r.first >= v[0] && std::uint64_t{r.first} + r.count <= v[0] + v[2]) return true;
    }
    return false;
}

HostIdPlan plan_host_ids(const HostIdFacts& f) {
    HostIdPlan p;
    const bool root = f.invoker_uid == 0;
    using Mode = HostIdsSetting::Mode;
    if (root) {
        p.files_uid = f.host_user_uid;
        p.files_gid = f.host_user_gid;
        // In a container, root's user namespace maps only some ids, and root there cannot make
        // an idmapped mount of the host's file systems: its jails keep --host-user.
        const bool mapped = range_is_mapped(f.own_uid_map, f.setting.range) &&
                            range_is_mapped(f.own_gid_map, f.setting.range);
        if (f.host_user_explicit || f.setting.mode == Mode::Shared || !mapped) {
            p.kind = HostIdKind::HostUser;
            p.uids = {f.host_user_uid, 1};
            p.gids = {f.host_user_gid, 1};
            p.shared_with = fmt::format("host user uid {}", f.host_user_uid);
            p.why_shared = f.host_user_explicit              ? "--host-user names a fixed user"
                           : f.setting.mode == Mode::Shared ? "--host-ids shared"
                                                            : fmt::format("the ids {}:{} are not mapped in pyjail's user "
                                                                          "namespace (a container?)",
                                                                          f.setting.range.first, f.setting.range.count);
            return p;
        }
        p.kind = HostIdKind::OwnRange;
        p.uids = p.gids = f.setting.range;
        // Attack: a jail that leaves a file in a writable bind. Owned by the jail's id, it
        // would be open to the next jail that takes that id; so host binds are seen through
        // an idmapped mount as --host-user's, as they were before jails had ids of their own.
        p.idmap_binds = !f.host_binds.empty();
        p.lock_dir = kRootLockDir;
        return p;
    }
    if (f.setting.mode == Mode::Range)
        throw UsageError("--host-ids FIRST:COUNT: only root gives jails ids of a range it chooses",
                         "a user's jails take ids of the user's range in /etc/subuid and /etc/subgid");
    p.files_uid = f.invoker_uid;
    p.files_gid = f.invoker_gid;
    auto shared = [&](std::string why) {
        p.kind = HostIdKind::Invoker;
        p.uids = {f.invoker_uid, 1};
        p.gids = {f.invoker_gid, 1};
        p.shared_with = fmt::format("the invoking user (uid {})", f.invoker_uid);
        p.why_shared = std::move(why);
        return p;
    };
    if (f.setting.mode == Mode::Shared) return shared("--host-ids shared");
    auto uids = find_subordinate_range(f.subuid_text, f.invoker_name, f.invoker_uid);
    auto gids = find_subordinate_range(f.subgid_text, f.invoker_name, f.invoker_uid);
    if (!uids || !gids)
        return shared(fmt::format("no subordinate id range for this user in /etc/{} (root can give one: "
                                  "usermod --add-subuids FIRST-LAST --add-subgids FIRST-LAST {})",
                                  !uids ? "subuid" : "subgid",
                                  f.invoker_name.empty() ? std::to_string(f.invoker_uid) : f.invoker_name));
    if (f.newuidmap.empty() || f.newgidmap.empty())
        return shared("newuidmap/newgidmap are missing (install the uidmap package)");
    // The jail would read and write a bind as an id of the range, which is not the user's:
    // the user's own files would be out of its reach, and what it wrote the user's no more.
    if (!f.host_binds.empty())
        return shared(fmt::format("the jail sees {} of the user's files (a bind), which only the user's "
                                  "own id may read and write",
                                  f.host_binds.front()));
    p.kind = HostIdKind::Subordinate;
    p.uids = *uids;
    p.gids = *gids;
    p.uids.count = p.gids.count = std::min(uids->count, gids->count);
    p.lock_dir = f.runtime_dir;
    p.lock_dir_also = f.runtime_dir_also;
    p.newuidmap = f.newuidmap;
    p.newgidmap = f.newgidmap;
    return p;
}

IdMaps host_id_maps(const HostIdPlan& plan, std::uint32_t index) {
    IdMaps m;
    m.host_uid = static_cast<uid_t>(plan.uids.first + index);
    m.host_gid = static_cast<gid_t>(plan.gids.first + index);
    if (index >= plan.uids.count || m.host_uid == 0 || m.host_gid == 0)
        throw JailError("idmap", "the jail user would be host root (uid or gid 0)", 0,
                        "set --host-user to an unprivileged user such as nobody");
    m.uid_map = fmt::format("{} {} 1\n", kJailUid, m.host_uid);
    m.gid_map = fmt::format("{} {} 1\n", kJailGid, m.host_gid);
    return m;
}

std::vector<std::string> newidmap_argv(const std::string& helper, pid_t pid, const std::string& map) {
    std::vector<std::string> argv{helper, std::to_string(pid)};
    std::string_view rest = map;
    while (!rest.empty()) {
        std::size_t sp = rest.find_first_of(" \n");
        if (sp != 0) argv.emplace_back(rest.substr(0, sp));
        rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    }
    return argv;
}

std::string idmapped_bind_map(std::uint32_t on_disk, std::uint32_t jail_host_id) {
    // Every other id maps to itself: the kernel refuses any write to an inode whose owner the
    // mount cannot map (a root-owned 0777 directory would turn read-only), and other users'
    // files stay theirs. The jail's own id is left unmapped on disk: a file owned by it shows
    // as nobody's.
    std::string map = fmt::format("{} {} 1\n", on_disk, jail_host_id);
    if (on_disk == jail_host_id) return map;
    const std::uint64_t a = std::min(on_disk, jail_host_id), b = std::max(on_disk, jail_host_id);
    const std::uint64_t end = 0xffffffffull;  // (uid_t)-1 is never an id
    auto same = [&](std::uint64_t from, std::uint64_t to) {
        if (to > from) map += fmt::format("{} {} {}\n", from, from, to - from);
    };
    same(0, a);
    same(a + 1, b);
    same(b + 1, end);
    return map;
}

std::string user_lock_dir(const char* xdg_runtime_dir, uid_t uid) {
    if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') return std::string(xdg_runtime_dir) + "/pyjail-ids";
    return fmt::format("/tmp/pyjail-ids-{}", uid);
}

std::string user_lock_dir_also(const char* xdg_runtime_dir, uid_t uid) {
    std::string fallback = user_lock_dir(nullptr, uid);
    return user_lock_dir(xdg_runtime_dir, uid) == fallback ? std::string() : fallback;
}

std::optional<JailError> lock_dir_refusal(const std::string& dir, const LockDirFacts& f, uid_t euid) {
    const bool root = euid == 0;
    const bool is_dir = f.kind == LockDirFacts::Kind::Directory;
    const char* kind = f.kind == LockDirFacts::Kind::Link ? "a symbolic link" : "not a directory";
    const std::string what = fmt::format("{}, where your jails lock their host ids,", dir);
    if (f.owner != euid) {
        // No way around it is taken, only told: a fallback directory would part this user's
        // runs, since the owner may remove it whenever it likes (its own, in a sticky /tmp),
        // and the next run would then lock in the usual place while earlier ones still held
        // ids in the fallback -- two jails with one id. Every run locks where the runs without
        // a runtime directory lock (user_lock_dir_also).
        return JailError("host ids",
                         fmt::format("{} belongs to {}, not to you{}, so that user could hold or forge "
                                     "your jails' locks",
                                     what, f.owner_named, is_dir ? "" : fmt::format(" (and is {})", kind)),
                         0,
                         root ? fmt::format("remove it (rm -r {}): pyjail makes it again", dir)
                              : fmt::format("another user made it first: root or its owner can remove it "
                                            "(rm -r {}); until then --host-ids shared runs your jails as "
                                            "you, without a lock, or set XDG_RUNTIME_DIR to a directory of "
                                            "your own to lock there",
                                            dir));
    }
    if (!is_dir)
        return JailError("host ids", fmt::format("{} is {}", what, kind), 0,
                         fmt::format("remove it (rm {}): pyjail makes the directory again", dir));
    if ((f.permissions & (root ? 022u : 077u)) != 0)
        return JailError("host ids",
                         fmt::format("{} is open to others (mode {:o}), who could hold or forge your "
                                     "jails' locks",
                                     what, f.permissions),
                         0, fmt::format("chmod {} {}", root ? "go-w" : "700", dir));
    return std::nullopt;
}

}  // namespace pyjail
