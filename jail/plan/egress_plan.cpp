#include "egress_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "error.hpp"

namespace pyjail {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
}

std::optional<std::uint16_t> parse_port(std::string_view t) {
    if (t.empty() || t.size() > 5) return std::nullopt;
    unsigned v = 0;
    for (char c : t) {
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(v);
}

}  // namespace

AllowedHost parse_allow_host(std::string_view text, const std::string& origin) {
    AllowedHost h;
    h.origin = origin;
    std::string_view name = text;
    if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
        auto port = parse_port(text.substr(colon + 1));
        if (!port)
            throw UsageError(fmt::format("{}: '{}' has no valid port after ':'", origin, text),
                             "write HOST or HOST:PORT with a port from 1 to 65535");
        h.ports.push_back(*port);
        name = text.substr(0, colon);
    } else {
        h.ports = {80, 443};
    }
    h.name = lower(name);
    if (h.name.size() > 1 && h.name.back() == '.') h.name.pop_back();
    std::string_view domain = h.name;
    if (domain.substr(0, 2) == "*.") domain.remove_prefix(2);
    if (!dns::is_plain_name(domain))
        throw UsageError(fmt::format("{}: '{}' is not a host name", origin, text),
                         "write a name such as pypi.org or *.example.com (addresses are refused: "
                         "pyjail decides by name)");
    if (dns::parse_ipv4(domain) || domain.find('.') == std::string_view::npos)
        throw UsageError(fmt::format("{}: '{}' is not a host name with a domain", origin, text),
                         "write a full name such as pypi.org; for a test server, pin a name to "
                         "its address with --net-resolve NAME:ADDRESS");
    return h;
}

const std::vector<AllowHostPreset>& allow_host_presets() {
    // Only the hosts the service's own clients use, on 443 only: pip reaches the index at
    // pypi.org and downloads every file from files.pythonhosted.org.
    static const std::vector<AllowHostPreset> presets = {
        {"pypi", {"pypi.org:443", "files.pythonhosted.org:443"}, "the Python Package Index and its file host"},
    };
    return presets;
}

std::vector<AllowedHost> expand_allow_host(std::string_view text, const std::string& origin) {
    if (text.empty() || text.front() != '@') return {parse_allow_host(text, origin)};
    std::string known;
    for (const auto& p : allow_host_presets()) {
        if (text.substr(1) == p.name) {
            std::vector<AllowedHost> out;
            for (auto h : p.hosts) out.push_back(parse_allow_host(h, fmt::format("{} ({})", origin, text)));
            return out;
        }
        known += fmt::format("{}@{}", known.empty() ? "" : ", ", p.name);
    }
    throw UsageError(fmt::format("{}: '{}' is not a preset of hosts", origin, text),
                     fmt::format("the presets are {}; or write a host name", known));
}

PinnedName parse_net_resolve(std::string_view text, const std::string& origin) {
    auto colon = text.rfind(':');
    PinnedName p;
    std::optional<dns::Ipv4> a;
    if (colon != std::string_view::npos) a = dns::parse_ipv4(text.substr(colon + 1));
    if (!a)
        throw UsageError(fmt::format("{}: '{}' is not HOST:ADDRESS", origin, text),
                         "write e.g. example.com:127.0.0.1 (an IPv4 address)");
    p.name = lower(text.substr(0, colon));
    p.address = *a;
    if (!dns::is_plain_name(p.name))
        throw UsageError(fmt::format("{}: '{}' is not a host name", origin, text.substr(0, colon)));
    return p;
}

