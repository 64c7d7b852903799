#include "doctor.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include <csignal>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cgroup.hpp"
#include "hostroot.hpp"
#include "compiled_filter.hpp"
#include "error.hpp"
#include "hints.hpp"
#include "hostid.hpp"
#include "prepare.hpp"
#include "paths.hpp"
#include "rootfs_command.hpp"
#include "sha256.hpp"
#include "sys.hpp"
#include "systemd_scope.hpp"

namespace pyjail {

namespace {

const char* verdict_name(Check::Verdict v) {
    switch (v) {
        case Check::Verdict::Ok: return "ok";
        case Check::Verdict::Warn: return "warn";
        case Check::Verdict::Fail: return "FAIL";
    }
    return "";
}

// Runs a command, returning its exit status and its stdout+stderr.
int run_capture(const std::string& command, std::string& output) {
    output.clear();
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (p == nullptr) return -1;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
    int status = ::pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string first_line(const std::string& s) {
    auto nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl);
}

Check check_kernel() {
    utsname u{};
    ::uname(&u);
    int major = 0, minor = 0;
    std::sscanf(u.release, "%d.%d", &major, &minor);
    bool ok = major > 5 || (major == 5 && minor >= 9);
    return {"kernel", ok ? Check::Verdict::Ok : Check::Verdict::Fail,
            fmt::format("Linux {} ({})", u.release, u.machine),
            ok ? "" : "pyjail needs Linux 5.9 or newer (clone3, close_range, openat2)"};
}

Check check_user_namespaces() {
    // Really make one: a child in a new user namespace that exits at once.
    CloneArgs args;
    args.flags = CLONE_NEWUSER;
    args.exit_signal = SIGCHLD;
    pid_t pid = sys_clone3(args);
    if (pid == 0) ::_exit(0);
    if (pid < 0) {
        int e = errno;
        return {"user namespaces", Check::Verdict::Fail,
                fmt::format("cannot create one as uid {}: {}", ::geteuid(), std::strerror(e)),
                namespace_hint(e, ::geteuid() == 0)};
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string max = read_trimmed("/proc/sys/user/max_user_namespaces");
    return {"user namespaces", Check::Verdict::Ok,
            fmt::format("created one as uid {} (user.max_user_namespaces = {})", ::geteuid(),
                        max.empty() ? "?" : max),
            ""};
}

// Whether this user's jails get host ids of their own (hostid.hpp), or share its budgets.
Check check_host_ids() {
    const HostIdFacts facts = setup::host_facts_of_invoker(::geteuid(), ::getegid());
    HostIdPlan p = plan_host_ids(facts);
    switch (p.kind) {
        case HostIdKind::OwnRange:
            return {"host ids", Check::Verdict::Ok,
                    fmt::format("each jail takes one of {} ids from {} (--host-ids)", p.uids.count, p.uids.first), ""};
        case HostIdKind::Subordinate:
            return {"host ids", Check::Verdict::Ok,
                    fmt::format("each jail that binds none of your files takes one of your {} subordinate ids "
                                "from {}; process, signal and inotify counts still add up to yours",
                                p.uids.count, p.uids.first),
                    ""};
        default:
            return {"host ids", Check::Verdict::Warn,
                    fmt::format("jails share your per-user kernel budgets (epoll watches, pipe pages, "
                                "processes, signals): {}", p.why_shared),
                    p.why_shared.find("usermod") != std::string::npos
                        ? fmt::format("as root, give this user a range of ids no one else has, e.g. usermod "
                                      "--add-subuids 1610612736-1610678271 --add-subgids 1610612736-1610678271 {}",
                                      facts.invoker_name.empty() ? std::to_string(facts.invoker_uid) : facts.invoker_name)
                        : p.why_shared.find("uidmap") != std::string::npos ? "apt install uidmap" : ""};
    }
}

Check check_seccomp() {
    if (int e = seccomp_user_notif_errno(); e != 0) {
        return {"seccomp", Check::Verdict::Fail,
                fmt::format("no syscall filters with user notification: {}", std::strerror(e)),
                child_step_hint(ChildStep::Seccomp, EINVAL)};
    }
    return {"seccomp", Check::Verdict::Ok, "filters with user notification", ""};
}

// A jail mounts a procfs of its own, which the kernel allows in a user namespace only where the
// host's /proc is fully visible: no file or non-empty directory of it covered by another
// mount, as container runtimes cover /proc/kcore, /proc/sys, ... (an empty directory, like
// systemd's /proc/sys/fs/binfmt_misc, does not count).
Check check_proc() {
    std::string info;
    if (!try_read_file("/proc/self/mountinfo", info))
        return {"/proc", Check::Verdict::Warn, "cannot read /proc/self/mountinfo", ""};
    std::vector<std::string> covered;
    std::istringstream lines(info);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream fields(line);
        std::string id, parent, dev, root, point;
        fields >> id >> parent >> dev >> root >> point;
        if (point.rfind("/proc/", 0) != 0 || point == "/proc/sys/fs/binfmt_misc") continue;
        if (std::find(covered.begin(), covered.end(), point) == covered.end())
            covered.push_back(point);
    }
    if (covered.empty())
        return {"/proc", Check::Verdict::Ok, "fully visible: a jail can mount its own", ""};
    std::string list;
    for (std::size_t i = 0; i < covered.size() && i < 6; ++i) list += (i ? ", " : "") + covered[i];
    if (covered.size() > 6) list += fmt::format(" and {} more", covered.size() - 6);
    return {"/proc", Check::Verdict::Fail,
            fmt::format("partly covered by mounts ({}), so the kernel refuses a jail its own /proc",
                        list),
            "run pyjail where /proc is fully visible: podman --security-opt unmask=ALL, docker "
            "--security-opt systempaths=unconfined, Kubernetes procMount: Unmasked"};
}

// An outer syscall filter (a container runtime's seccomp profile) that denies what a jail does
// in namespaces of its own, although the kernel allows it there: sethostname in its UTS
// namespace, mount in its mount namespace. Podman's and Docker's default profiles deny
// sethostname to a container without CAP_SYS_ADMIN, whatever namespace it is in.
Check check_outer_filter() {
    CloneArgs args;
    args.flags = CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNS;
    args.exit_signal = SIGCHLD;
    pid_t pid = sys_clone3(args);
    if (pid == 0) {
        // The child holds every capability in its new user namespace: only a filter says no.
        if (::sethostname("pyjail", 6) != 0) ::_exit(errno == EPERM ? 10 : 20);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
            ::_exit(errno == EPERM ? 11 : 21);
        ::_exit(0);
    }
    if (pid < 0)  // the user namespaces check says why
        return {"outer filter", Check::Verdict::Warn, "not checked: no user namespace", ""};
    int status = 0;
    ::waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 0)
        return {"outer filter", Check::Verdict::Ok,
                "sethostname and mount work in a jail's own namespaces", ""};
    const char* call = code == 10 || code == 20 ? "sethostname" : "mount";
    if (code == 10 || code == 11)
        return {"outer filter", Check::Verdict::Fail,
                fmt::format("{} is denied (EPERM) in a jail's own namespaces, where the kernel "
                            "allows it: a seccomp profile of the container runtime forbids it",
                            call),
                "start the container with podman/docker --security-opt seccomp=unconfined (or "
                "a profile that allows sethostname, mount, umount2 and pivot_root), "
                "Kubernetes seccompProfile: Unconfined"};
    return {"outer filter", Check::Verdict::Warn, fmt::format("{} failed in a jail's own namespaces", call),
            ""};
}

// Which way a run gets its delegated cgroup here, and why: none needed, a systemd scope
// (really asked for: doctor then continues in it, as a run would), or none to be had.
Check check_cgroup_manager(CgroupSite& site) {
    const std::vector<std::string> all = {"memory", "pids", "cpu"};
    if (site.ok)
        return {"cgroup manager", Check::Verdict::Ok,
                fmt::format("none needed: {} is delegated (runs open no D-Bus connection)", site.base), ""};
    setup::ScopeDecision d = setup::decide_scope(CgroupManager::Auto, CgroupMode::Auto, true, site,
                                                 false, setup::systemd_booted());
    if (!site.not_delegated)  // no cgroup2, or controllers bound to v1: a scope would lack them too
        return {"cgroup manager", Check::Verdict::Warn,
                "none: a delegated systemd scope cannot help where " +
                    site.why_not.substr(0, site.why_not.find(';')),
                ""};
    if (!d.ask)
        return {"cgroup manager", Check::Verdict::Warn,
                "none: systemd is not the init here (/run/systemd/system does not exist), so no "
                "scope can be asked for",
                ""};
    std::string why_not;
    auto bus = setup::choose_bus(::geteuid(), std::getenv("DBUS_SESSION_BUS_ADDRESS"),
                                 std::getenv("XDG_RUNTIME_DIR"), std::getenv("DBUS_SYSTEM_BUS_ADDRESS"),
                                 why_not);
    if (!bus) return {"cgroup manager", Check::Verdict::Warn, "none: " + why_not, ""};
    std::string was = site.why_not.substr(0, site.why_not.find(';'));
    try {
        supervisor::JoinedScope joined = supervisor::join_systemd_scope(*bus);
        site = setup::find_cgroup_site(all, joined.cgroup_dir, ::geteuid());
        return {"cgroup manager", Check::Verdict::Ok,
                fmt::format("systemd: each run asks {} over {} for a delegated scope, as {} "
                            "(got {} in {:.1f} ms)",
                            bus->manager_name(), bus->origin, was, joined.unit, joined.ms),
                ""};
    } catch (const JailError& e) {
        return {"cgroup manager", Check::Verdict::Warn,
                fmt::format("none: {} ({})", e.message(), was),
                bus->system ? "start dbus and systemd's system manager, or --cgroup-manager none"
                            : "a user manager for this user: loginctl enable-linger USER, or "
                              "--cgroup-manager none"};
    }
}

std::vector<Check> check_cgroup() {
    std::vector<Check> out;
    CgroupSite site = setup::find_cgroup_site({"memory", "pids", "cpu"}, "", ::geteuid());
    out.push_back(check_cgroup_manager(site));
    if (!site.ok) {
        // Controllers bound to cgroup v1 cannot be delegated in v2 by anyone: only a boot with
        // the unified hierarchy helps.
        out.push_back({"cgroup v2", Check::Verdict::Warn,
                       site.why_not + "; limits fall back to rlimits (memory per process, pids "
                                      "per jail (counted per user namespace), no CPU share)",
                       site.controllers_on_v1
                           ? "boot with systemd.unified_cgroup_hierarchy=1 (the kernel command "
                             "line), or accept the rlimit fallback (--cgroup-notice off quiets it)"
                           : "systemd-run --user --scope -p Delegate=yes pyjail ..., or "
                             "--cgroup-parent DIR of a delegated cgroup"});
        return out;
    }
    try {
        // The controllers a jail would enable, so their files exist in the leaf.
        supervisor::CgroupLeaf leaf(site, {{"memory.max", "max"}, {"pids.max", "max"}, {"cpu.max", "max"}});
        // A child born into the leaf, as a jail is (clone3 with CLONE_INTO_CGROUP, Linux 5.7).
        CloneArgs args;
        args.flags = kCloneIntoCgroup;
        args.cgroup = static_cast<std::uint64_t>(leaf.dir_fd());
        args.exit_signal = SIGCHLD;
        pid_t pid = sys_clone3(args);
        if (pid == 0) ::_exit(0);
        if (pid < 0)
            throw JailError("cgroup", "clone3 with CLONE_INTO_CGROUP failed", errno,
                            "pyjail needs Linux 5.7 or newer for limits through cgroup v2");
        ::waitpid(pid, nullptr, 0);
        bool kill = ::access((leaf.path() + "/cgroup.kill").c_str(), F_OK) == 0;
        bool peak = ::access((leaf.path() + "/memory.peak").c_str(), F_OK) == 0;
        out.push_back({"cgroup v2", Check::Verdict::Ok,
                       fmt::format("delegated: {} (started a process in a test leaf)", site.base),
                       ""});
        out.push_back({"cgroup.kill", kill ? Check::Verdict::Ok : Check::Verdict::Warn,
                       kill ? "present" : "missing (Linux < 5.14): the jail is frozen, then killed",
                       ""});
        out.push_back({"memory.peak", peak ? Check::Verdict::Ok : Check::Verdict::Warn,
                       peak ? "present"
                            : "missing (Linux < 5.19): the report's peak memory is the largest "
                              "process's",
                       ""});
    } catch (const JailError& e) {
        out.push_back({"cgroup v2", Check::Verdict::Warn, e.one_line(),
                       "systemd-run --user --scope -p Delegate=yes pyjail ..."});
    }
    return out;
}

// Whether the host files the rootfs at `path` was built from changed since (a security update
// the jail would not get): the builder compares what its build recorded with the host now and
// prints one line of JSON. Returns "" when nothing changed or nothing can be said, else why.
std::string rootfs_sources_changed(const DataDirs& dirs, const std::string& path) {
    std::string command;
    try {
        for (const auto& a : rootfs_builder_argv(dirs, {"sources", path}))
            command += (command.empty() ? "" : " ") + quote(a);
    } catch (const JailError&) {
        return "";  // no builder: the manifest check still stands
    }
    std::string out;
    if (run_capture(command, out) != 0) return "";
    while (!out.empty() && out.back() == '\n') out.pop_back();
    auto nl = out.rfind('\n');  // its last line: the JSON (warnings could come before)
    auto verdict = nlohmann::json::parse(nl == std::string::npos ? out : out.substr(nl + 1),
                                         nullptr, false);
    if (!verdict.is_object() || verdict.value("state", "") != "stale") return "";
    return verdict.value("summary", "its sources changed");
}

// Each file the rootfs's manifest lists hashes to its digest (the job of `sha256sum -c`,
// done here with pyjail's own SHA-256: no shell, no tool from PATH). Files are opened below
// the rootfs with no symbolic link followed, so a link planted in a user's rootfs cannot make
// doctor read (and report on) a file outside it. Returns the count checked; `bad` says the
// first file that fails, or why the manifest cannot be read.
// A regular file below `dir`, opened with no symbolic link followed (a link planted in a
// user's rootfs must not make doctor, run by root, read a file outside it, e.g. show the first
// line of /etc/shadow as "a malformed manifest line"); why not in `why`.
UniqueFd open_regular_beneath(int dir, const std::string& name, std::string& why) {
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how)));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        why = fmt::format("{}: {}", name, !fd ? std::strerror(errno) : "not a regular file");
        return UniqueFd();
    }
    return fd;
}

