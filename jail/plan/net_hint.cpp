#include "net_hint.hpp"

#include <fmt/format.h>

namespace pyjail {

std::string missing_network_hint(NetMode net, const DeniedCounts& denied, bool failed,
                                 const std::string& chosen_by) {
    // A program that tried the network and went on without it (a version check, an optional
    // download) ran as it should: no line for it.
    if (net != NetMode::None || !failed) return "";
    std::string refused;
    for (const auto& [what, n] : denied.entries())
        if (what == "socket(AF_INET)" || what == "socket(AF_INET6)")
            refused += fmt::format("{}{} x{}", refused.empty() ? "" : ", ", what, n);
    if (refused.empty()) return "";
    // A failed program that also tried the network may have failed of something else: the
    // line says what pyjail saw, not that it was the cause.
    return fmt::format("the program was refused network sockets ({}): if it failed for want of "
                       "a network, this jail has none (--net none{}); --net allow --allow-host "
                       "HOST[:PORT] lets it reach one host through pyjail, --net loopback gives "
                       "it 127.0.0.1 only",
                       refused, chosen_by.empty() ? "" : ", " + chosen_by);
}

std::string egress_refusals_hint(const EgressReport& egress, bool failed) {
    if (!egress.enabled || !failed) return "";
    constexpr std::size_t kNamed = 3;
    std::string named;
    std::size_t count = 0;
    for (const auto& d : egress.decisions) {
        if (d.verdict == "allowed") continue;
        if (++count > kNamed) continue;
        // Names reach the report only as plain host names (egress_relay.cpp): no escapes.
        named += fmt::format("{}{}{} ({}{})", named.empty() ? "" : ", ", d.host,
                             d.port != 0 ? fmt::format(":{}", d.port) : std::string(),
                             d.verdict == "cut" ? "cut: " : "", d.why);
    }
    if (count == 0) return "";
    std::string more = count > kNamed ? fmt::format(", and {} more", count - kNamed) : "";
    return fmt::format("the jail refused {}{}: --allow-host HOST[:PORT] names what the program "
                       "may reach (--report's egress lists every decision)",
                       named, more);
}

}  // namespace pyjail