void check_egress_policy(EgressPolicy& e) {
    std::vector<AllowedHost> merged;
    for (auto& h : e.hosts) {
        auto same = std::find_if(merged.begin(), merged.end(), [&](const AllowedHost& m) { return m.name == h.name; });
        if (same == merged.end()) {
            merged.push_back(h);
            same = merged.end() - 1;
        } else {
            same->ports.insert(same->ports.end(), h.ports.begin(), h.ports.end());
        }
        std::sort(same->ports.begin(), same->ports.end());
        same->ports.erase(std::unique(same->ports.begin(), same->ports.end()), same->ports.end());
        if (same->ports.size() > kMaxPortsPerHost)
            throw UsageError(fmt::format("{}: more than {} ports for {}", h.origin, kMaxPortsPerHost, h.name));
    }
    if (merged.size() > kMaxAllowHosts)
        throw UsageError(fmt::format("{}: more than {} allowed hosts", merged.back().origin, kMaxAllowHosts),
                         "allow a domain's subdomains with one *.example.com");
    e.hosts = std::move(merged);
    std::size_t listeners = 0;
    for (const auto& h : e.hosts) listeners += h.ports.size() * (h.wildcard() ? kWildcardSlots : 1);
    if (listeners > kMaxListeners)
        throw UsageError(fmt::format("--allow-host: the allowed hosts and ports need {} listeners, "
                                     "more than the {} a jail may have",
                                     listeners, kMaxListeners),
                         "allow fewer ports, or fewer wildcard entries (each stands for " +
                             std::to_string(kWildcardSlots) + " names)");
    for (std::size_t i = 0; i < e.pins.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (e.pins[i].name == e.pins[j].name)
                throw UsageError(fmt::format("--net-resolve: {} is pinned twice", e.pins[i].name));
}

EgressPlan plan_egress(const EgressPolicy& policy) {
    EgressPlan plan;
    plan.policy = policy;
    for (std::size_t h = 0; h < policy.hosts.size(); ++h) {
        std::size_t n = policy.hosts[h].wildcard() ? kWildcardSlots : 1;
        for (std::size_t k = 0; k < n; ++k) {
            std::size_t i = plan.slots.size() + 1;  // 127.100.0.1 on
            NameSlot s;
            s.host = h;
            s.address = {127, 100, static_cast<std::uint8_t>(i / 256), static_cast<std::uint8_t>(i % 256)};
            for (auto port : policy.hosts[h].ports) plan.listeners.push_back({plan.slots.size(), port});
            plan.slots.push_back(s);
        }
    }
    return plan;
}

bool host_matches(std::string_view pattern, std::string_view name) {
    if (pattern.substr(0, 2) != "*.") return pattern == name;
    std::string_view domain = pattern.substr(1);  // ".example.com"
    return name.size() > domain.size() && name.substr(name.size() - domain.size()) == domain;
}

std::optional<std::size_t> find_allowed_host(const EgressPolicy& e, std::string_view name) {
    for (std::size_t i = 0; i < e.hosts.size(); ++i)
        if (!e.hosts[i].wildcard() && e.hosts[i].name == name) return i;
    for (std::size_t i = 0; i < e.hosts.size(); ++i)
        if (e.hosts[i].wildcard() && host_matches(e.hosts[i].name, name)) return i;
    return std::nullopt;
}

bool allowlist_within(const AllowedHost& inner, const EgressPolicy& outer) {
    for (const auto& o : outer.hosts) {
        // A wildcard inside a wildcard: "*.a.example.com" under "*.example.com" (its names are
        // all subdomains of example.com), and "*.example.com" under itself.
        bool name_ok = inner.wildcard() ? o.wildcard() && (inner.name == o.name ||
                                                           host_matches(o.name, inner.name.substr(2)))
                                        : host_matches(o.name, inner.name);
        if (!name_ok) continue;
        bool ports_ok = std::all_of(inner.ports.begin(), inner.ports.end(), [&](std::uint16_t p) {
            return std::find(o.ports.begin(), o.ports.end(), p) != o.ports.end();
        });
        if (ports_ok) return true;
    }
    return false;
}

std::optional<dns::Ipv4> pinned_address(const EgressPolicy& e, std::string_view name) {
    for (const auto& p : e.pins)
        if (p.name == name) return p.address;
    return std::nullopt;
}

void parse_net_dns(std::string_view text, const std::string& origin, EgressPolicy& e) {
    std::string_view addr = text;
    std::optional<std::uint16_t> port = 53;
    if (auto colon = text.find(':'); colon != std::string_view::npos) {
        addr = text.substr(0, colon);
        port = parse_port(text.substr(colon + 1));
    }
    auto a = dns::parse_ipv4(addr);
    if (!a || !port)
        throw UsageError(fmt::format("{}: '{}' is not ADDRESS[:PORT]", origin, text),
                         "write an IPv4 address, e.g. 1.1.1.1 or 127.0.0.1:5353");
    e.dns_server = *a;
    e.dns_port = *port;
}

std::vector<EgressSocketSpec> egress_socket_specs(const EgressPlan& plan) {
    std::vector<EgressSocketSpec> out;
    out.push_back({0x7f000001u, 53, true});
    for (const auto& l : plan.listeners) {
        const auto& a = plan.slots[l.slot].address;
        out.push_back({(static_cast<std::uint32_t>(a[0]) << 24) | (static_cast<std::uint32_t>(a[1]) << 16) |
                           (static_cast<std::uint32_t>(a[2]) << 8) | a[3],
                       l.port, false});
    }
    return out;
}

void EgressReport::add(const EgressDecision& d) {
    for (auto& e : decisions)
        if (e.host == d.host && e.port == d.port && e.verdict == d.verdict && e.why == d.why) {
            e.count += d.count;
            e.bytes_out += d.bytes_out;
            e.bytes_in += d.bytes_in;
            return;
        }
    if (decisions.size() >= kMaxEgressDecisions) {
        decisions_dropped += d.count;
        return;
    }
    decisions.push_back(d);
}

std::optional<std::string> refused_address_reason(const dns::Ipv4& a) {
    auto in = [&](unsigned b0, unsigned b1, int prefix) {
        std::uint32_t v = (static_cast<std::uint32_t>(a[0]) << 24) | (static_cast<std::uint32_t>(a[1]) << 16) |
                          (static_cast<std::uint32_t>(a[2]) << 8) | a[3];
        std::uint32_t net = (b0 << 24) | (b1 << 16);
        std::uint32_t mask = prefix == 0 ? 0 : ~0u << (32 - prefix);
        return (v & mask) == (net & mask);
    };
    if (in(127, 0, 8)) return "a loopback address";
    if (in(0, 0, 8)) return "an address of this host's network (0.0.0.0/8)";
    if (in(10, 0, 8) || in(172, 16, 12) || in(192, 168, 16)) return "a private address";
    if (in(100, 64, 10)) return "a shared (carrier-grade NAT) address";
    if (in(169, 254, 16)) return "a link-local address (where clouds serve instance metadata)";
    if (in(192, 0, 24) || in(198, 18, 15)) return "a reserved address";
    if (in(224, 0, 4)) return "a multicast address";
    if (in(240, 0, 4)) return "a reserved or broadcast address";
    return std::nullopt;
}

}  // namespace pyjail