// A manifest lists a rootfs's files, some thousands of lines: one larger than this is not one
// the builder wrote, and is not read into memory.
constexpr off_t kMaxManifestBytes = 64 << 20;

std::size_t verify_manifest(const std::string& rootfs, std::string& bad) {
    UniqueFd dir(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) {
        bad = fmt::format("cannot open the rootfs: {}", std::strerror(errno));
        return 0;
    }
    UniqueFd mf = open_regular_beneath(dir.get(), "etc/pyjail-manifest.sha256", bad);
    struct stat mst {};
    std::string manifest;
    if (mf && ::fstat(mf.get(), &mst) == 0 && mst.st_size > kMaxManifestBytes)
        bad = fmt::format("etc/pyjail-manifest.sha256: {} bytes, more than a manifest takes", mst.st_size);
    else if (mf && !try_read_fd(mf.get(), manifest))
        bad = fmt::format("etc/pyjail-manifest.sha256: {}", std::strerror(errno));
    if (!bad.empty()) {
        bad = "cannot read " + bad;
        return 0;
    }
    std::size_t files = 0;
    std::istringstream lines(manifest);
    std::vector<char> buf(1 << 16);
    for (std::string line; std::getline(lines, line);) {
        auto entry = parse_manifest_line(line);
        if (!entry) {
            bad = fmt::format("a malformed manifest line: {:.80}", line);
            return files;
        }
        UniqueFd fd = open_regular_beneath(dir.get(), entry->name, bad);
        if (!fd) return files;
        Sha256 h;
        ssize_t n;
        while ((n = ::read(fd.get(), buf.data(), buf.size())) > 0) h.update(buf.data(), static_cast<std::size_t>(n));
        if (n < 0 || h.hex() != entry->hex) {
            bad = fmt::format("{}: {}", entry->name, n < 0 ? std::strerror(errno) : "FAILED");
            return files;
        }
        ++files;
    }
    return files;
}

