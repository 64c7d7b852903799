#include "policy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "error.hpp"
#include "rootfs_name.hpp"

namespace pyjail {

namespace {

// Prefix for messages about a value: "--wall-time" or "profiles/x.toml:3: key 'wall-time'".
std::string where(const SettingItem& item, std::string_view key) {
    if (item.source == Source::Profile) return fmt::format("{}: key '{}'", item.origin, key);
    if (item.source == Source::CommandLine) return item.origin;
    return fmt::format("default of {}", key);
}

// A dotted module name: identifiers (ASCII letters, digits, underscores, or any non-ASCII
// byte, as Python's identifiers may hold), none starting with a digit, joined by single dots.
bool module_name(std::string_view name) {
    if (name.empty()) return false;
    std::size_t start = 0;
    while (true) {
        std::size_t end = name.find('.', start);
        std::string_view part = name.substr(start, end == std::string_view::npos ? end : end - start);
        if (part.empty() || std::isdigit(static_cast<unsigned char>(part[0]))) return false;
        for (char c : part) {
            auto u = static_cast<unsigned char>(c);
            if (!(std::isalnum(u) || c == '_' || u >= 0x80)) return false;
        }
        if (end == std::string_view::npos) return true;
        start = end + 1;
    }
}

bool has_dotdot(const std::string& path) {
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        if (path.compare(start, end - start, "..") == 0 && end - start == 2) return true;
        start = end + 1;
    }
    return false;
}

bool parse_bool(const SettingItem& item, std::string_view key) {
    if (item.value == "true") return true;
    if (item.value == "false") return false;
    throw UsageError(fmt::format("{}: '{}' is not true or false", where(item, key), item.value));
}

// --net allow's hosts, pins and byte limit; each only with --net allow, so that a forgotten
// --net never silently drops a restriction the user thinks is in place.
void make_egress_policy(Policy& p, const Settings& settings, const SettingItem& net) {
    for (const auto& it : settings.at("allow-host"))
        for (auto& h : expand_allow_host(it.value, where(it, "allow-host"))) p.egress.hosts.push_back(std::move(h));
    for (const auto& it : settings.at("net-resolve"))
        p.egress.pins.push_back(parse_net_resolve(it.value, where(it, "net-resolve")));
    const auto& b = setting(settings, "net-bytes");
    if (!b.value.empty()) p.egress.bytes = parse_size(b.value, where(b, "net-bytes"));
    const auto& d = setting(settings, "net-dns");
    if (!d.value.empty()) parse_net_dns(d.value, where(d, "net-dns"), p.egress);
    if (p.net != NetMode::Allow) {
        std::string given = !p.egress.hosts.empty() ? p.egress.hosts.front().origin
                            : !p.egress.pins.empty() ? where(settings.at("net-resolve").front(), "net-resolve")
                            : p.egress.bytes         ? where(b, "net-bytes")
                            : p.egress.dns_server    ? where(d, "net-dns")
                                                     : "";
        if (!given.empty())
            throw UsageError(fmt::format("{} needs --net allow, but {} is '{}'", given, where(net, "net"),
                                         net.value),
                             "add --net allow");
        return;
    }
    if (p.egress.hosts.empty())
        throw UsageError(fmt::format("{}: 'allow' without --allow-host reaches nothing", where(net, "net")),
                         "name the hosts: --allow-host pypi.org --allow-host files.pythonhosted.org");
    check_egress_policy(p.egress);
}

}  // namespace

std::string chosen_by(const SettingItem& item) {
    if (item.source == Source::CommandLine) return "";
    if (item.source == Source::Default) return "the default";
    // "DIR/strict.toml:13" -> "the strict profile's"
    std::string file = item.origin.substr(0, item.origin.rfind(':'));
    file = file.substr(file.rfind('/') + 1);
    if (file.size() > 5 && file.compare(file.size() - 5, 5, ".toml") == 0) file.resize(file.size() - 5);
    return fmt::format("the {} profile's", file);
}

std::string normalize_path(const std::string& path) {
    std::string out;
    std::size_t start = 0;
    while (start < path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        std::string_view part(path.data() + start, end - start);
        if (!part.empty() && part != ".") {
            out += '/';
            out += part;
        }
        start = end + 1;
    }
    if (out.empty()) return path.empty() || path[0] != '/' ? "." : "/";
    if (path[0] != '/') out.erase(0, 1);
    return out;
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
    if (!path.empty() && path[0] == '/') return normalize_path(path);
    return normalize_path(cwd + "/" + path);
}

