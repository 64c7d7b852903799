#include "serve_bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "compiled_filter.hpp"
#include "mountplan.hpp"
#include "size_text.hpp"

namespace pyjail {

namespace {

constexpr const char* kFix = "ask for less, or start pyjail serve with more";

// The cgroup files whose value is a limit, and how two values of one compare. A request may
// set these even where the server does not (a run may be stricter than its server); any
// other file only to the server's own value.
enum class CgroupValue { Count, CpuMax, Exact, Unknown };

CgroupValue cgroup_value_kind(const std::string& file) {
    if (file == "memory.max" || file == "pids.max" || file == "memory.swap.max") return CgroupValue::Count;
    if (file == "cpu.max") return CgroupValue::CpuMax;
    if (file == "memory.oom.group") return CgroupValue::Exact;
    return CgroupValue::Unknown;
}

// "max" or a decimal (an unsigned 64-bit value); nothing for anything else.
std::optional<std::uint64_t> count_value(const std::string& v) {
    if (v == "max") return UINT64_MAX;
    if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    errno = 0;
    unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
    if (errno != 0) return std::nullopt;
    return n;
}

// cpu.max "QUOTA PERIOD" (QUOTA may be "max") as a fraction of a CPU, compared exactly.
struct CpuShare {
    std::uint64_t quota;  // UINT64_MAX: no limit
    std::uint64_t period;
};

std::optional<CpuShare> cpu_share(const std::string& v) {
    auto space = v.find(' ');
    if (space == std::string::npos) return std::nullopt;
    auto q = count_value(v.substr(0, space));
    auto p = count_value(v.substr(space + 1));
    if (!q || !p || *p == 0 || *p == UINT64_MAX || *p > 1000000) return std::nullopt;
    if (*q != UINT64_MAX && *q > (1ULL << 40)) return std::nullopt;
    return CpuShare{*q, *p};
}

bool cpu_at_most(const CpuShare& a, const CpuShare& b) {
    if (b.quota == UINT64_MAX) return true;
    if (a.quota == UINT64_MAX) return false;
    // quota < 2^40 and period <= 10^6 (cpu_share): the products fit.
    return a.quota * b.period <= b.quota * a.period;
}

// A tmpfs option's size: bytes with an optional k, m or g suffix, as the planner writes them.
std::optional<std::uint64_t> tmpfs_number(std::string v) {
    std::uint64_t unit = 1;
    if (!v.empty()) {
        char last = v.back();
        if (last == 'k' || last == 'K') unit = 1ULL << 10;
        if (last == 'm' || last == 'M') unit = 1ULL << 20;
        if (last == 'g' || last == 'G') unit = 1ULL << 30;
        if (unit != 1) v.pop_back();
    }
    auto n = count_value(v);
    if (!n || *n == UINT64_MAX || *n > UINT64_MAX / unit) return std::nullopt;
    return *n * unit;
}

// The option a limit comes from, for messages: "--memory (RLIMIT_DATA)".
std::string limit_named(const std::string& what) {
    static const std::pair<const char*, const char*> options[] = {
        {"RLIMIT_DATA", "--memory"}, {"RLIMIT_NPROC", "--pids"},   {"RLIMIT_CPU", "--cpu-time"},
        {"RLIMIT_FSIZE", "--fsize"}, {"RLIMIT_NOFILE", "--nofile"}, {"memory.max", "--memory"},
        {"pids.max", "--pids"},      {"cpu.max", "--cpus"}};
    for (const auto& [name, option] : options)
        if (what == name) return fmt::format("{} ({})", option, what);
    return what;
}

// A limit's value as its option takes it: sizes as sizes ("8G"), counts as they are.
std::string limit_value(const std::string& what, std::uint64_t v) {
    const bool size = what == "RLIMIT_DATA" || what == "RLIMIT_FSIZE" || what == "RLIMIT_AS" ||
                      what == "memory.max" || what == "memory.swap.max";
    return size && v != UINT64_MAX ? format_size(v) : std::to_string(v);
}

std::string limit_value(const std::string& what, const std::string& v) {
    auto n = count_value(v);
    return n && *n != UINT64_MAX ? limit_value(what, *n) : v;
}

std::optional<std::string> beyond_rlimits(const RunRequest& r, const ServeBounds& b) {
    for (const auto& bound : b.rlimits) {
        const std::uint64_t bound_hard = bound.hard != 0 ? bound.hard : bound.value;
        auto it = std::find_if(r.lockdown.rlimits.begin(), r.lockdown.rlimits.end(),
                               [&](const RlimitValue& l) { return l.resource == bound.resource; });
        if (it == r.lockdown.rlimits.end())
            return fmt::format("the run sets no {}; this server's runs have at most {}: {}",
                               limit_named(bound.name), limit_value(bound.name, bound.value), kFix);
        const std::uint64_t hard = it->hard != 0 ? it->hard : it->value;
        if (it->value > bound.value || hard > bound_hard)
            return fmt::format("the run asks for {} {}; this server's runs have at most {}: {}",
                               limit_named(bound.name), limit_value(bound.name, it->value),
                               limit_value(bound.name, bound.value), kFix);
    }
    return std::nullopt;
}

std::optional<std::string> beyond_cgroup(const RunRequest& r, const ServeBounds& b) {
    for (const auto& asked : r.cgroup_files) {
        // Named, not structured bindings: clang 14 (the fuzz build) cannot capture those.
        const std::string& file = asked.first;
        const std::string& value = asked.second;
        auto own = std::find_if(b.cgroup_files.begin(), b.cgroup_files.end(),
                                [&](const auto& f) { return f.first == file; });
        CgroupValue kind = cgroup_value_kind(file);
        if (own == b.cgroup_files.end() && kind != CgroupValue::Unknown) continue;
        if (own == b.cgroup_files.end())
            return fmt::format("the run asks for cgroup file {}, which this server's runs do not set", file);
        bool ok = false;
        if (kind == CgroupValue::Count) {
            auto a = count_value(value), m = count_value(own->second);
            ok = a && m && *a <= *m;
        } else if (kind == CgroupValue::CpuMax) {
            auto a = cpu_share(value), m = cpu_share(own->second);
            ok = a && m && cpu_at_most(*a, *m);
        } else {
            ok = value == own->second;
        }
        if (!ok)
            return fmt::format("the run asks for {} {}; this server's runs have {}: {}", limit_named(file),
                               limit_value(file, value), limit_value(file, own->second), kFix);
    }
    // A limit of the server's that the request leaves out is a request for no limit.
    for (const auto& own : b.cgroup_files) {
        bool asked = std::any_of(r.cgroup_files.begin(), r.cgroup_files.end(),
                                 [&](const auto& f) { return f.first == own.first; });
        if (!asked)
            return fmt::format("the run sets no {}; this server's runs have {}: {}", limit_named(own.first),
                               limit_value(own.first, own.second), kFix);
    }
    return std::nullopt;
}

std::optional<std::string> beyond_tmpfs(const RunRequest& r, const ServeBounds& b) {
    for (const auto& op : r.mounts.ops) {
        if (op.kind != OpKind::Tmpfs) continue;
        std::optional<std::uint64_t> size, inodes;
        std::size_t start = 0;
        while (start <= op.data.size()) {
            std::size_t end = std::min(op.data.find(',', start), op.data.size());
            std::string opt = op.data.substr(start, end - start);
            if (opt.rfind("size=", 0) == 0) size = tmpfs_number(opt.substr(5));
            if (opt.rfind("nr_inodes=", 0) == 0) inodes = tmpfs_number(opt.substr(10));
            start = end + 1;
        }
        if (!size || *size > b.tmpfs_size)
            return fmt::format("the run asks for a tmpfs at /{} of {}; this server's runs have at most {} "
                               "(--tmpfs-size): {}",
                               op.target, size ? format_size(*size) : "no size", format_size(b.tmpfs_size), kFix);
        if (!inodes || *inodes > b.tmpfs_inodes)
            return fmt::format("the run asks for a tmpfs at /{} of {} inodes; this server's runs have at most {}: {}",
                               op.target, inodes ? std::to_string(*inodes) : "unlimited", b.tmpfs_inodes, kFix);
    }
    return std::nullopt;
}

std::optional<std::string> beyond_supervised(const char* name, double asked, double most) {
    if (most <= 0 || (asked > 0 && asked <= most)) return std::nullopt;
    return fmt::format("the run asks for --{} {}; this server's runs have at most {}: {}", name,
                       asked > 0 ? fmt::format("{}", asked) : std::string("0 (no limit)"), most, kFix);
}

std::string allowlist_text(const EgressPolicy& e) {
    std::string out;
    for (const auto& h : e.hosts) {
        std::string ports;
        for (auto p : h.ports) ports += fmt::format("{}{}", ports.empty() ? "" : ",", p);
        out += fmt::format("{}{}:{}", out.empty() ? "" : " ", h.name, ports);
    }
    return out;
}

std::optional<std::string> beyond_egress(const RunRequest& r, const ServeBounds& b) {
    const EgressPolicy &asked = r.egress, &own = b.egress;
    for (const auto& h : asked.hosts)
        if (!allowlist_within(h, own)) {
            std::string ports;
            for (auto p : h.ports) ports += fmt::format("{}{}", ports.empty() ? "" : ",", p);
            return fmt::format("the run asks for --allow-host {}:{}, beyond this server's runs' allowlist ({}): "
                               "ask for less, or start pyjail serve with that --allow-host",
                               h.name, ports, allowlist_text(own));
        }
    for (const auto& p : asked.pins) {
        auto mine = pinned_address(own, p.name);
        if (!mine || *mine != p.address)
            return fmt::format("the run asks for --net-resolve {}:{}, which this server's runs do not have: "
                               "ask for less, or start pyjail serve with it",
                               p.name, dns::format_ipv4(p.address));
    }
    if (asked.dns_server != own.dns_server || (own.dns_server && asked.dns_port != own.dns_port))
        return fmt::format("the run asks for --net-dns {}; this server's runs have {}: ask for the same",
                           asked.dns_server ? fmt::format("{}:{}", dns::format_ipv4(*asked.dns_server), asked.dns_port)
                                            : std::string("none (the host's resolver)"),
                           own.dns_server ? fmt::format("{}:{}", dns::format_ipv4(*own.dns_server), own.dns_port)
                                          : std::string("none (the host's resolver)"));
    if (own.bytes && (!asked.bytes || *asked.bytes > *own.bytes))
        return fmt::format("the run asks for --net-bytes {}; this server's runs have at most {}: {}",
                           asked.bytes ? format_size(*asked.bytes) : std::string("none"), format_size(*own.bytes),
                           kFix);
    return std::nullopt;
}

}  // namespace

ServeBounds serve_bounds(const Policy& policy, const LimitPlan& limits,
                         std::optional<std::vector<std::string>> seccomp_allow) {
    ServeBounds b;
    b.rlimits = limits.rlimits;
    b.cgroup_files = limits.cgroup_files;
    b.tmpfs_size = policy.tmpfs_size;
    b.tmpfs_inodes = tmpfs_inodes_for(policy.tmpfs_size);
    if (seccomp_allow) std::sort(seccomp_allow->begin(), seccomp_allow->end());
    b.seccomp_allow = std::move(seccomp_allow);
    b.net = policy.net;
    b.wall_time = policy.wall_time;
    b.cpu_time = policy.limits.cpu_time;
    b.output = policy.limits.output;
    b.allow_binds = setting(policy.settings, "allow-binds").value == "true";
    b.egress = policy.egress;
    return b;
}

void bind_ids_of(ServeBounds& b, const HostIdPlan& template_ids) {
    b.bind_ids_known = template_ids.kind == HostIdKind::HostUser || template_ids.kind == HostIdKind::Invoker;
    b.bind_uid = template_ids.uids.first;
    b.bind_gid = template_ids.gids.first;
}

std::optional<std::string> beyond_bounds(const RunRequest& r, const ServeBounds& b) {
    if (r.net != static_cast<std::uint32_t>(b.net))
        return fmt::format("the run asks for another network than this server's runs have (--net {}): "
                           "ask for the same, or start another pyjail serve",
                           net_mode_name(b.net));
    if (auto why = beyond_egress(r, b)) return why;
    if (b.seccomp_allow) {
        if (r.lockdown.seccomp_filter.empty() || r.seccomp_allow.empty())
            return fmt::format("the run asks for --seccomp off; this server's runs have a filter: {}", kFix);
        for (const auto& name : r.seccomp_allow)
            if (!std::binary_search(b.seccomp_allow->begin(), b.seccomp_allow->end(), name))
                return fmt::format("the run's filter allows {}, which this server's does not: {}", name, kFix);
    }
    if (auto why = beyond_rlimits(r, b)) return why;
    if (auto why = beyond_cgroup(r, b)) return why;
    if (auto why = beyond_tmpfs(r, b)) return why;
    if (auto why = beyond_supervised("wall-time", r.wall_time, b.wall_time)) return why;
    if (auto why = beyond_supervised("cpu-time", r.cpu_time, b.cpu_time)) return why;
    if (r.binds > 0 && !b.allow_binds)
        return "the run binds host paths, and this server's runs bind none: start pyjail serve with --allow-binds, "
               "or run without --via";
    if (r.binds > 0 && (!b.bind_ids_known || r.files_uid != b.bind_uid || r.files_gid != b.bind_gid))
        return fmt::format("the run's host binds hold files of uid {}, and this server's runs write as uid {}: "
                           "start pyjail serve with the same --host-user as the run, or run without --via",
                           r.files_uid, b.bind_ids_known ? std::to_string(b.bind_uid) : std::string("of a range"));
    if (b.output && (r.output == 0 || r.output > *b.output))
        return fmt::format("the run asks for --output-limit {}; this server's runs have at most {}: {}",
                           r.output == 0 ? std::string("none") : format_size(r.output), format_size(*b.output), kFix);
    return std::nullopt;
}

std::optional<std::string> serve_policy_refusal(const Policy& policy) {
    for (const auto& bind : policy.binds)
        if (bind.writable)
            return fmt::format("{}: a writable bind ({}) would be shared by every run of the server, at once "
                               "and one after another",
                               bind.origin, bind.source);
    return std::nullopt;
}

}  // namespace pyjail