// Whether a jail can use the rootfs at `path`. Doctor may run as root, who reads everything;
// a jail's pid 1 opens the rootfs with the jail's host user's rights. So a jail is started
// in it, as a run would be, and its report (--report-fd) says why it could not: the run's
// own error, when a step of the rootfs failed (anything else, the other checks name).
std::optional<Check> rootfs_unusable(const std::string& self, const std::string& path,
                                     const std::string& label) {
    std::string report;
    int rc = run_capture(quote(self) + " --rootfs " + quote(path) +
                             " --quiet --cgroup off --report-fd 3 -- python3 -c pass"
                             " 3>&1 >/dev/null </dev/null",
                         report);
    if (rc == 0) return std::nullopt;
    auto j = nlohmann::json::parse(report, nullptr, false);
    if (!j.is_object() || !j["error"].is_object()) return std::nullopt;
    const auto& e = j["error"];
    std::string step = e.value("step", "");
    if (step != "rootfs" && step != "rootfs bind") return std::nullopt;
    int err = e.value("errno", 0);
    return Check{label, Check::Verdict::Fail,
                 fmt::format("a jail cannot use it: {}: {}{}", step, e.value("message", ""),
                             err != 0 ? fmt::format(": {}", std::strerror(err)) : ""),
                 e.value("hint", "")};
}

