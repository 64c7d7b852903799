#include "egress_pid1.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "egress_plan.hpp"
#include "exitstatus.hpp"
#include "protocol.hpp"
#include "steps.hpp"
#include "sys.hpp"

namespace pyjail::pid1 {

void open_egress_sockets(const std::vector<EgressSocketSpec>& specs) {
    // Bound first, then handed over kMaxPassedFds to a message: a run from a template sends
    // them all before its client reads any (its report socket does not block, forked_run.cpp),
    // and one message per socket could overrun the socket's buffer.
    std::vector<int> fds;
    fds.reserve(specs.size());
    for (const EgressSocketSpec& s : specs) {
        int fd = ::socket(AF_INET, (s.udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) fail(ChildStep::Network, errno, kExitJailError, "egress: socket");
        fds.push_back(fd);
        // No SO_REUSEADDR/SO_REUSEPORT: nothing else in the jail may bind the same address
        // and port and take the jail's connections or queries itself.
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(s.port);
        a.sin_addr.s_addr = htonl(s.address);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            fail(ChildStep::Network, errno, kExitJailError, "egress: bind %u.%u.%u.%u:%u", s.address >> 24,
                 (s.address >> 16) & 255, (s.address >> 8) & 255, s.address & 255, s.port);
        if (!s.udp && ::listen(fd, kListenBacklog) != 0)
            fail(ChildStep::Network, errno, kExitJailError, "egress: listen");
    }
    for (std::size_t i = 0; i < fds.size(); i += kMaxPassedFds) {
        const int n = static_cast<int>(std::min<std::size_t>(kMaxPassedFds, fds.size() - i));
        JailMessage m{};
        m.kind = MsgKind::Egress;
        m.exit_code = static_cast<std::int32_t>(i);
        m.wait_status = n;
        if (int e = send_with_fds(report_fd(), &m, sizeof m, fds.data() + i, n, report_send_flags()); e != 0)
            fail(ChildStep::Network, e, kExitJailError, "egress: cannot hand a socket to pyjail");
    }
    for (int fd : fds) ::close(fd);
}

}  // namespace pyjail::pid1