std::vector<std::string> preload_modules(const Settings& settings) {
    std::vector<std::string> out;
    auto it = settings.find("preload");
    if (it == settings.end()) return out;
    for (const SettingItem& item : it->second) {
        std::string_view rest = item.value;
        while (true) {
            std::size_t comma = rest.find(',');
            std::string_view name = rest.substr(0, comma);
            if (!module_name(name))
                throw UsageError(fmt::format("{}: '{}' is not a module name", where(item, "preload"), name),
                                 "give a dotted module name, e.g. numpy or numpy.random; several "
                                 "as --preload numpy,pandas or one --preload each");
            if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
    }
    return out;
}

std::optional<std::uint32_t> parse_small_number(std::string_view text) {
    if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    std::uint32_t n = 0;
    for (char c : text) n = n * 10 + static_cast<std::uint32_t>(c - '0');
    return n;
}

std::optional<std::uint32_t> parse_id(std::string_view text) {
    // Every uid_t but (uid_t)-1, which chown and the id maps take for "none".
    if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    std::uint64_t n = 0;
    for (char c : text) n = n * 10 + static_cast<std::uint64_t>(c - '0');
    if (n > 4294967294u) return std::nullopt;
    return static_cast<std::uint32_t>(n);
}

std::uint64_t parse_size(const std::string& text, const std::string& origin) {
    auto bad = [&] {
        return UsageError(fmt::format("{}: '{}' is not a size", origin, text),
                          "write bytes or a number with K, M or G, e.g. 64M");
    };
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) throw bad();
    errno = 0;
    char* end = nullptr;
    unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (errno != 0) throw bad();
    std::string suffix(end);
    std::uint64_t mult = 1;
    if (suffix.empty() || suffix == "B") mult = 1;
    else if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1ULL << 10;
    else if (suffix == "M" || suffix == "m" || suffix == "MiB") mult = 1ULL << 20;
    else if (suffix == "G" || suffix == "g" || suffix == "GiB") mult = 1ULL << 30;
    else throw bad();
    if (n == 0) throw UsageError(fmt::format("{}: size must be more than 0", origin));
    if (n > std::numeric_limits<std::uint64_t>::max() / mult)
        throw UsageError(fmt::format("{}: '{}' is too large", origin, text));
    return n * mult;
}

std::uint64_t parse_size_at_least(const std::string& text, const std::string& origin, std::uint64_t floor,
                                  const char* too_small) {
    std::uint64_t n = parse_size(text, origin);
    if (n >= floor) return n;
    // Written without a unit, a small number was most likely meant in megabytes.
    const bool bare = text.find_first_not_of("0123456789") == std::string::npos;
    throw UsageError(fmt::format("{}: {} {}", origin, bare ? fmt::format("{} bytes", n) : text, too_small),
                     fmt::format("at least {}{}", format_size(floor),
                                 bare ? fmt::format("; did you mean {}M?", text) : ""));
}

double parse_seconds(const std::string& text, const std::string& origin, const char* zero_means) {
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < 0 ||
        std::isspace(static_cast<unsigned char>(text[0])))
        throw UsageError(fmt::format("{}: '{}' is not a number of seconds", origin, text),
                         fmt::format("write e.g. 30 or 2.5; 0 means {}", zero_means));
    if (v > 365.0 * 24 * 3600)
        throw UsageError(fmt::format("{}: {} seconds is more than a year", origin, text));
    return v;
}