// The rootfs at `path` is one a jail can use, matches its manifest, and its sources on the
// host are still those it was built from (`label`: "rootfs", or "rootfs NAME"; `value`: how
// to name it).
Check check_rootfs(const std::string& self, const DataDirs& dirs, const std::string& path,
                   const std::string& label, const std::string& value) {
    if (auto unusable = rootfs_unusable(self, path, label)) return *unusable;
    std::string info;
    if (!try_read_file(path + "/etc/pyjail-rootfs", info))
        return {label, Check::Verdict::Fail, fmt::format("no rootfs at {}", path),
                "build it: cmake --build build, or pyjail rootfs build --out DIR (or --name NAME)"};
    std::string version;
    std::istringstream in(info);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("PYTHON_VERSION=", 0) == 0) version = line.substr(15);
    std::string bad;
    std::size_t files = verify_manifest(path, bad);
    if (!bad.empty())
        return {label, Check::Verdict::Fail,
                fmt::format("{}: files differ from its manifest: {}", path, bad),
                "rebuild the rootfs"};
    std::string changed = rootfs_sources_changed(dirs, path);
    if (!changed.empty())
        return {label, Check::Verdict::Warn,
                fmt::format("{}: Python {}, {} files match the manifest, but its sources {}",
                            path, version, files, changed),
                fmt::format("pyjail rootfs rebuild {} (as the user who built it; see man "
                            "pyjail-rootfs for doing it after every upgrade)", value)};
    return {label, Check::Verdict::Ok,
            fmt::format("{}: Python {}, {} files match the manifest", path, version, files),
            ""};
}

