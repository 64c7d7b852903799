#include "cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string_view>
#include <thread>

#include "error.hpp"
#include "policy.hpp"

namespace pyjail {

namespace {

constexpr const char* kSupervisorLeaf = "pyjail-supervisor";
constexpr const char* kRunPrefix = "pyjail-run-";
constexpr const char* kDelegateHint =
    "run pyjail in a delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes pyjail "
    "...`, or name one with --cgroup-parent";

// Whitespace-separated words. (Not through an istringstream: the first stream a process
// makes sets up the C++ locale, dozens of allocations and page faults on every run.)
std::vector<std::string> words(std::string_view s) {
    std::vector<std::string> out;
    auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t'; };
    for (std::size_t i = 0; i < s.size();) {
        while (i < s.size() && space(s[i])) ++i;
        std::size_t start = i;
        while (i < s.size() && !space(s[i])) ++i;
        if (i > start) out.emplace_back(s.substr(start, i - start));
    }
    return out;
}

std::vector<std::string_view> lines(std::string_view s) {
    std::vector<std::string_view> out;
    while (!s.empty()) {
        auto nl = s.find('\n');
        out.push_back(s.substr(0, nl));
        s = nl == std::string_view::npos ? std::string_view() : s.substr(nl + 1);
    }
    return out;
}

bool has(const std::vector<std::string>& v, const std::string& w) {
    return std::find(v.begin(), v.end(), w) != v.end();
}

// The mount point of the cgroup2 hierarchy: /sys/fs/cgroup (unified) or
// /sys/fs/cgroup/unified (hybrid).
std::string cgroup2_mount() {
    // Where systemd puts it (pure v2, or hybrid's "unified"): a statfs is much cheaper than
    // having the kernel print every mount of the host, which every run would pay.
    for (const char* usual : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
        struct statfs st {};
        if (::statfs(usual, &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC) return usual;
    }
    std::string info;
    if (!try_read_file("/proc/self/mountinfo", info)) return {};
    for (std::string_view line : lines(info)) {
        auto dash = line.find(" - ");
        if (dash == std::string::npos) continue;
        auto after = words(line.substr(dash + 3));
        auto before = words(line.substr(0, dash));
        if (!after.empty() && after[0] == "cgroup2" && before.size() > 4) return before[4];
    }
    return {};
}

// Our own cgroup, from the "0::/path" line of /proc/self/cgroup.
std::string own_cgroup() {
    std::string text;
    if (!try_read_file("/proc/self/cgroup", text)) return {};
    for (std::string_view line : lines(text))
        if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
    return {};
}

// A count the kernel wrote in the leaf's `file`. Not std::stoull: its exceptions would reach
// main as an "internal error", after the program ran, without a report.
std::uint64_t cgroup_number(std::string_view text, const std::string& file) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end == text.data())
        throw JailError("cgroup", fmt::format("cannot read {}: '{}' is not a count", file, text), 0,
                        "the kernel wrote a cgroup file pyjail does not understand");
    return v;
}

// The value of `key` in a flat-keyed cgroup file ("usage_usec 1234\n..."), 0 when missing.
std::uint64_t keyed(const std::string& text, const std::string& key, const std::string& file) {
    auto w = words(text);
    for (std::size_t i = 0; i + 1 < w.size(); i += 2)
        if (w[i] == key) return cgroup_number(w[i + 1], file);
    return 0;
}

// Removes a leaf whose processes are dying: rmdir fails with EBUSY until they are gone.
bool remove_leaf(const std::string& path) {
    for (int i = 0; i < 400; ++i) {
        if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return true;
        if (errno != EBUSY) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

void kill_leaf(const std::string& path) {
    if (write_file(path + "/cgroup.kill", "1") == 0) return;
    // Before Linux 5.14: freeze, so nothing forks while we kill, then kill what is there.
    write_file(path + "/cgroup.freeze", "1");
    std::string procs;
    if (try_read_file(path + "/cgroup.procs", procs)) {
        for (const auto& word : words(procs))
            if (auto pid = parse_small_number(word)) ::kill(static_cast<pid_t>(*pid), SIGKILL);
    }
    write_file(path + "/cgroup.freeze", "0");
}

// Leaves of supervisors that no longer exist (SIGKILLed before they could clean up).
void remove_stale_leaves(const std::string& base) {
    DIR* d = ::opendir(base.c_str());
    if (d == nullptr) return;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.rfind(kRunPrefix, 0) != 0) continue;
        pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + std::strlen(kRunPrefix)));
        if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(base + "/" + name);
    }
    ::closedir(d);
    for (const auto& path : stale) {
        kill_leaf(path);
        remove_leaf(path);
    }
}

