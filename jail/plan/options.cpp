#include "options.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "edit_distance.hpp"

namespace pyjail {

namespace {
// A table, not code: constant (so usable before main), kept in the order --help and
// --explain show them.
constexpr OptionSpec kOptions[] = {
        {"profile", OptKind::Text, "strict", "NAME|FILE",
         "Profile to start from: strict, standard, batch, repl, or a path to a profile file", false},
        {"rootfs", OptKind::Text, "", "NAME|DIR",
         "Root filesystem to run in: a name (pyjail rootfs list) or a directory (default: the "
         "one installed with pyjail)", true},
        {"ro-bind", OptKind::List, "", "SRC[:DST]",
         "Make host path SRC visible read-only at DST (default: the same path)", true},
        {"bind", OptKind::List, "", "SRC[:DST]",
         "Make host path SRC visible read-write at DST (default: the same path)", true},
        {"workdir", OptKind::Text, "", "DIR",
         "Host directory mounted read-write at /work, the jail's working directory "
         "(default: a private tmpfs)", true},
        // Exposing a sensitive directory (see policy.hpp: sensitive_bind_reason).
        {"allow-sensitive-bind", OptKind::Flag, "false", "",
         "Allow a bind named on the command line (--workdir, --bind, --ro-bind) to expose /, "
         "your home, one of its ancestors, or a directory holding credentials", true},
        {"tmpfs-size", OptKind::Text, "64M", "SIZE",
         "Size cap of the private scratch space (/tmp, /work, /dev/shm together), e.g. 64M, 1G",
         true},
        {"net", OptKind::Text, "none", "none|loopback|allow",
         "Network: none (no interface up), loopback (only 127.0.0.1/::1, private), or allow "
         "(loopback, and the hosts --allow-host names, through pyjail)", true},
        // Controlled egress (egress_plan.hpp).
        {"allow-host", OptKind::List, "", "HOST[:PORT]",
         "With --net allow: a host name the jail may reach, on PORT (default: 80 and 443); "
         "*.example.com allows its subdomains", true},
        {"net-resolve", OptKind::List, "", "HOST:ADDRESS",
         "With --net allow: reach HOST at ADDRESS instead of what DNS says (as curl's "
         "--resolve); a pinned address may be private or loopback", true},
        {"net-dns", OptKind::Text, "", "ADDRESS[:PORT]",
         "With --net allow: the resolver pyjail asks for the allowed names (default: the "
         "host's /etc/resolv.conf); the jail's own queries never reach it", true},
        {"net-bytes", OptKind::Text, "", "SIZE",
         "With --net allow: most bytes relayed each way in a run, all connections together",
         true},
        {"env", OptKind::List, "", "KEY=VALUE",
         "Set an environment variable in the jail (the host's are passed only by --env-pass)",
         true},
        {"env-pass", OptKind::List, "", "NAME",
         "Pass the host's variable NAME into the jail as pyjail got it (unset on the host: "
         "unset in the jail); --env wins for the same NAME", true},
        {"wall-time", OptKind::Text, "0", "SECONDS",
         "Kill the whole jail after this many seconds of real time (0: no limit)", true},
        {"kill-grace", OptKind::Text, "5", "SECONDS",
         "After relaying SIGTERM, SIGHUP or SIGQUIT, kill the whole jail if it is still "
         "running this many seconds later (0: at once)", true},
        {"cpu-time", OptKind::Text, "0", "SECONDS",
         "Kill the whole jail after this much CPU time, all its processes together (0: no limit; "
         "under the rlimit fallback, the processes /proc shows, and RLIMIT_CPU for each)",
         true},
        {"memory", OptKind::Text, "", "SIZE",
         "Memory limit of the whole jail, e.g. 512M (cgroup v2 memory.max, no swap)", true},
        {"pids", OptKind::Text, "", "N", "Most processes and threads the jail may have at once",
         true},
        {"cpus", OptKind::Text, "", "X", "CPU bandwidth of the whole jail in CPUs, e.g. 0.5", true},
        {"fsize", OptKind::Text, "", "SIZE", "Largest file the program may write", true},
        {"output-limit", OptKind::Text, "", "SIZE",
         "Stop the program once it wrote this much to stdout and stderr together", true},
        {"nofile", OptKind::Text, "1024", "N", "Open files per process", true},
        {"cgroup", OptKind::Text, "auto", "auto|require|off",
         "Limits through cgroup v2: where possible (auto, else rlimits), or refuse to run "
         "without it (require), or rlimits only (off)", true},
        {"cgroup-manager", OptKind::Text, "auto", "auto|systemd|none",
         "When pyjail's cgroup is not delegated: ask systemd over D-Bus for a delegated scope "
         "(systemd: or fail), where systemd runs (auto), or never (none)", true},
        {"cgroup-parent", OptKind::Text, "", "PATH",
         "Delegated cgroup v2 directory to create the jail's cgroup in (default: pyjail's own)",
         true},
        {"cgroup-notice", OptKind::Text, "daily", "WHEN",
         "When to say that the limits fall back to rlimits: daily (once a day per user), "
         "always (every run) or off (never); errors and time-limit lines stay", true},
        {"report", OptKind::Text, "", "FILE", "Write the result report (JSON) to FILE", true},
        {"report-fd", OptKind::Text, "", "N", "Write the result report (JSON) to file descriptor N",
         false},
        {"audit-log", OptKind::Text, "", "FILE",
         "Append one JSON line per run to FILE (who, what, a hash of the program, how it "
         "ended), also for runs that fail", true},
        {"hostname", OptKind::Text, "pyjail", "NAME", "Host name inside the jail", true},
        {"seccomp", OptKind::Text, "python", "NAME|FILE|off",
         "Syscall filter: a set from profiles/seccomp, a set file, or off (no filter: an "
         "explicit, loud opt-out)", true},
        {"host-user", OptKind::Text, "nobody", "USER|UID[:GID]",
         "When pyjail runs as root: a fixed unprivileged host user the jailed program runs as, "
         "instead of an id of its own from --host-ids", true},
        {"host-ids", OptKind::Text, "auto", "auto|shared|FIRST:COUNT",
         "The jail's own host uid/gid: auto (root: one id per jail of 1879048192:65536; a user: "
         "one of the user's /etc/subuid range, when the jail binds none of the user's files), "
         "shared (root: --host-user; a user: the user's own), or root's range FIRST:COUNT", true},
        {"via", OptKind::Text, "", "SOCKET",
         "Run the program as a fork of the template `pyjail serve --socket SOCKET` holds: a jail "
         "of its own, with the template's modules already imported", false},
        {"preload", OptKind::List, "", "MODULE",
         "pyjail serve: a module the template imports from the rootfs before any run, e.g. numpy "
         "(several: numpy,pandas)",
         true},
        {"socket", OptKind::Text, "", "PATH", "pyjail serve: the socket to listen on for runs", false},
        {"allow-binds", OptKind::Flag, "false", "",
         "pyjail serve: runs may bind host paths below /work and /tmp (--bind, --ro-bind, --workdir, "
         "a profile's), opened by each run's client with its own rights; as root, the template "
         "then runs as --host-user (--host-ids shared)", false},
        {"explain", OptKind::Flag, "false", "",
         "Print the effective policy, where each setting came from, and run nothing", false},
        {"verbose", OptKind::Flag, "false", "", "Say what the jail is doing on stderr", false},
        {"quiet", OptKind::Flag, "false", "",
         "Print nothing of pyjail's own on stderr but errors (how the run ended and the limits' "
         "mechanisms are still in the report)", false},
};
}  // namespace

const std::vector<OptionSpec>& option_table() {
    static const std::vector<OptionSpec> table(std::begin(kOptions), std::end(kOptions));
    return table;
}

bool is_number_option(const OptionSpec& o) {
    return o.kind == OptKind::Text && (o.value_name == "SECONDS" || o.value_name == "N" || o.value_name == "X");
}

const OptionSpec* find_option(std::string_view name) {
    for (const auto& o : option_table())
        if (o.name == name) return &o;
    return nullptr;
}

std::string suggest_option(std::string_view unknown, bool command_line) {
    std::string best;
    std::size_t best_d = kTypoEdits + 1;
    for (const auto& o : option_table()) {
        if (!o.profile_key && !command_line) continue;
        std::size_t d = edit_distance(unknown, o.name);
        if (d < best_d) {
            best_d = d;
            best = o.name;
        }
    }
    return best;
}

Settings default_settings() {
    Settings s;
    for (const auto& o : option_table()) {
        auto& items = s[std::string(o.name)];
        if (o.kind != OptKind::List)
            items.push_back({std::string(o.default_value), Source::Default, "default"});
    }
    return s;
}

const SettingItem& setting(const Settings& s, std::string_view name) {
    auto it = s.find(name);
    if (it == s.end() || it->second.empty())
        throw std::logic_error("no setting named " + std::string(name));
    return it->second.back();
}

}  // namespace pyjail