// Why profile `name` cannot plan from `dir` ("" the current directory), or nothing: its
// --explain's error as its report gives it (a message, without the path and line of the key
// it names), or the first line it printed.
std::optional<std::string> profile_plan_refusal(const std::string& self, const std::string& name,
                                                const std::string& dir) {
    std::string out;
    int rc = run_capture((dir.empty() ? "" : "cd " + quote(dir) + " && ") + quote(self) + " --profile " +
                             quote(name) + " --quiet --explain --report-fd 3 -- python3 -c pass 3>&1 >/dev/null",
                         out);
    if (rc == 0) return std::nullopt;
    auto j = nlohmann::json::parse(out, nullptr, false);
    if (!j.is_object() || !j["error"].is_object() || !j["error"]["message"].is_string())
        return first_line(out);
    std::string m = j["error"]["message"].get<std::string>();
    if (auto key = m.find(": key '"); key != std::string::npos)
        if (auto end = m.find("': ", key + 7); end != std::string::npos) m.erase(0, end + 3);
    const std::string binds = fmt::format("--profile {} binds the current directory ", name);
    if (m.rfind(binds, 0) == 0) m.erase(0, binds.size());
    return m;
}

// Each shipped profile parses and plans here (--explain does all but start the jail), from
// the current directory, which standard and batch bind. One that refuses it but plans from a
// project directory (the rootfs's: one every jail can read) is fine on this host: that is
// said once, with why, rather than warned of as a fault of the host (a home, or /).
Check check_profiles(const std::string& self, const DataDirs& dirs) {
    std::vector<std::string> good, here_only, bad, why_here;
    for (const auto& name : list_profiles(dirs)) {
        auto why = profile_plan_refusal(self, name, "");
        if (!why) good.push_back(name);
        else if (!profile_plan_refusal(self, name, dirs.rootfs)) {
            good.push_back(name);
            here_only.push_back(name);
            if (std::find(why_here.begin(), why_here.end(), *why) == why_here.end()) why_here.push_back(*why);
        } else bad.push_back(fmt::format("{}: {}", name, *why));
    }
    std::string detail = fmt::format("{} plan here", fmt::join(good, ", "));
    if (!here_only.empty()) {
        const bool one = here_only.size() == 1;
        detail += fmt::format("; {} {} the current directory, and {} this one: {} (run {} from a project directory)",
                              fmt::join(here_only, " and "), one ? "binds" : "bind", one ? "refuses" : "refuse",
                              fmt::join(why_here, "; "), one ? "it" : "them");
    }
    if (!bad.empty())
        return {"profiles", Check::Verdict::Warn, fmt::format("{}; cannot: {}", detail, fmt::join(bad, "; ")),
                "fix what the message says"};
    return {"profiles", Check::Verdict::Ok, detail, ""};
}

