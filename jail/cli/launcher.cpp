// `pyjail launcher` (launcher.hpp): the loop, and the fork of each run's pyjail.
#include "launcher.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>

#include "error.hpp"
#include "exitstatus.hpp"
#include "sys.hpp"
#include "whole_number.hpp"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace pyjail {

namespace {

std::vector<std::string_view> split_nul(std::string_view bytes) {
    std::vector<std::string_view> words;
    std::size_t at = 0;
    while (true) {
        std::size_t nul = bytes.find('\0', at);
        words.push_back(bytes.substr(at, nul == std::string_view::npos ? std::string_view::npos : nul - at));
        if (nul == std::string_view::npos) return words;
        at = nul + 1;
    }
}

}  // namespace

std::string join_launch_words(std::initializer_list<std::string_view> words) {
    std::string out;
    for (auto w : words) {
        if (!out.empty()) out.push_back('\0');
        out.append(w);
    }
    return out;
}

std::optional<LaunchRequest> decode_launch_request(std::string_view bytes) {
    if (bytes.size() > kMaxLaunchBytes) return std::nullopt;
    std::vector<std::string_view> w = split_nul(bytes);
    if (w.size() < 3 || w[0] != kLaunchMagic) return std::nullopt;
    LaunchRequest r;
    auto id = whole_number<std::uint64_t>(w[2]);
    if (!id) return std::nullopt;
    r.id = *id;
    if (w[1] == "kill" && w.size() == 3) {
        r.op = LaunchRequest::Op::Kill;
        return r;
    }
    // A run names its directory (absolute) and at least one argument.
    if (w[1] != "run" || w.size() < 5 || w[3].empty() || w[3][0] != '/') return std::nullopt;
    r.cwd = std::string(w[3]);
    for (std::size_t i = 4; i < w.size(); ++i) r.args.emplace_back(w[i]);
    return r;
}

std::string encode_launch_ended(std::uint64_t id, int status) {
    return join_launch_words({kLaunchMagic, "ended", std::to_string(id), std::to_string(status)});
}

std::string encode_launch_started(std::uint64_t id) { return join_launch_words({kLaunchMagic, "started", std::to_string(id)}); }

std::string encode_launch_refused(std::uint64_t id, std::string_view why) {
    return join_launch_words({kLaunchMagic, "refused", std::to_string(id), why});
}

namespace launcher {

namespace {

struct Launched {
    std::uint64_t id;
    UniqueFd pidfd;  // the run's pyjail: waited for and killed through it, never by pid
};

// The fds a run was sent become its 0-3; then nothing else of the launcher's stays open.
// Attack: a run's pyjail holding the driver's socket or another run's pipes, report or pidfd
// could read or forge that run's output and report, or start and kill runs: only its own
// four descriptors survive (close_range), and its program's jail gets only what pyjail
// passes any run.
[[noreturn]] void run_in_child(const LaunchRequest& r, const int (&fds)[4],
                               const std::function<int(const std::vector<std::string>&)>& run_command,
                               pid_t launcher_pid) {
    // Nothing outlives the launcher: a run's pyjail dies with it, and its jail with that.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher_pid) ::_exit(kExitJailError);
    int high[4];
    for (int k = 0; k < 4; ++k)
        if ((high[k] = ::fcntl(fds[k], F_DUPFD, 10)) < 0) {
            // The launcher at its descriptor limit: said on the run's stderr (nothing was
            // moved yet), or the caller would learn only an exit status.
            ::dprintf(fds[2], "pyjail: launcher: cannot take the run's descriptors: %s\n", std::strerror(errno));
            ::_exit(kExitJailError);
        }
    for (int k = 0; k < 4; ++k)
        if (::dup2(high[k], k) != k) ::_exit(kExitJailError);
    if (sys_close_range(4, ~0U, 0) != 0) {
        ::dprintf(2, "pyjail: launcher: cannot close its other descriptors: %s\n", std::strerror(errno));
        ::_exit(kExitJailError);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (::chdir(r.cwd.c_str()) != 0) {
        std::fprintf(stderr, "pyjail: launcher: cannot enter %s: %s\n", r.cwd.c_str(), std::strerror(errno));
        ::_exit(kExitJailError);
    }
    int code = run_command(r.args);
    std::fflush(nullptr);
    ::_exit(code);
}

void answer(int sock, const std::string& bytes) {
    (void)::send(sock, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}

class Loop {
public:
    Loop(int sock, const std::function<int(const std::vector<std::string>&)>& run_command)
        : sock_(sock), run_command_(run_command), self_(::getpid()) {}
    ~Loop() {
        for (auto& r : runs_) {
            sys_pidfd_send_signal(r.pidfd.get(), SIGKILL);
            siginfo_t info{};
            (void)::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(r.pidfd.get()), &info, WEXITED);
        }
    }

    int run() {
        std::vector<pollfd> polled;
        while (true) {
            polled.assign(1, pollfd{sock_, POLLIN, 0});
            for (auto& r : runs_) polled.push_back({r.pidfd.get(), POLLIN, 0});
            if (::poll(polled.data(), polled.size(), -1) < 0) {
                if (errno == EINTR) continue;
                throw JailError("launcher", "poll", errno);
            }
            // The runs that ended first: their ids are free again before new requests.
            std::size_t i = 1;
            for (auto it = runs_.begin(); it != runs_.end(); ++i) {
                if (polled[i].revents == 0) {
                    ++it;
                    continue;
                }
                reap(*it);
                it = runs_.erase(it);
            }
            if (polled[0].revents != 0 && !on_request()) return 0;
        }
    }

private:
    void reap(Launched& r) {
        siginfo_t info{};
        int status = kExitJailError;
        if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(r.pidfd.get()), &info, WEXITED) == 0)
            status = info.si_code == CLD_EXITED ? info.si_status : -info.si_status;
        answer(sock_, encode_launch_ended(r.id, status));
    }

