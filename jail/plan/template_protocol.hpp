// Between `pyjail serve` and its template (over the template's stdin, a SOCK_SEQPACKET
// socket) and between `pyjail --via` and `pyjail serve` (the server's listening socket):
// fixed-size replies, trivially copyable, never trusted to be terminated. The requests are
// RunRequests (run_request.hpp).
#pragma once

#include <cstdint>

namespace pyjail {

enum class TemplateReplyKind : std::uint32_t {
    Ready = 1,    // template -> server: the preloads are imported; runs can be asked for
    Started = 2,  // a run's pid 1 exists: its pidfd comes with the reply (SCM_RIGHTS)
    Refused = 3,  // the run could not be started: text says why
};

struct TemplateReply {
    TemplateReplyKind kind;
    std::int32_t pid;        // Started: the run's pid 1, in the template's pid namespace
    std::uint32_t restarted; // server -> client: the template was (re)started for this run
    char text[400];
    // Refused: the failure in a fresh run's form (error.hpp): the step that failed ("" for a
    // refusal of the request itself), the errno captured where it failed, and the fix.
    std::int32_t err;
    char step[32];
    char hint[256];
};

// server -> client, first thing on a new connection: what the client plans the run against.
struct ServeHello {
    std::uint32_t version;    // kServeProtocolVersion
    std::uint32_t cgroup_ok;  // runs get a cgroup v2 leaf each (else rlimits: why_not)
    char rootfs[1024];        // the template's rootfs (a realpath)
    char why_not[512];
    // Not empty: the server takes no run on this connection, and says why (it holds as many
    // clients as it may); the client prints it and gives up.
    char refused[256];
};

// 2: the request carries what the server bounds (serve_bounds.hpp); the hello may refuse.
// 3: the request carries its host binds (template_binds.hpp).
// 4: the request carries its command parsed (run_request.hpp); a refusal its step, errno, hint.
inline constexpr std::uint32_t kServeProtocolVersion = 4;

// Who may be at the other end of a connection to `pyjail serve`, seen from either end: the
// same user, or root. The server runs nobody else's runs; the client gives its descriptors
// (stdin, stdout, stderr, the script, the report socket) to nobody else, and believes nobody
// else's pidfd (a root client would signal whatever process it names).
inline bool trusted_serve_peer(std::uint32_t peer_uid, std::uint32_t own_uid) {
    return peer_uid == own_uid || peer_uid == 0;
}

}  // namespace pyjail