// The shipped sets should load compiled at build time; compiling one at run time works, but
// costs about 1.5 ms a run.
Check check_compiled_filters(const DataDirs& dirs) {
    std::string groups, set, missing;
    std::string seccomp_dir = dirs.profiles + "/seccomp/";
    if (!try_read_file(seccomp_dir + "groups.toml", groups) || !try_read_file(seccomp_dir + "python.toml", set))
        return {"seccomp filters", Check::Verdict::Warn, "cannot read the shipped set " + seccomp_dir + "python.toml",
                "reinstall pyjail"};
    for (NetMode net : {NetMode::None, NetMode::Loopback}) {
        std::string file;
        if (!load_compiled_filter(dirs, FilterInputs{set, groups, net}, file))
            missing += fmt::format("{}net {}", missing.empty() ? "" : ", ", net_mode_name(net));
    }
    if (!missing.empty())
        return {"seccomp filters", Check::Verdict::Warn,
                fmt::format("set 'python' ({}) has no up-to-date filter in {}: every run compiles it "
                            "(about 1.5 ms)", missing, dirs.compiled_filters),
                "rebuild and reinstall pyjail (the build compiles the shipped sets)"};
    return {"seccomp filters", Check::Verdict::Ok, "the shipped set is compiled at build time", ""};
}

Check check_strict(const std::string& self) {
    std::string out;
    int rc = run_capture(quote(self) +
                             " --profile strict --quiet -- python3 -c 'print(\"jail ok\")' </dev/null",
                         out);
    if (rc == 0 && out == "jail ok\n")
        return {"profile strict", Check::Verdict::Ok, "ran python3 in a strict jail", ""};
    return {"profile strict", Check::Verdict::Fail,
            fmt::format("exit {}: {}", rc, first_line(out)), "see the checks above"};
}

}  // namespace

