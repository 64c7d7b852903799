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

#include "limits.hpp"
#include "options.hpp"

namespace pyjail {

enum class NetMode { None, Loopback };
enum class CgroupMode { Auto, Require, Off };

struct BindSpec {
    std::string source;  // host path, absolute (made so against the current directory)
    std::string target;  // path inside the jail, absolute and normalized
    bool writable = false;
    std::string origin;  // where it was asked for, for messages
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
    std::uint64_t tmpfs_size = 0;        // bytes
    NetMode net = NetMode::None;
    std::vector<std::pair<std::string, std::string>> env;  // added by profile and --env
    double wall_time = 0;                                   // seconds; 0 means no limit
    double kill_grace = 5;  // seconds from a relayed SIGTERM/HUP/INT/QUIT to the kill; 0: at once
    std::string hostname;
    std::string seccomp;  // set name or file; "off" turns the filter off
    Limits limits;
    CgroupMode cgroup = CgroupMode::Auto;
    std::string cgroup_parent;  // "" : pyjail's own cgroup
    std::string report_path;    // "" : none (--report-fd is command-line only: see main.cpp)
    HostUser host_user;
    bool explain = false;
    bool verbose = false;
    bool quiet = false;
    std::vector<std::string> command;
};

// `cwd` resolves relative host paths. Throws UsageError.
Policy make_policy(const Settings& settings, std::vector<std::string> command,
                   const std::string& cwd);

// A decimal of 1 to 9 digits and nothing else (an id, a count, a descriptor), or nothing.
std::optional<std::uint32_t> parse_small_number(std::string_view text);

// Helpers, exposed for tests.
std::uint64_t parse_size(const std::string& text, const std::string& origin);
double parse_seconds(const std::string& text, const std::string& origin,
                     const char* zero_means = "no limit");
// "/a//b/./c/" -> "/a/b/c"; keeps "..", which callers reject or accept.
std::string normalize_path(const std::string& path);
std::string absolute_path(const std::string& path, const std::string& cwd);
BindSpec parse_bind(const std::string& text, bool writable, const std::string& origin,
                    const std::string& cwd);

}  // namespace pyjail

namespace pyjail {
// The program's environment, built from scratch: fixed defaults, then the profile's and the
// command line's --env. Never anything of the host's.
std::vector<std::string> jail_environment(const Policy& policy);
}  // namespace pyjail