BindSpec parse_bind(const std::string& text, bool writable, const std::string& origin,
                    const std::string& cwd) {
    std::string src = text, dst;
    if (auto colon = text.find(':'); colon != std::string::npos) {
        src = text.substr(0, colon);
        dst = text.substr(colon + 1);
    }
    if (src.empty())
        throw UsageError(fmt::format("{}: '{}' has no source path", origin, text),
                         "write SRC or SRC:DST");
    BindSpec b;
    b.writable = writable;
    b.origin = origin;
    b.source = absolute_path(src, cwd);
    if (dst.empty()) {
        if (src[0] != '/') {
            // Where a program looks for a file it was given by a relative name: its working
            // directory, /work.
            std::string base = src.substr(0, src.find_last_not_of('/') + 1);
            base = base.substr(base.rfind('/') + 1);
            throw UsageError(
                fmt::format("{}: '{}' is relative, so where it goes in the jail is unclear", origin,
                            text),
                base.empty() || base == "." || base == ".."
                    ? fmt::format("name the target: {}:/mnt/data", src)
                    : fmt::format("name the target: {0}:/work/{1} (the jail's working directory), or "
                                  "e.g. {0}:/mnt/{1}",
                                  src, base));
        }
        dst = src;
    }
    if (dst[0] != '/')
        throw UsageError(fmt::format("{}: target '{}' is not an absolute path", origin, dst),
                         "targets are paths inside the jail, e.g. /mnt/data");
    if (has_dotdot(dst))
        throw UsageError(fmt::format("{}: target '{}' contains '..'", origin, dst),
                         "write the target without '..'");
    b.target = normalize_path(dst);
    const std::string& t = b.target;
    auto under = [&](std::string_view top) {
        return t == top || (t.size() > top.size() && t.compare(0, top.size(), top) == 0 &&
                            t[top.size()] == '/');
    };
    if (t == "/" || under("/proc") || under("/dev"))
        throw UsageError(fmt::format("{}: target '{}' is reserved for the jail", origin, t),
                         "choose a target outside /, /proc and /dev, e.g. /mnt/data");
    return b;
}

JailError bind_source_error(const BindSpec& b, int err, const JailHostUser& user, const std::string& cwd,
                            const std::string& profile, BindRefusal refusal) {
    if (err != EACCES && err != EPERM)
        return JailError("bind", fmt::format("{}: cannot use {}", b.origin, b.source), err,
                         err == ENOENT || err == ENOTDIR ? "the source of a bind must exist on the host" : "");
    const std::string who = user.is_invoker ? fmt::format("you, {},", user.uid_and_name)
                                            : fmt::format("{}, the jail's host user,", user.uid_and_name);
    // "Enter": the directories above let the user through, the source itself does not (a
    // root-owned `mktemp -d` is 0700), so the fix is the source's own mode.
    const bool enter = refusal == BindRefusal::Enter;
    const char* verb = enter ? "enter" : "reach";
    // A profile's bind of the current directory (standard's `.`, batch's workdir): the user
    // named neither, so the message says what the profile does and how to do without it.
    if (!b.named_on_command_line && b.source == normalize_path(cwd)) {
        std::string fix = fmt::format("run from a directory you can {}, or use --profile strict",
                                      enter ? "enter" : "read");
        if (!user.is_invoker)
            fix = enter ? "run from a directory it can enter, chmod o+rx this one, use --profile strict, or "
                          "--host-user USER"
                        : "run from a directory it can read, use --profile strict, or --host-user USER";
        return JailError("bind",
                         fmt::format("--profile {} binds the current directory {}, which {} cannot {}", profile,
                                     b.source, who, verb),
                         err, fix);
    }
    std::string fix = fmt::format("make it {} by you, or bind another directory", enter ? "searchable" : "readable");
    if (!user.is_invoker)
        fix = enter ? "let that user in (chmod o+rx, or a group or ACL of its), or --host-user USER who can "
                      "enter it"
                    : "make it readable by that user and every directory above it searchable (chmod o+x), "
                      "or --host-user USER who can";
    return JailError("bind", fmt::format("{}: {} cannot {} {}", b.origin, who, verb, b.source), err, fix);
}

// Names whose presence marks a directory as a home, or part of one: keys, tokens, agent
// sockets, password stores, cloud and cluster credentials, browser profiles. Chosen for what
// they hold, not for being hidden: a project directory rarely has any of them.
const char* const kCredentialNames[] = {
    ".ssh", ".gnupg", ".aws", ".azure", ".config", ".kube", ".docker", ".netrc", ".pgpass",
    ".git-credentials", ".npmrc", ".pypirc", ".password-store", ".vault-token", ".terraform.d",
    ".mozilla", ".local", nullptr};