std::vector<Check> run_doctor_checks(const std::string& self, const std::vector<std::string>& rootfses) {
    std::vector<Check> checks;
    checks.push_back(check_kernel());
    checks.push_back(check_user_namespaces());
    if (std::string mountinfo; try_read_file("/proc/self/mountinfo", mountinfo) && root_is_initramfs(mountinfo))
        // A warning: / may be a bind of the initramfs (as a VM's or a container's init makes
        // it), which pivot_root can leave; the strict jail's check below says whether it can.
        checks.push_back({"root file system", Check::Verdict::Warn,
                          "/ is the initramfs (rootfs), or a mount of it: pivot_root cannot leave the "
                          "initramfs itself",
                          kInitramfsRootHint});
    if (read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1")
        checks.push_back({"apparmor", Check::Verdict::Warn,
                          "kernel.apparmor_restrict_unprivileged_userns=1: unprivileged user "
                          "namespaces need an AppArmor profile",
                          "install pyjail's AppArmor profile (see the README)"});
    checks.push_back(check_seccomp());
    checks.push_back(check_proc());
    checks.push_back(check_outer_filter());
    checks.push_back(check_host_ids());
    for (auto& c : check_cgroup()) checks.push_back(std::move(c));
    DataDirs dirs;
    try {
        dirs = find_data_dirs();
    } catch (const JailError& e) {  // no data, or data others could change: nothing runs
        checks.push_back({"data", Check::Verdict::Fail, e.message(), e.hint()});
        return checks;
    }
    checks.push_back(check_rootfs(self, dirs, dirs.rootfs, "rootfs", "default"));
    for (const auto& value : rootfses) {
        std::string label = "rootfs " + value;
        try {
            checks.push_back(check_rootfs(self, dirs, resolve_rootfs(value, dirs), label, value));
        } catch (const JailError& e) {  // no such name, or one others could change
            checks.push_back({label, Check::Verdict::Fail, e.message(), e.hint()});
        }
        checks.back().scope = "--rootfs " + value;
    }
    checks.push_back(check_compiled_filters(dirs));
    checks.push_back(check_profiles(self, dirs));
    checks.push_back(check_strict(self));
    return checks;
}

namespace {

// The failed checks of the host itself (not of an option asked about).
std::vector<const Check*> host_fails(const std::vector<Check>& checks) {
    std::vector<const Check*> out;
    for (const auto& c : checks)
        if (c.verdict == Check::Verdict::Fail && c.scope.empty()) out.push_back(&c);
    return out;
}

}  // namespace

std::string format_checks(const std::vector<Check>& checks, bool json) {
    if (json) {
        nlohmann::ordered_json j = nlohmann::ordered_json::array();
        for (const auto& c : checks)
            j.push_back({{"check", c.name},
                         {"status", c.verdict == Check::Verdict::Fail ? "fail" : verdict_name(c.verdict)},
                         {"detail", c.detail},
                         {"fix", c.fix}});
        nlohmann::ordered_json doc = {{"strict_can_run", host_fails(checks).empty()},
                                      {"checks", j}};
        return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    }
    // The names' column as wide as the widest (a --rootfs path can be long), 16 at least.
    std::size_t width = 16;
    for (const auto& c : checks) width = std::max(width, c.name.size());
    std::string out;
    for (const auto& c : checks) {
        out += fmt::format("{:<5} {:<{}} {}\n", verdict_name(c.verdict), c.name, width, c.detail);
        if (!c.fix.empty()) out += fmt::format("{:<{}} fix: {}\n", "", width + 6, c.fix);
    }
    // A rootfs asked about that cannot be used does not stop strict with the default one.
    std::vector<std::string> unusable;
    for (const auto& c : checks)
        if (c.verdict == Check::Verdict::Fail && !c.scope.empty()) unusable.push_back(c.scope);
    if (!host_fails(checks).empty())
        out += "=> --profile strict cannot run here; fix the FAILs above.\n";
    else if (!unusable.empty())
        out += fmt::format("=> --profile strict can run here, but not with {}; fix the FAILs above.\n",
                           fmt::join(unusable, " or "));
    else
        out += "=> --profile strict can run here.\n";
    return out;
}

int doctor_exit_code(const std::vector<Check>& checks) {
    for (const auto& c : checks)
        if (c.verdict == Check::Verdict::Fail) return 1;
    return 0;
}

}  // namespace pyjail
