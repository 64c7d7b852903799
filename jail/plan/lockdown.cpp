#include "lockdown.hpp"

namespace pyjail {

bool operator==(const Lockdown& a, const Lockdown& b) {
    auto same_rlimit = [](const RlimitValue& x, const RlimitValue& y) {
        return x.resource == y.resource && x.value == y.value && x.hard == y.hard;
    };
    auto same_insn = [](const sock_filter& x, const sock_filter& y) {
        return x.code == y.code && x.jt == y.jt && x.jf == y.jf && x.k == y.k;
    };
    if (a.rlimits.size() != b.rlimits.size() || a.seccomp_filter.size() != b.seccomp_filter.size()) return false;
    for (std::size_t i = 0; i < a.rlimits.size(); ++i)
        if (!same_rlimit(a.rlimits[i], b.rlimits[i])) return false;
    for (std::size_t i = 0; i < a.seccomp_filter.size(); ++i)
        if (!same_insn(a.seccomp_filter[i], b.seccomp_filter[i])) return false;
    if (a.egress_sockets.size() != b.egress_sockets.size()) return false;
    for (std::size_t i = 0; i < a.egress_sockets.size(); ++i) {
        const auto &x = a.egress_sockets[i], &y = b.egress_sockets[i];
        if (x.address != y.address || x.port != y.port || x.udp != y.udp) return false;
    }
    return a.hostname == b.hostname && a.loopback_up == b.loopback_up &&
           a.own_user_namespace == b.own_user_namespace && a.new_keyring == b.new_keyring &&
           a.template_capabilities == b.template_capabilities &&
           a.template_binds_low_ports == b.template_binds_low_ports && a.filter_notifies == b.filter_notifies;
}

}  // namespace pyjail
