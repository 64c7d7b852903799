// `pyjail launcher`: one long-lived pyjail that starts runs for a driver (the Python package's
// Pool), so that a run costs a fork of this small process instead of the driver's fork and
// exec of pyjail. Each run is a child of its own, forked from the launcher's loop, that runs
// the command line it was sent exactly as `pyjail ARGS...` would (main.cpp's one path: plan,
// --via, supervision, report), with the four descriptors it was sent as its fds 0-3: a run's
// supervision state is in its process alone.
//
// The driver holds the other end of the launcher's stdin, a SOCK_SEQPACKET socket. Its
// datagrams, and the launcher's answers (pure: encode/decode below):
//   "PYJAIL-LAUNCH/1\0run\0ID\0CWD\0ARG\0ARG..."  + SCM_RIGHTS {stdin, stdout, stderr, fd 3}
//   "PYJAIL-LAUNCH/1\0kill\0ID"                   SIGKILL to that run's pyjail
//   "PYJAIL-LAUNCH/1\0started\0ID"               (answer) + SCM_RIGHTS {its pyjail's pidfd}
//   "PYJAIL-LAUNCH/1\0ended\0ID\0STATUS"          (answer) the run's pyjail ended: its exit
//                                                 status, or -N for signal N
//   "PYJAIL-LAUNCH/1\0refused\0ID\0WHY"            (answer) it could not be started
// The launcher ends when the driver's end closes; its runs' pyjails are killed then. If the
// launcher itself is killed, the driver kills them through their pidfds.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

inline constexpr std::string_view kLaunchMagic = "PYJAIL-LAUNCH/1";
// A request's bytes, at most: a command line as large as a run request may carry.
inline constexpr std::size_t kMaxLaunchBytes = 256 * 1024;
// Runs in flight at once, at most (each holds a process and a pidfd here).
inline constexpr std::size_t kMaxLaunchedRuns = 512;

struct LaunchRequest {
    enum class Op { Run, Kill } op = Op::Run;
    std::uint64_t id = 0;
    std::string cwd;                // Run: where the run's pyjail starts
    std::vector<std::string> args;  // Run: pyjail's arguments (argv without argv[0])
};

// Pure. The words of a datagram, each ended by the next one's NUL (the wire of both ways).
std::string join_launch_words(std::initializer_list<std::string_view> words);
// Pure. nullopt for anything but a well-formed request (the driver is trusted, but a bad
// datagram is refused, not guessed at).
std::optional<LaunchRequest> decode_launch_request(std::string_view bytes);
std::string encode_launch_started(std::uint64_t id);
std::string encode_launch_ended(std::uint64_t id, int status);
std::string encode_launch_refused(std::uint64_t id, std::string_view why);

namespace launcher {

// The loop: requests from `sock` until it closes. `run_command` runs one pyjail command line
// in the forked child, as main() would, and returns its exit status.
int serve_runs(int sock, const std::function<int(const std::vector<std::string>&)>& run_command);

}  // namespace launcher

}  // namespace pyjail
