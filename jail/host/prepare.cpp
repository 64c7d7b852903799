#include "prepare.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "compiled_filter.hpp"
#include "environment.hpp"
#include "error.hpp"
#include "exposure.hpp"
#include "hints.hpp"
#include "hostopen.hpp"
#include "rootfs.hpp"

namespace pyjail::setup {

namespace {

std::string current_dir() {
    char buf[PATH_MAX];
    if (::getcwd(buf, sizeof buf) == nullptr)
        throw JailError("cwd", "cannot read the current directory", errno);
    return buf;
}

std::string fd_path(int fd) {
    char buf[PATH_MAX];
    ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The host user root's jails run as (--host-user).
std::pair<uid_t, gid_t> resolve_host_user(const HostUser& u) {
    if (u.uid && u.gid) return {*u.uid, *u.gid};
    // /etc/passwd is read directly, not through NSS: pyjail is linked statically, and a
    // static binary cannot rely on loading NSS modules.
    std::string passwd;
    (void)try_read_file("/etc/passwd", passwd);
    if (u.uid) {
        auto pw = find_passwd_entry(passwd, "", u.uid);
        return {*u.uid, pw ? pw->second : static_cast<gid_t>(*u.uid)};
    }
    auto pw = find_passwd_entry(passwd, u.name, std::nullopt);
    if (!pw)
        throw UsageError(fmt::format("--host-user: no user named '{}' in /etc/passwd", u.name),
                         "give UID:GID, e.g. 65534:65534");
    if (pw->first == 0 || pw->second == 0)
        throw UsageError(fmt::format("--host-user: '{}' is root", u.name));
    return *pw;
}

// What `path` (absolute, in the jail) names for the jail: through a bind, or in the rootfs.
FileKind probe_in_jail(int rootfs_fd, const std::vector<BindSpec>& binds, const std::string& path) {
    for (const auto& b : binds) {
        if (path == b.target || path.rfind(b.target + "/", 0) == 0) {
            std::string host = b.source + path.substr(b.target.size());
            struct stat st {};
            if (::stat(host.c_str(), &st) != 0) return FileKind::Missing;
            return S_ISREG(st.st_mode) && (st.st_mode & 0111) ? FileKind::Executable
                                                               : FileKind::NotExecutable;
        }
    }
    return probe_in_rootfs(rootfs_fd, path);
}

// Who a bind's source is opened as: the jail's host user. Root's jails open it with
// --host-user's rights (an idmapped clone, or the jail's pid 1 as that user); a user's
// jails with a bind run as the user (hostid.hpp).
struct BindOpener {
    std::optional<HostUserIds> host_user;  // root's --host-user; none: the invoking user
    JailHostUser described;
    std::string cwd, profile;  // for a profile's bind of the current directory
};

// Bind sources are checked now, so a missing, unreachable or closed one fails before any process
// exists; the child opens them again in its own mount namespace, as the jail user. A writable
// one the jail's host user cannot write is noted in `unwritable`.
BindFacts bind_facts(const BindSpec& b, int rootfs_fd, const BindOpener& as,
                     std::vector<UnwritableBind>& unwritable) {
    UniqueFd fd(::open(b.source.c_str(), O_PATH | O_CLOEXEC));
    if (!fd) throw bind_source_error(b, errno, as.described, as.cwd, as.profile);
    // What counts is what the jail's host user can do: root reaches and writes everything, and
    // a user may open (O_PATH) a directory it cannot enter, as its jail would find only inside.
    HostUserReach reach = reach_as_host_user(b.source, as.host_user, b.writable);
    if (reach.open_err != 0) throw bind_source_error(b, reach.open_err, as.described, as.cwd, as.profile);
    if (reach.enter_err != 0)
        throw bind_source_error(b, reach.enter_err, as.described, as.cwd, as.profile, BindRefusal::Enter);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw JailError("bind", b.source, errno);
    BindFacts f;
    if (reach.write_err != 0) {
        unwritable.push_back({b.origin, b.source, st.st_uid});
        f.writable_by_host_user = false;
    }
    f.is_dir = S_ISDIR(st.st_mode);
    f.dev = st.st_dev;
    f.ino = st.st_ino;
    f.real_source = fd_path(fd.get());
    f.locked_flags = locked_flags_of(fd.get());
    bool target_is_dir = false;
    f.target_in_rootfs = exists_in_rootfs(rootfs_fd, b.target, target_is_dir) &&
                         target_is_dir == f.is_dir;
    if (f.is_dir) f.credentials = credentials_in(fd.get());
    return f;
}

// Whether each bind inside another finds its mount point in that one's source: a file or
// directory like its own source, not a symlink (which the mount would follow in the jail).
void note_mount_points_in_binds(const std::vector<BindSpec>& binds, std::vector<BindFacts>& facts) {
    for (std::size_t i = 0; i < binds.size(); ++i) {
        std::optional<std::size_t> outer = enclosing_bind(binds, i);
        if (!outer) continue;
        const std::string& dir = binds[*outer].source;
        std::string below = binds[i].target.substr(binds[*outer].target.size() + 1);
        struct stat st {};
        facts[i].target_in_enclosing = ::lstat((dir + "/" + below).c_str(), &st) == 0 &&
                                       (facts[i].is_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
        if (facts[i].target_in_enclosing) continue;
        for (std::size_t end = below.find('/');; end = below.find('/', end + 1)) {
            std::string part = below.substr(0, end);
            if (::lstat((dir + "/" + part).c_str(), &st) != 0 && errno == ENOENT) {
                facts[i].missing_in_enclosing = part;
                break;
            }
            if (end == std::string::npos) break;
        }
    }
}

// The filter is ready before any process exists: compiled at build time for exactly this
// set, or compiled here, so that a broken set fails now.
void plan_seccomp(RunPlan& p, const DataDirs& dirs) {
    const Policy& policy = p.policy;
    if (policy.seccomp == "off") return;
    FoundFile set = read_seccomp_set(policy.seccomp, dirs);
    std::string groups_path = dirs.profiles + "/seccomp/groups.toml";
    FilterInputs in{std::move(set.text), read_data_file(groups_path, "seccomp"), policy.net};
    std::string file;
    if (auto compiled = load_compiled_filter(dirs, in, file)) {
        p.seccomp = SeccompSet{policy.seccomp, false, std::move(compiled->allow),
                               std::move(compiled->deny)};
        p.seccomp_filter = std::move(compiled->program);
        p.seccomp_compiled_at = file;
    } else {
        p.seccomp = parse_seccomp_set(in.set_text, set.path, in.groups_text, groups_path);
        p.seccomp->name = policy.seccomp;
        p.seccomp_filter = compile_seccomp(*p.seccomp, policy.net);
    }
}

// Limits: cgroup v2 where a delegated cgroup can be had, rlimits otherwise.
void plan_cgroup_and_limits(RunPlan& p, const CgroupSite* given) {
    const Policy& policy = p.policy;
    const Limits& l = policy.limits;
    bool wants_cgroup = l.memory || l.pids || l.cpus || l.cpu_time > 0;
    if (policy.cgroup != CgroupMode::Off) {
        std::vector<std::string> controllers;
        if (l.memory) controllers.push_back("memory");
        if (l.pids) controllers.push_back("pids");
        if (l.cpus) controllers.push_back("cpu");
        if (given != nullptr) {
            p.cgroup = *given;  // a run from a template: the server's cgroup
        } else {
            p.cgroup = find_cgroup_site(controllers, policy.cgroup_parent, p.invoker.uid);
            // Not delegated: perhaps systemd delegates one (asked at run time, not while planning).
            ScopeDecision scope = decide_scope(policy.cgroup_manager, policy.cgroup, wants_cgroup,
                                               p.cgroup, !policy.cgroup_parent.empty(),
                                               policy.cgroup_manager != CgroupManager::None &&
                                                   !p.cgroup.ok && systemd_booted());
            if (!scope.refusal.empty()) throw JailError("cgroup", scope.refusal, 0, "or use --cgroup-manager auto");
            if (scope.ask) {
                std::string why_not;
                p.systemd_scope = choose_bus(p.invoker.uid, std::getenv("DBUS_SESSION_BUS_ADDRESS"),
                                             std::getenv("XDG_RUNTIME_DIR"),
                                             std::getenv("DBUS_SYSTEM_BUS_ADDRESS"), why_not);
                if (!p.systemd_scope && policy.cgroup_manager == CgroupManager::Systemd)
                    throw JailError("cgroup", "--cgroup-manager systemd: " + why_not);
            }
        }
        // With a scope planned, the cgroup comes when the jail runs (settle_cgroup).
        if (!p.cgroup.ok && !p.systemd_scope && policy.cgroup == CgroupMode::Require)
            throw JailError("cgroup", "cgroup v2 is required (--cgroup require), but " + p.cgroup.why_not,
                            0, "or run with --cgroup auto to fall back to rlimits");
    } else {
        p.cgroup.why_not = "--cgroup off";  // rlimits by choice: the notice says so
    }
    if (!wants_cgroup && !p.cgroup.ok) p.cgroup.why_not.clear();
    p.limits = plan_limits(l, p.cgroup.ok || p.systemd_scope.has_value());
    if (policy.wall_time > 0) p.limits.entries.push_back(wall_time_entry(policy.wall_time));
}

HostIdFacts host_id_facts(const RunPlan& p, const Policy& policy, uid_t root_uid, gid_t root_gid) {
    HostIdFacts f = host_facts_of_invoker(p.invoker.uid, p.invoker.gid);
    f.setting = policy.host_ids;
    f.host_user_explicit = policy.host_user_explicit;
    f.host_user_uid = root_uid;
    f.host_user_gid = root_gid;
    for (const auto& b : p.binds) f.host_binds.push_back(b.source);
    return f;
}

}  // namespace

// In host, beside its caller above, not in supervisor: what links host alone (the fuzz
// targets, and prepare.cpp's neighbours in a unity batch) must find it.
bool systemd_booted() {
    struct stat st {};
    return ::lstat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
}

HostIdFacts host_facts_of_invoker(uid_t uid, gid_t gid) {
    HostIdFacts f;
    f.invoker_uid = uid;
    f.invoker_gid = gid;
    if (uid == 0) {
        std::string uid_map, gid_map;
        // The initial user namespace maps every id in one line; then "" says so.
        if (try_read_file("/proc/self/uid_map", uid_map) && uid_map.find("4294967295") == std::string::npos)
            f.own_uid_map = uid_map;
        if (try_read_file("/proc/self/gid_map", gid_map) && gid_map.find("4294967295") == std::string::npos)
            f.own_gid_map = gid_map;
        return f;
    }
    std::string passwd;
    (void)try_read_file("/etc/passwd", passwd);
    f.invoker_name = passwd_name(passwd, uid);
    (void)try_read_file("/etc/subuid", f.subuid_text);
    (void)try_read_file("/etc/subgid", f.subgid_text);
    for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
        if (f.newuidmap.empty() && ::access((std::string(dir) + "newuidmap").c_str(), X_OK) == 0)
            f.newuidmap = std::string(dir) + "newuidmap";
        if (f.newgidmap.empty() && ::access((std::string(dir) + "newgidmap").c_str(), X_OK) == 0)
            f.newgidmap = std::string(dir) + "newgidmap";
    }
    f.runtime_dir = user_lock_dir(std::getenv("XDG_RUNTIME_DIR"), uid);
    f.runtime_dir_also = user_lock_dir_also(std::getenv("XDG_RUNTIME_DIR"), uid);
    return f;
}

PreparedRun prepare_run(Policy policy, const DataDirs& dirs, const CgroupSite* cgroup_site) {
    PreparedRun prepared;
    RunPlan& p = prepared.plan;
    p.invoker = {::geteuid(), ::getegid()};
    std::string cwd = current_dir();
    p.rootfs = policy.rootfs.empty() ? dirs.rootfs : resolve_rootfs(policy.rootfs, dirs);
    // Open while planning only: what the jail finds there is read through it.
    UniqueFd rootfs_fd = open_rootfs(p.rootfs);
    p.binds = all_binds(policy);

    uid_t root_uid = 0;
    gid_t root_gid = 0;
    if (p.invoker.is_root()) std::tie(root_uid, root_gid) = resolve_host_user(policy.host_user);

    MountFacts facts;
    facts.rootfs_top = list_rootfs_top(rootfs_fd.get());
    facts.rootfs_locked_flags = locked_flags_of(rootfs_fd.get());
    BindOpener opener{std::nullopt,
                      {uid_with_name(p.invoker.is_root() ? root_uid : p.invoker.uid), !p.invoker.is_root()},
                      cwd, policy.profile};
    // The jail's host user as root's runs have it (--host-user); none: the invoking user.
    std::optional<HostUserIds> host_user;
    if (p.invoker.is_root()) host_user = HostUserIds{root_uid, root_gid};
    opener.host_user = host_user;
    for (const auto& b : p.binds)
        facts.binds.push_back(bind_facts(b, rootfs_fd.get(), opener, p.unwritable_binds));
    note_mount_points_in_binds(p.binds, facts.binds);
    facts.home_dirs = home_dirs();
    if (policy.net == NetMode::Allow) {
        for (const char* const* f = kEgressEtcFiles; *f != nullptr; ++f) {
            bool is_dir = false;
            if (exists_in_rootfs(rootfs_fd.get(), std::string("/etc/") + *f, is_dir) && !is_dir)
                facts.rootfs_etc_files.emplace_back(*f);
        }
    }

    if (!policy.command.empty()) {
        p.command = resolve_command(
            policy.command,
            [&](const std::string& path) { return probe_in_jail(rootfs_fd.get(), p.binds, path); },
            pythons_in_rootfs(rootfs_fd.get()));
    }
    p.argv = policy.command;

    std::optional<std::string> script;
    if (p.command.script_index) {
        std::string host = absolute_path(p.argv[*p.command.script_index], cwd);
        // Opened with the rights of the jail's host user (hostopen.hpp): root must not read a
        // file for the jail through a link another user planted.
        prepared.fds.script = open_script(host, p.argv[*p.command.script_index], host_user);
        facts.script_real_path = fd_path(prepared.fds.script.get());
        script = host;
    }

    p.mounts = plan_mounts(policy, p.rootfs, facts, script);
    if (p.mounts.script_jail_path) p.argv[*p.command.script_index] = *p.mounts.script_jail_path;
    p.ids = plan_idmaps(p.invoker.uid, p.invoker.gid, root_uid, root_gid);
    p.host_ids = plan_host_ids(host_id_facts(p, policy, root_uid, root_gid));
    p.ids.host_uid = p.host_ids.files_uid;  // until the run takes its own id (HostIdLease)
    p.ids.host_gid = p.host_ids.files_gid;
    p.env = jail_environment(policy, host_environment());
    p.policy = std::move(policy);
    plan_seccomp(p, dirs);
    plan_cgroup_and_limits(p, cgroup_site);
    if (p.policy.net == NetMode::Allow) p.egress = plan_egress(p.policy.egress);
    return prepared;
}

std::vector<std::string> host_environment() {
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
    return env;
}

}  // namespace pyjail::setup
