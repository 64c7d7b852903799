#include "explain.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "rootfs_name.hpp"

namespace pyjail {

std::string toml_quote(const std::string& value) {
    std::string out = "\"";
    for (char c : value) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

namespace {
const char* source_name(Source s) {
    switch (s) {
        case Source::Default: return "default";
        case Source::Profile: return "profile";
        case Source::CommandLine: return "command line";
    }
    return "";
}

// Whether `v` is a TOML integer or float as written bare: 300, 0.5 (not 007, 1., +1, 1e3, "").
bool is_toml_number(const std::string& v) {
    std::size_t i = 0;
    auto digits = [&] {
        std::size_t start = i;
        while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
        return i - start;
    };
    std::size_t whole = digits();
    if (whole == 0 || (whole > 1 && v[0] == '0')) return false;
    if (i < v.size() && v[i] == '.') {
        ++i;
        if (digits() == 0) return false;
    }
    return i == v.size();
}

// A scalar as TOML types it, so that whoever reads --explain (tomllib, a profile) gets a
// boolean and a number where pyjail takes one: a flag bare (true, false), a count or a time
// bare when it is a number, anything else a string ("" for none, "512M", "auto").
std::string explain_value(const OptionSpec& o, const std::string& value) {
    if (o.kind == OptKind::Flag && (value == "true" || value == "false")) return value;
    if (is_number_option(o) && is_toml_number(value)) return value;
    return toml_quote(value);
}

// Every setting as TOML, with where it came from.
std::string explain_settings(const ExplainInput& in) {
    std::string out = "# pyjail --explain: the effective policy (nothing was run).\n"
                      "# Settings, with where each came from:\n";
    for (const auto& o : option_table()) {
        if (!o.profile_key) continue;
        const auto& items = in.policy.settings.at(std::string(o.name));
        if (o.kind == OptKind::List) {
            std::string line = fmt::format("{} = [", o.name);
            std::string origins;
            for (std::size_t i = 0; i < items.size(); ++i) {
                line += (i ? ", " : "") + toml_quote(items[i].value);
                origins += fmt::format("{}{} ({})", i ? ", " : "", source_name(items[i].source),
                                       items[i].origin);
            }
            line += "]";
            out += fmt::format("{:<40} # {}\n", line, items.empty() ? "default" : origins);
        } else {
            const auto& it = items.back();
            // The rootfs as it was found: the default one, or the directory a name names.
            std::string value =
                o.name == "rootfs" && (it.value.empty() || is_rootfs_name(it.value)) ? in.rootfs : it.value;
            std::string line = fmt::format("{} = {}", o.name, explain_value(o, value));
            out += fmt::format("{:<40} # {}{}\n", line, source_name(it.source),
                               it.source == Source::Default ? "" : " (" + it.origin + ")");
        }
    }
    return out;
}

// Who the jail's processes are, inside and on the host.
std::string explain_ids(const ExplainInput& in) {
    std::string out;
    const bool own_ids = in.host_ids != nullptr && (in.host_ids->kind == HostIdKind::OwnRange ||
                                                    in.host_ids->kind == HostIdKind::Subordinate);
    if (own_ids)
        out += fmt::format("# Runs as:   uid {} gid {} inside (user 'jail'); on the host, ids of its own\n",
                           kJailUid, kJailGid);
    else
        out += fmt::format("# Runs as:   uid {} gid {} inside (user 'jail'); host uid {} gid {}\n",
                           kJailUid, kJailGid, in.ids.host_uid, in.ids.host_gid);
    if (const HostIdPlan* h = in.host_ids) {
        if (h->kind == HostIdKind::OwnRange || h->kind == HostIdKind::Subordinate)
            out += fmt::format("# Host ids:  one of {} uids from {} (gids from {}), free when the jail runs{}\n",
                               h->uids.count, h->uids.first, h->gids.first,
                               h->idmap_binds ? fmt::format("; host binds idmapped to uid {}", h->files_uid) : "");
        else
            out += fmt::format("# Host ids:  kernel budgets shared with {}: {}\n", h->shared_with, h->why_shared);
    }
    return out;
}

// The network mode, and under --net allow the hosts the jail reaches by name.
std::string explain_network(const ExplainInput& in) {
    const char* mode = in.policy.net == NetMode::None       ? "none (loopback down)"
                       : in.policy.net == NetMode::Loopback ? "loopback only (private 127.0.0.1)"
                                                            : "loopback, and through pyjail by name:";
    std::string out = fmt::format("# Network:   {}\n", mode);
    if (in.policy.net == NetMode::Allow) {
        for (const auto& h : in.policy.egress.hosts) {
            std::string ports;
            for (auto port : h.ports) ports += (ports.empty() ? "" : ",") + std::to_string(port);
            out += fmt::format("#   {} port {}\n", h.name, ports);
        }
        for (const auto& pin : in.policy.egress.pins)
            out += fmt::format("#   {} pinned to {}\n", pin.name, dns::format_ipv4(pin.address));
        for (const auto& preset : allow_host_presets()) {
            std::string hosts;
            for (auto h : preset.hosts) hosts += fmt::format(" {}", h);
            out += fmt::format("#   (--allow-host @{}:{}: {})\n", preset.name, hosts, preset.what);
        }
    }
    return out;
}

// The seccomp set: what it allows, checks and denies.
std::string explain_seccomp(const ExplainInput& in) {
    std::string out;
    if (in.seccomp == nullptr) {
        out += "# Seccomp:   OFF (--seccomp off): every syscall the kernel allows\n";
    } else {
        out += fmt::format("# Seccomp:   set '{}': {} syscalls allowed, {} denied by name (EPERM), "
                           "all others ENOSYS; refused calls are reported\n",
                           in.seccomp->name, in.seccomp->allow.size(), in.seccomp->deny.size());
        out += fmt::format("#   checked: clone without CLONE_NEW*; clone3 -> ENOSYS; socket {}; "
                           "ioctl but TIOCSTI/TIOCLINUX; personality query/PER_LINUX; other "
                           "architectures (i386, x32) kill\n",
                           in.policy.net != NetMode::None ? "AF_UNIX/AF_INET/AF_INET6"
                                                              : "AF_UNIX only");
        auto wrap = [&](const char* title, const std::vector<std::string>& names) {
            std::string line = std::string("#   ") + title + ":";
            for (const auto& n : names) {
                if (line.size() + n.size() > 98) {
                    out += line + "\n";
                    line = "#    ";
                }
                line += " " + n;
            }
            out += line + "\n";
        };
        wrap("allowed", in.seccomp->allow);
        wrap("denied", in.seccomp->deny);
    }
    return out;
}

// The limits, in columns as wide as their widest entry (inotify-instances is 17 letters).
std::string explain_limits(const std::vector<LimitEntry>& limits) {
    std::size_t name_width = 0, value_width = 0;
    for (const auto& l : limits) {
        name_width = std::max(name_width, l.name.size());
        value_width = std::max(value_width, l.value.size());
    }
    std::string out = "# Limits:\n";
    for (const auto& l : limits)
        out += fmt::format("#   {:<{}} {:<{}} {} ({})\n", l.name, name_width, l.value, value_width,
                           mechanism_name(l.mechanism), l.detail);
    return out;
}

}  // namespace

std::string explain_text(const ExplainInput& in) {
    std::string out = explain_settings(in);
    out += fmt::format("# profile: {}\n", in.policy.profile);
    out += "#\n# Namespaces: user, mount, pid, net, ipc, uts, cgroup (all new)\n";
    out += explain_ids(in);
    out += "# Privileges: no capabilities, no_new_privs, new session, no core dumps\n";
    out += explain_network(in);
    out += fmt::format("# Wall time: {}\n", in.policy.wall_time > 0
                                                ? fmt::format("{} s", in.policy.wall_time)
                                                : std::string("no limit"));
    out += fmt::format("# cgroup:    {}\n", in.cgroup);
    out += explain_limits(in.limits);
    out += explain_seccomp(in);
    out += "# Filesystem (the root is read-only; in order):\n";
    for (const auto& op : in.mounts.ops) out += "#   " + describe_op(op, in.mounts) + "\n";
    out += fmt::format("# Working directory: {}\n", in.mounts.cwd);
    out += "# Environment:\n";
    for (const auto& e : in.env) out += "#   " + e + "\n";
    if (!in.argv.empty()) {
        out += fmt::format("# Command:   {}", in.exec_path);
        for (std::size_t i = 1; i < in.argv.size(); ++i) out += " " + in.argv[i];
        out += "\n";
    }
    return out;
}

}  // namespace pyjail