// Moves every process of `base` into its supervisor leaf, so that `base` may enable
// controllers for its children.
void vacate(const std::string& base) {
    std::string leaf = base + "/" + kSupervisorLeaf;
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST)
        throw JailError("cgroup", fmt::format("cannot create {}", leaf), errno, kDelegateHint);
    for (int round = 0; round < 10; ++round) {
        std::string procs = read_trimmed(base + "/cgroup.procs");
        if (procs.empty()) return;
        for (const auto& pid : words(procs)) {
            int e = write_file(leaf + "/cgroup.procs", pid);
            if (e != 0 && e != ESRCH)
                throw JailError("cgroup",
                                fmt::format("cannot move process {} out of {} (a cgroup with "
                                            "children may hold no processes)",
                                            pid, base),
                                e, kDelegateHint);
        }
    }
}

std::atomic<unsigned> g_leaf_counter{0};

bool is_systemd_unit(const std::string& path) {
    std::string name = path.substr(path.rfind('/') + 1);
    for (const char* suffix : {".scope", ".service", ".slice"}) {
        std::size_t n = std::strlen(suffix);
        if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
    }
    return false;
}

bool marked_delegated(const std::string& path) {
    for (const char* attr : {"trusted.delegate", "user.delegate"}) {
        char value[8] = {};
        ssize_t n = ::getxattr(path.c_str(), attr, value, sizeof value - 1);
        if (n > 0 && value[0] == '1') return true;
    }
    return false;
}

}  // namespace

namespace setup {

CgroupSite find_cgroup_site(const std::vector<std::string>& wanted, const std::string& parent,
                            uid_t invoker_uid) {
    CgroupSite site;
    std::string mount = cgroup2_mount();
    if (mount.empty()) {
        site.why_not = "no cgroup2 file system is mounted";
        return site;
    }
    std::string base = parent;
    if (base.empty()) {
        std::string own = own_cgroup();
        if (own.empty()) {
            site.why_not = "this process is in no cgroup v2";
            return site;
        }
        base = own == "/" ? mount : mount + own;
        // Started from a cgroup pyjail itself made: the delegated cgroup is its parent.
        if (base.size() > std::strlen(kSupervisorLeaf) &&
            base.compare(base.size() - std::strlen(kSupervisorLeaf), std::string::npos,
                         kSupervisorLeaf) == 0)
            base = base.substr(0, base.rfind('/'));
    } else if (base != mount && base.rfind(mount + "/", 0) != 0) {
        site.why_not = fmt::format("--cgroup-parent {} is not inside the cgroup2 hierarchy at {}",
                                   base, mount);
        return site;
    }
    std::string controllers = read_trimmed(base + "/cgroup.controllers");
    auto available = words(controllers);
    std::vector<std::string> missing;
    for (const auto& c : wanted)
        if (!has(available, c)) missing.push_back(c);
    if (!missing.empty()) {
        std::string list;
        for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        // Only to say why: the hierarchy's own controllers (read only on this path).
        auto at_root = words(base == mount ? controllers : read_trimmed(mount + "/cgroup.controllers"));
        bool none_at_root = std::none_of(missing.begin(), missing.end(),
                                         [&](const std::string& c) { return has(at_root, c); });
        site.controllers_on_v1 = none_at_root;
        if (none_at_root)
            site.why_not = fmt::format("the cgroup2 hierarchy at {} lacks the {} controller(s): "
                                       "this host binds them to cgroup v1 (boot with "
                                       "systemd.unified_cgroup_hierarchy=1 for cgroup v2)",
                                       mount, list);
        else
            site.why_not = fmt::format("the {} controller(s) are not delegated to {}; {}", list,
                                       base, kDelegateHint);
        // A scope gets only what the hierarchy has: it helps when every missing one is there.
        site.not_delegated = std::all_of(missing.begin(), missing.end(),
                                         [&](const std::string& c) { return has(at_root, c); });
        return site;
    }
    // Root may write to every cgroup, so for root writable proves nothing: a cgroup that
    // systemd manages (a .scope, .service or .slice) is ours only if it was delegated, which
    // systemd marks with a delegate xattr. (For other users, systemd makes a cgroup writable
    // only by delegating it.)
    if (parent.empty() && invoker_uid == 0 && is_systemd_unit(base) && !marked_delegated(base)) {
        site.why_not = fmt::format("cgroup {} belongs to systemd and was not delegated; run "
                                   "pyjail with `systemd-run --scope -p Delegate=yes pyjail ...`, "
                                   "or name a delegated cgroup with --cgroup-parent",
                                   base);
        site.not_delegated = true;
        return site;
    }
    if (::access(base.c_str(), W_OK) != 0 ||
        ::access((base + "/cgroup.procs").c_str(), W_OK) != 0 ||
        ::access((base + "/cgroup.subtree_control").c_str(), W_OK) != 0) {
        site.why_not = fmt::format("cgroup {} is not delegated to uid {}; {}", base, invoker_uid,
                                   kDelegateHint);
        site.not_delegated = true;
        return site;
    }
    site.ok = true;
    site.base = base;
    site.mount = mount;
    return site;
}

std::string own_cgroup_dir() {
    std::string mount = cgroup2_mount(), own = own_cgroup();
    if (mount.empty() || own.empty()) return {};
    return own == "/" ? mount : mount + own;
}

}  // namespace setup