    // False once the driver has gone.
    bool on_request() {
        int fds[kMaxPassedFds];
        int got = 0;
        ssize_t n = recv_with_fds(sock_, buf_.data(), buf_.size(), fds, kMaxPassedFds, got, MSG_DONTWAIT);
        std::vector<UniqueFd> owned;
        for (int k = 0; k < got; ++k) owned.emplace_back(fds[k]);
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        if (n == 0) return false;
        auto r = decode_launch_request(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
        if (!r) {
            answer(sock_, encode_launch_refused(0, "a malformed request"));
            return true;
        }
        if (r->op == LaunchRequest::Op::Kill) {
            for (auto& l : runs_)
                if (l.id == r->id) sys_pidfd_send_signal(l.pidfd.get(), SIGKILL);
            return true;
        }
        start(*r, owned);
        return true;
    }

    void start(const LaunchRequest& r, const std::vector<UniqueFd>& owned) {
        if (owned.size() != 4) return answer(sock_, encode_launch_refused(r.id, "a run needs exactly 4 descriptors"));
        if (runs_.size() >= kMaxLaunchedRuns)
            return answer(sock_, encode_launch_refused(r.id, "the launcher holds its most runs; try again when some end"));
        for (const auto& l : runs_)
            if (l.id == r.id) return answer(sock_, encode_launch_refused(r.id, "a run with this id is in flight"));
        const int fds[4] = {owned[0].get(), owned[1].get(), owned[2].get(), owned[3].get()};
        int pidfd = -1;
        CloneArgs args;
        args.flags = CLONE_PIDFD;
        args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
        args.exit_signal = SIGCHLD;
        std::fflush(nullptr);
        pid_t pid = sys_clone3(args);
        if (pid < 0) return answer(sock_, encode_launch_refused(r.id, std::string("fork: ") + std::strerror(errno)));
        if (pid == 0) run_in_child(r, fds, run_command_, self_);
        runs_.push_back({r.id, UniqueFd(pidfd)});
        // The driver's own handle on the run's pyjail: it ends the run (and, if this launcher
        // is gone, every run it had: their parent-death signal does not survive the fsuid
        // changes of opening a script as root) without a pid that could be reused.
        std::string started = encode_launch_started(r.id);
        (void)send_with_fd(sock_, started.data(), started.size(), pidfd);
    }

    // One buffer for every request, made once: a fresh one each time cost a run a quarter
    // MiB of page faults and zeroing, here and again in its forked copy.
    std::vector<char> buf_ = std::vector<char>(kMaxLaunchBytes + 1);
    int sock_;
    const std::function<int(const std::vector<std::string>&)>& run_command_;
    pid_t self_;
    std::list<Launched> runs_;
};

}  // namespace

int serve_runs(int sock, const std::function<int(const std::vector<std::string>&)>& run_command) {
    // A driver that goes away while an answer is on its way must not kill the launcher (and
    // with it every run in flight) by SIGPIPE.
    ::signal(SIGPIPE, SIG_IGN);
    Loop loop(sock, run_command);
    return loop.run();
}

}  // namespace launcher

}  // namespace pyjail
