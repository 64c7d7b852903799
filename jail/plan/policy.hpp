// Policy: the one immutable, validated description of a run, made from the settings (defaults,
// profile, command line). Everything that can be wrong with what the user asked for is found
// here, before any process exists; every message names the option or the profile line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "egress_plan.hpp"
#include "error.hpp"
#include "hostid.hpp"
#include "limits.hpp"
#include "options.hpp"
#include "size_text.hpp"

namespace pyjail {

enum class NetMode { None, Loopback, Allow };
enum class CgroupMode { Auto, Require, Off };
// When the rlimit fallback is said on stderr (notice.hpp).
enum class NoticeMode { Daily, Always, Off };
// Who is asked for a delegated cgroup when pyjail's own is not: systemd (over D-Bus, a
// transient scope), nobody, or systemd where it runs (auto). See systemd_scope.hpp.
enum class CgroupManager { Auto, Systemd, None };

struct BindSpec {
    std::string source;  // host path, absolute (made so against the current directory)
    std::string target;  // path inside the jail, absolute and normalized
    bool writable = false;
    std::string origin;  // where it was asked for, for messages
    bool named_on_command_line = false;  // --bind/--ro-bind/--workdir, not a profile's
};

// Who the jail is on the host, as far as host files go, for messages: its uid with its name
// ("uid 65534 (nobody)"), and whether that is the invoking user.
struct JailHostUser {
    std::string uid_and_name;
    bool is_invoker = false;
};

struct HostUser {
    std::string name;                  // as written: "nobody", "65534" or "65534:65534"
    std::optional<unsigned> uid, gid;  // numeric parts, when given as numbers
};

struct Policy {
    Settings settings;    // what was asked, and from where (for --explain)
    std::string profile;  // profile name or path as given
    std::string rootfs;   // "" means: the default rootfs
    std::vector<BindSpec> binds;
    std::optional<std::string> workdir;  // host directory mounted read-write at /work
    std::string workdir_origin;          // "--workdir" or the profile line
    bool workdir_named_on_command_line = false;
    bool allow_sensitive_bind = false;   // see check_sensitive_binds
    std::uint64_t tmpfs_size = 0;        // bytes
    NetMode net = NetMode::None;
    EgressPolicy egress;  // --net allow: what may be reached
    std::vector<std::pair<std::string, std::string>> env;  // added by profile and --env
    std::vector<std::string> env_pass;  // host variables passed by name (--env-pass)
    double wall_time = 0;                                   // seconds; 0 means no limit
    double kill_grace = 5;  // seconds from a relayed SIGTERM/HUP/INT/QUIT to the kill; 0: at once
    std::string hostname;
    std::string seccomp;  // set name or file; "off" turns the filter off
    Limits limits;
    CgroupMode cgroup = CgroupMode::Auto;
    std::string cgroup_parent;  // "" : pyjail's own cgroup
    NoticeMode cgroup_notice = NoticeMode::Daily;
    CgroupManager cgroup_manager = CgroupManager::Auto;
    std::string report_path;    // "" : none (--report-fd is command-line only: see main.cpp)
    std::string audit_log;      // "" : none; absolute
    HostUser host_user;
    bool host_user_explicit = false;  // named by a profile or the command line
    HostIdsSetting host_ids;
    bool explain = false;
    bool verbose = false;
    bool quiet = false;
    std::vector<std::string> command;
};

// `cwd` resolves relative host paths. Throws UsageError.
Policy make_policy(const Settings& settings, std::vector<std::string> command,
                   const std::string& cwd);

// The modules `pyjail serve` preloads (--preload, a profile's preload), in order, each once:
// a value may name several, separated by commas (--preload numpy,pandas). Throws UsageError
// for a value that is no dotted module name, which the template could only fail to import.
std::vector<std::string> preload_modules(const Settings& settings);

// A decimal of 1 to 9 digits and nothing else (an id, a count, a descriptor), or nothing.
std::optional<std::uint32_t> parse_small_number(std::string_view text);
// A uid or gid: any of uid_t's but -1 (e.g. the ids of pyjail's own range, 1879048192 on).
std::optional<std::uint32_t> parse_id(std::string_view text);

// Sensitive binds. A bind shows the jail every file under its source, and a read-only bind
// still lets the jail connect() to every Unix socket there (ssh-agent, gpg-agent, a Docker
// socket): a directory the program has no business seeing can hand it the user's identity.
// `standard` and `batch` bind the current directory, and cron runs jobs from $HOME.
//
// Sensitive: `/`, a home directory of the invoking user or any of its ancestors (/home,
// /root are refused as such), and any directory that holds, or lies inside, one of
// kCredentialNames.
extern const char* const kCredentialNames[];

// The facts about one bind's source, gathered by the caller (no syscalls here).
struct BindExposure {
    std::string real_source;               // realpath
    std::vector<std::string> credentials;  // kCredentialNames present directly in it
};

// Why exposing this source is sensitive ("your home directory", ...), or nothing. `homes`:
// realpaths of $HOME and the invoking user's passwd home.
std::optional<std::string> sensitive_bind_reason(const BindExposure& source,
                                                 const std::vector<std::string>& homes);

// Throws UsageError (exit 125) for the first sensitive bind, unless it was named on the
// command line and --allow-sensitive-bind (or the profile key) says so. A profile's binds,
// such as `standard`'s current directory, are never enough: the user did not name them.
// `binds` and `sources` are parallel (all_binds and their facts).
void check_sensitive_binds(const Policy& policy, const std::vector<BindSpec>& binds,
                           const std::vector<BindExposure>& sources,
                           const std::vector<std::string>& homes);

// The least --memory a jail's Python starts with. Measured with `python3 -c pass` in the
// default rootfs under RLIMIT_DATA (the fallback, which counts the private data of each
// process): from 3.7M it ran; from 1.8M to 3.5M Python stopped with its own "Fatal Python
// error"; at 1.5M and below it died of SIGSEGV without a word. The floor is below what
// works, with room for an interpreter that needs less, and above what never starts.
inline constexpr std::uint64_t kMinMemory = 2ULL << 20;
// A tmpfs holds whole pages: a smaller --tmpfs-size is never what was meant.
inline constexpr std::uint64_t kMinTmpfsSize = 4ULL << 10;

// Who chose a setting's value, for a message about it: "the strict profile's" (from the name
// of the profile file that set it), "the default", or "" when the command line named it.
std::string chosen_by(const SettingItem& item);

// How a bind's source is out of the jail's host user's reach: it cannot be opened (a
// directory on the way is closed, or it is missing), or it is a directory that opens but
// that the user may not enter (search), so nothing in it can be used.
enum class BindRefusal { Reach, Enter };

// A bind whose source cannot be opened or entered (`err`) as the jail's host user will: one
// line that says who asked for the bind (an option, a profile's line, or `profile`'s bind of
// the current directory `cwd`), who cannot reach or enter it, and the fix its errno calls for.
JailError bind_source_error(const BindSpec& b, int err, const JailHostUser& user, const std::string& cwd,
                            const std::string& profile, BindRefusal refusal = BindRefusal::Reach);

// Helpers, exposed for tests.
std::uint64_t parse_size(const std::string& text, const std::string& origin);
// parse_size, refusing less than `floor`: "ORIGIN: 10 bytes TOO_SMALL (at least 2M; did you
// mean 10M?)", the question only for a number written without a unit.
std::uint64_t parse_size_at_least(const std::string& text, const std::string& origin, std::uint64_t floor,
                                  const char* too_small);
double parse_seconds(const std::string& text, const std::string& origin,
                     const char* zero_means = "no limit");
// "/a//b/./c/" -> "/a/b/c"; keeps "..", which callers reject or accept.
std::string normalize_path(const std::string& path);
std::string absolute_path(const std::string& path, const std::string& cwd);
BindSpec parse_bind(const std::string& text, bool writable, const std::string& origin,
                    const std::string& cwd);

}  // namespace pyjail