namespace supervisor {

CgroupLeaf::CgroupLeaf(const CgroupSite& site,
                       const std::vector<std::pair<std::string, std::string>>& files) {
    const std::string& base = site.base;
    remove_stale_leaves(base);

    auto enabled = words(read_trimmed(base + "/cgroup.subtree_control"));
    std::string enable;
    for (const auto& [file, value] : files) {
        std::string controller = file.substr(0, file.find('.'));
        if (!has(enabled, controller) && enable.find("+" + controller) == std::string::npos)
            enable += (enable.empty() ? "+" : " +") + controller;
    }
    if (!enable.empty()) {
        vacate(base);
        if (int e = write_file(base + "/cgroup.subtree_control", enable); e != 0)
            throw JailError("cgroup", fmt::format("cannot enable {} in {}/cgroup.subtree_control",
                                                  enable, base),
                            e, kDelegateHint);
    }

    path_ = fmt::format("{}/{}{}-{}", base, kRunPrefix, ::getpid(), g_leaf_counter++);
    if (::mkdir(path_.c_str(), 0755) != 0) {
        int e = errno;
        path_.clear();
        throw JailError("cgroup", fmt::format("cannot create the jail's cgroup in {}", base), e,
                        kDelegateHint);
    }
    for (const auto& [file, value] : files) {
        std::string full = path_ + "/" + file;
        int e = write_file(full, value);
        // No swap accounting in this kernel: there is nothing to limit.
        if (e == ENOENT && file == "memory.swap.max") continue;
        if (e != 0) {
            std::string failed = full;
            kill_all();
            remove_leaf(path_);
            path_.clear();
            throw JailError("cgroup", fmt::format("cannot set {} to {}", failed, value), e);
        }
    }
    dir_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir_) {
        int e = errno;
        remove_leaf(path_);
        path_.clear();
        throw JailError("cgroup", "cannot open the jail's cgroup", e);
    }
    mount_ = site.mount;
}

CgroupLeaf::~CgroupLeaf() {
    if (path_.empty() || !owner_) return;
    kill_all();
    dir_.reset();
    remove_leaf(path_);
}

std::string CgroupLeaf::relative_path() const {
    return path_.rfind(mount_, 0) == 0 ? path_.substr(mount_.size()) : path_;
}

void CgroupLeaf::kill_all() noexcept {
    if (!path_.empty()) kill_leaf(path_);
}

std::optional<double> CgroupLeaf::cpu_usage_s() const {
    std::string s;
    if (!try_read_file(path_ + "/cpu.stat", s)) return std::nullopt;
    return static_cast<double>(keyed(s, "usage_usec", path_ + "/cpu.stat")) / 1e6;
}

CgroupStats CgroupLeaf::stats() const {
    CgroupStats st;
    std::string s;
    if (try_read_file(path_ + "/memory.peak", s))
        st.memory_peak = cgroup_number(s, path_ + "/memory.peak");
    if (try_read_file(path_ + "/cpu.stat", s)) {
        st.usage_s = static_cast<double>(keyed(s, "usage_usec", path_ + "/cpu.stat")) / 1e6;
        st.user_s = static_cast<double>(keyed(s, "user_usec", path_ + "/cpu.stat")) / 1e6;
        st.system_s = static_cast<double>(keyed(s, "system_usec", path_ + "/cpu.stat")) / 1e6;
    }
    if (try_read_file(path_ + "/memory.events", s))
        st.oom_kills = keyed(s, "oom_kill", path_ + "/memory.events");
    if (try_read_file(path_ + "/pids.events", s))
        st.pids_limit_hits = keyed(s, "max", path_ + "/pids.events");
    return st;
}

}  // namespace supervisor

}  // namespace pyjail