namespace {
bool path_within(const std::string& path, const std::string& dir) {
    if (dir == "/") return true;
    return path == dir ||
           (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}
}  // namespace

std::optional<std::string> sensitive_bind_reason(const BindExposure& source,
                                                 const std::vector<std::string>& homes) {
    const std::string& src = source.real_source;
    if (src == "/") return "the whole host file system";
    for (const auto& home : homes) {
        if (home.empty() || home == "/") continue;  // a home of "/" would make everything a home
        if (src == home) return "your home directory";
        if (path_within(home, src)) return fmt::format("an ancestor of your home directory {}", home);
    }
    if (src == "/home" || src == "/root") return "a directory of home directories";
    // Inside a credentials directory: any component named like one -- but for the path of
    // pyjail's own data in a home (its named rootfses, and the staging directories the rootfs
    // builder binds into the jail that runs pip), which lies in .local and holds none: the
    // jail sees only that subtree, and the components below it are still checked.
    std::size_t start = 1;
    for (const auto& home : homes)
        if (std::string own = home + "/.local/share/pyjail"; home.size() > 1 && path_within(src, own))
            start = std::max(start, own.size() + 1);
    while (start < src.size()) {
        std::size_t end = src.find('/', start);
        if (end == std::string::npos) end = src.size();
        std::string part = src.substr(start, end - start);
        for (const char* const* n = kCredentialNames; *n != nullptr; ++n)
            if (part == *n) return fmt::format("inside {}, which holds credentials", part);
        start = end + 1;
    }
    if (!source.credentials.empty()) {
        std::string names;
        for (const auto& n : source.credentials) names += (names.empty() ? "" : ", ") + n;
        return fmt::format("a directory holding credentials ({})", names);
    }
    return std::nullopt;
}

void check_sensitive_binds(const Policy& policy, const std::vector<BindSpec>& binds,
                           const std::vector<BindExposure>& sources,
                           const std::vector<std::string>& homes) {
    for (std::size_t i = 0; i < binds.size(); ++i) {
        const BindSpec& b = binds[i];
        auto why = sensitive_bind_reason(sources.at(i), homes);
        if (!why) continue;
        // Named on the command line and explicitly allowed: the user means it.
        if (b.named_on_command_line && policy.allow_sensitive_bind) continue;
        const std::string& src = sources[i].real_source;
        std::string fix =
            b.named_on_command_line
                ? fmt::format("add --allow-sensitive-bind if you mean it")
                : fmt::format("run from a project directory, or name it with {} {} "
                              "--allow-sensitive-bind",
                              b.target == "/work" && b.writable ? "--workdir" : "--ro-bind",
                              b.target == "/work" && b.writable ? src : src + ":" + b.target);
        throw UsageError(fmt::format("{}: {} is {}: the jail would see every file there and "
                                     "reach its Unix sockets",
                                     b.origin, src, *why),
                         fix);
    }
}

namespace {

// One of a few words, e.g. --net's none, loopback or allow.
template <typename T>
T one_of(const SettingItem& it, std::string_view key, std::string_view what,
         std::initializer_list<std::pair<std::string_view, T>> choices) {
    std::string words;
    std::size_t i = 0;
    for (const auto& [word, value] : choices) {
        if (it.value == word) return value;
        words += i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ";
        words += word;
        ++i;
    }
    throw UsageError(fmt::format("{}: '{}' is not a {}", where(it, key), it.value, what), "use " + words);
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// What the jail sees of the host's files: the rootfs, the binds, the work directory, /tmp.
void make_file_policy(Policy& p, const Settings& settings, const std::string& cwd) {
    auto item = [&](std::string_view k) -> const SettingItem& { return setting(settings, k); };
    p.rootfs = item("rootfs").value;
    // A name ("data", no '/') is looked up later among the named rootfses (rootfs_name.hpp).
    if (!p.rootfs.empty() && !is_rootfs_name(p.rootfs)) p.rootfs = absolute_path(p.rootfs, cwd);

    for (const char* key : {"ro-bind", "bind"}) {
        for (const auto& it : settings.at(key)) {
            p.binds.push_back(parse_bind(it.value, std::string_view(key) == "bind",
                                         where(it, key), cwd));
            p.binds.back().named_on_command_line = it.source == Source::CommandLine;
        }
    }
    for (std::size_t i = 0; i < p.binds.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (p.binds[i].target == p.binds[j].target)
                throw UsageError(fmt::format("{} and {} both bind to {}", p.binds[j].origin,
                                             p.binds[i].origin, p.binds[i].target));

    if (const auto& w = item("workdir"); !w.value.empty()) {
        p.workdir = absolute_path(w.value, cwd);
        p.workdir_origin = where(w, "workdir");
        p.workdir_named_on_command_line = w.source == Source::CommandLine;
        for (const auto& b : p.binds)
            if (b.target == "/work")
                throw UsageError(fmt::format("{} sets /work, and {} binds over it", where(w, "workdir"),
                                             b.origin),
                                 "use one of them");
    }
    const auto& s = item("tmpfs-size");
    p.tmpfs_size = parse_size_at_least(s.value, where(s, "tmpfs-size"), kMinTmpfsSize,
                                       "is less than one page, the least a tmpfs holds");
}

// The program's environment: --env KEY=VALUE and the host's variables --env-pass names.
void make_env_policy(Policy& p, const Settings& settings) {
    for (const auto& it : settings.at("env")) {
        auto eq = it.value.find('=');
        std::string key = it.value.substr(0, eq);
        bool ok = eq != std::string::npos && !key.empty() && std::all_of(key.begin(), key.end(), is_name_char);
        if (!ok)
            throw UsageError(fmt::format("{}: '{}' is not KEY=VALUE", where(it, "env"), it.value),
                             eq == std::string::npos && !key.empty() &&
                                     std::all_of(key.begin(), key.end(), is_name_char)
                                 ? fmt::format("the host's environment is never passed: give the value "
                                               "(--env {0}=VALUE), or pass the host's with --env-pass {0}",
                                               key)
                                 : "the host's environment is never passed; give the value");
        p.env.emplace_back(key, it.value.substr(eq + 1));
    }
    for (const auto& it : settings.at("env-pass")) {
        bool ok = !it.value.empty() && std::all_of(it.value.begin(), it.value.end(), is_name_char);
        if (!ok)
            throw UsageError(fmt::format("{}: '{}' is not a variable name", where(it, "env-pass"), it.value),
                             "--env-pass NAME passes the host's NAME; --env NAME=VALUE sets one");
        if (std::find(p.env_pass.begin(), p.env_pass.end(), it.value) == p.env_pass.end())
            p.env_pass.push_back(it.value);
    }
}

std::string parse_hostname(const SettingItem& h) {
    bool ok = !h.value.empty() && h.value.size() <= 64;
    for (char c : h.value)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')) ok = false;
    if (!ok)
        throw UsageError(fmt::format("{}: '{}' is not a valid host name", where(h, "hostname"), h.value),
                         "use up to 64 letters, digits, '-' and '.'");
    return h.value;
}

// The resource limits (not the times: those are the supervisor's).
Limits make_limits(const Settings& settings) {
    auto item = [&](std::string_view k) -> const SettingItem& { return setting(settings, k); };
    auto optional_size = [&](std::string_view key) -> std::optional<std::uint64_t> {
        const auto& it = item(key);
        if (it.value.empty()) return std::nullopt;
        return parse_size(it.value, where(it, key));
    };
    auto count = [&](std::string_view key, bool allow_empty) -> std::optional<std::uint64_t> {
        const auto& it = item(key);
        if (it.value.empty() && allow_empty) return std::nullopt;
        auto n = parse_small_number(it.value);
        if (!n || *n == 0)
            throw UsageError(fmt::format("{}: '{}' is not a whole number above 0", where(it, key), it.value));
        return *n;
    };
    Limits limits;
    if (const auto& m = item("memory"); !m.value.empty())
        limits.memory =
            parse_size_at_least(m.value, where(m, "memory"), kMinMemory, "is too small to start Python");
    limits.fsize = optional_size("fsize");
    limits.output = optional_size("output-limit");
    limits.pids = count("pids", true);
    limits.nofile = *count("nofile", false);
    const auto& c = item("cpus");
    if (!c.value.empty()) {
        double v = parse_seconds(c.value, where(c, "cpus"));
        if (v < 0.01 || v > 4096)
            throw UsageError(fmt::format("{}: '{}' CPUs is out of range", where(c, "cpus"), c.value),
                             "give a number of CPUs from 0.01 up, e.g. 0.5 or 2");
        limits.cpus = v;
    }
    const auto& t = item("cpu-time");
    limits.cpu_time = parse_seconds(t.value, where(t, "cpu-time"));
    return limits;
}

// How the limits are enforced: the cgroup, who creates it, and the fallback notice.
void make_cgroup_policy(Policy& p, const Settings& settings, const std::string& cwd) {
    auto item = [&](std::string_view k) -> const SettingItem& { return setting(settings, k); };
    p.cgroup = one_of<CgroupMode>(
        item("cgroup"), "cgroup", "cgroup mode",
        {{"auto", CgroupMode::Auto}, {"require", CgroupMode::Require}, {"off", CgroupMode::Off}});
    p.cgroup_manager = one_of<CgroupManager>(
        item("cgroup-manager"), "cgroup-manager", "cgroup manager",
        {{"auto", CgroupManager::Auto}, {"systemd", CgroupManager::Systemd}, {"none", CgroupManager::None}});
    const auto& cp = item("cgroup-parent");
    if (!cp.value.empty()) p.cgroup_parent = absolute_path(cp.value, cwd);
    p.cgroup_notice = one_of<NoticeMode>(
        item("cgroup-notice"), "cgroup-notice", "notice mode",
        {{"daily", NoticeMode::Daily}, {"always", NoticeMode::Always}, {"off", NoticeMode::Off}});
}

// --host-user NAME or UID[:GID]: who the jailed program is on the host, never root.
HostUser parse_host_user(const SettingItem& u) {
    HostUser user;
    user.name = u.value;
    auto colon = u.value.find(':');
    std::string uid_text = u.value.substr(0, colon);
    user.uid = parse_id(uid_text);
    if (colon != std::string::npos) {
        user.gid = parse_id(std::string_view(u.value).substr(colon + 1));
        if (!user.uid || !user.gid)
            throw UsageError(fmt::format("{}: '{}' is not UID:GID", where(u, "host-user"), u.value));
    }
    if (uid_text.empty()) throw UsageError(fmt::format("{}: empty user", where(u, "host-user")));
    if ((user.uid && *user.uid == 0) || (user.gid && *user.gid == 0) || uid_text == "root")
        throw UsageError(fmt::format("{}: the jailed program must never be host root", where(u, "host-user")),
                         "name an unprivileged user such as nobody");
    return user;
}

}  // namespace

// Each setting is checked in this order, so that of two bad ones the first is named.
Policy make_policy(const Settings& settings, std::vector<std::string> command,
                   const std::string& cwd) {
    Policy p;
    p.settings = settings;
    p.command = std::move(command);
    auto item = [&](std::string_view k) -> const SettingItem& { return setting(settings, k); };

    p.profile = item("profile").value;
    make_file_policy(p, settings, cwd);
    const auto& net = item("net");
    p.net = one_of<NetMode>(
        net, "net", "network mode",
        {{"none", NetMode::None}, {"loopback", NetMode::Loopback}, {"allow", NetMode::Allow}});
    make_egress_policy(p, settings, net);
    make_env_policy(p, settings);
    const auto& w = item("wall-time");
    p.wall_time = parse_seconds(w.value, where(w, "wall-time"));
    const auto& g = item("kill-grace");
    p.kill_grace = parse_seconds(g.value, where(g, "kill-grace"), "kill at once");
    p.hostname = parse_hostname(item("hostname"));
    p.limits = make_limits(settings);
    make_cgroup_policy(p, settings, cwd);
    if (const auto& r = item("report"); !r.value.empty()) p.report_path = absolute_path(r.value, cwd);
    if (const auto& a = item("audit-log"); !a.value.empty()) p.audit_log = absolute_path(a.value, cwd);

    const auto& sc = item("seccomp");
    if (sc.value.empty())
        throw UsageError(fmt::format("{}: empty", where(sc, "seccomp")),
                         "name a set (python), a set file, or off");
    p.seccomp = sc.value;
    p.host_user = parse_host_user(item("host-user"));
    p.host_user_explicit = item("host-user").source != Source::Default;
    p.host_ids = parse_host_ids(item("host-ids").value, where(item("host-ids"), "host-ids"));
    p.allow_sensitive_bind = parse_bool(item("allow-sensitive-bind"), "allow-sensitive-bind");
    p.explain = parse_bool(item("explain"), "explain");
    p.verbose = parse_bool(item("verbose"), "verbose");
    p.quiet = parse_bool(item("quiet"), "quiet");
    if (p.verbose && p.quiet)
        throw UsageError("--verbose and --quiet contradict each other", "choose one");

    if (p.command.empty() && !p.explain)
        throw UsageError("no command given", "usage: pyjail [OPTIONS] -- python script.py");
    return p;
}

}  // namespace pyjail
