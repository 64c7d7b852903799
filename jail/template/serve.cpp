#include "serve.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <optional>

#include "cgroup.hpp"
#include "error.hpp"
#include "exitstatus.hpp"
#include "proc_stat.hpp"
#include "run_request.hpp"
#include "serve_bounds.hpp"
#include "spawn.hpp"
#include "supervise.hpp"
#include "sys.hpp"
#include "template_protocol.hpp"

namespace pyjail::serve {

std::vector<std::string> template_command(const std::vector<std::string>& preload) {
    // -I: the template reads no PYTHON* variable and no user site: only the rootfs's modules.
    // -S: the site-packages' .pth files run only once the template has lowered its
    // capabilities (pyjail_template.py runs site then).
    std::vector<std::string> argv = {
        "python", "-I", "-S", "-c",
        fmt::format("import sys; sys.path.insert(0, '{}'); import pyjail_template; "
                    "sys.exit(pyjail_template.main(sys.argv[1:]))",
                    kTemplateDirInJail)};
    argv.insert(argv.end(), preload.begin(), preload.end());
    return argv;
}

namespace {

// The listening socket, only for the invoking user (0600); a stale socket (no server behind
// it) is replaced, a live one or another file is not.
UniqueFd listen_at(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof addr.sun_path)
        throw UsageError(fmt::format("serve: --socket must be a path of 1 to {} bytes", sizeof addr.sun_path - 1));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            throw JailError("serve", fmt::format("{} exists and is not a socket", path), 0,
                            "choose another --socket path");
        UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
        if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
            throw JailError("serve", fmt::format("another server listens at {}", path), 0,
                            "stop it, or choose another --socket path");
        ::unlink(path.c_str());
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw JailError("serve", "cannot create a socket", errno);
    mode_t old = ::umask(0177);
    int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int e = errno;
    ::umask(old);
    if (rc != 0) throw JailError("serve", fmt::format("cannot listen at {}", path), e, "check that its directory is yours");
    if (::listen(fd.get(), 128) != 0) throw JailError("serve", fmt::format("cannot listen at {}", path), errno);
    return fd;
}

void send_reply(int fd, TemplateReplyKind kind, pid_t pid, bool restarted, const std::string& text, int pass) {
    TemplateReply r{};
    r.kind = kind;
    r.pid = pid;
    r.restarted = restarted ? 1 : 0;
    std::snprintf(r.text, sizeof r.text, "%s", text.c_str());
    (void)send_with_fd(fd, &r, sizeof r, pass);
}

// A run refused, in a fresh run's error form: the client makes it its own JailError.
void send_refusal(int fd, const std::string& text, const std::string& step = {}, int err = 0,
                  const std::string& hint = {}) {
    TemplateReply r{};
    r.kind = TemplateReplyKind::Refused;
    std::snprintf(r.text, sizeof r.text, "%s", text.c_str());
    std::snprintf(r.step, sizeof r.step, "%s", step.c_str());
    r.err = err;
    std::snprintf(r.hint, sizeof r.hint, "%s", hint.c_str());
    (void)send_with_fd(fd, &r, sizeof r, -1);
}

void send_refusal(int fd, const JailError& e) { send_refusal(fd, e.message(), e.step(), e.err(), e.hint()); }

// Why the template's supervisor could not start it, from that child to the server: the error
// in a fresh run's form (error.hpp), in one write (atomic: smaller than PIPE_BUF).
struct StartFailure {
    std::int32_t err;
    std::int32_t exit_code;
    char step[32];
    char message[400];
    char hint[256];
};

void send_start_failure(int fd, const JailError& e) {
    StartFailure f{};
    f.err = e.err();
    f.exit_code = e.exit_code();
    std::snprintf(f.step, sizeof f.step, "%s", e.step().c_str());
    std::snprintf(f.message, sizeof f.message, "%s", e.message().c_str());
    std::snprintf(f.hint, sizeof f.hint, "%s", e.hint().c_str());
    (void)::write(fd, &f, sizeof f);
}

// The template's start-up failure: its supervisor's error, if it sent one; else its
// interpreter ended (a preload that cannot be imported: the traceback is on stderr).
JailError start_failure(int fd, const std::string& how) {
    StartFailure f{};
    if (fd >= 0 && ::read(fd, &f, sizeof f) == static_cast<ssize_t>(sizeof f)) {
        f.step[sizeof f.step - 1] = f.message[sizeof f.message - 1] = f.hint[sizeof f.hint - 1] = '\0';
        return JailError(f.step, std::string("the template did not start: ") + f.message, f.err, f.hint,
                         f.exit_code != 0 ? f.exit_code : kExitJailError);
    }
    return JailError("template", fmt::format("the template did not start: its interpreter ended ({}; its error is above)", how),
                     0, "check that the rootfs has every --preload module");
}

// What a pidfd's fdinfo says of its process: its host pid, -1 once it is gone (reaped), 0 if it
// is outside our pid namespace; nothing if the descriptor is not a pidfd (no Pid line).
std::optional<pid_t> pidfd_pid(int fd) {
    std::optional<long> pid = fdinfo_number(fd, "Pid");
    if (!pid) return std::nullopt;
    return static_cast<pid_t>(*pid);
}

// A host process's parent (/proc/PID/stat), or 0.
pid_t parent_of(pid_t pid) {
    std::string text;
    if (!try_read_file(fmt::format("/proc/{}/stat", pid), text)) return 0;
    auto st = parse_proc_stat(text);
    return st ? static_cast<pid_t>(st->ppid) : 0;
}

struct Client;

// What an epoll event is about: one of the server's own descriptors, or a client's.
struct Watch {
    enum class Kind { Signal, Owner, Listen, Control, Template, Conn, RunEnd };
    Kind kind;
    Client* client = nullptr;
};

// One client's run, from its request to its connection's end.
struct Client {
    enum class State { AwaitRequest, Queued, Forwarded, Running };
    Watch conn_watch{Watch::Kind::Conn, this};
    Watch end_watch{Watch::Kind::RunEnd, this};
    UniqueFd conn;
    State state = State::AwaitRequest;
    std::string request;              // encoded, ready for the template
    std::vector<UniqueFd> fds;        // the client's descriptors, then the leaf's cgroup.procs
    std::optional<supervisor::CgroupLeaf> leaf;
    UniqueFd pidfd;                   // the run's pid 1, once started
    bool run_ended = false;
    double wall_time = 0;             // the request's, in seconds (0: none)
    double deadline_ms = 0;           // monotonic_ms when the server ends the run (0: never)
};

// How long after its own wall time a run whose client has not ended it is ended by the server:
// the client's deadline (from before the request was sent) always comes first, so a client
// that works reports the run's end itself.
constexpr double kWallTimeBackstopS = 10;

// Clients held at once, at most (connected, queued, or with a run in flight): each holds up to
// kFdsPerClient descriptors here. More are refused with a reason until some leave.
constexpr std::size_t kMaxClients = 512;
constexpr std::size_t kFdsPerClient = 2 + kMaxPassedFds + 1;  // conn, pidfd, passed, cgroup.procs
constexpr std::size_t kOwnFds = 64;                            // the server's own, with room to spare

// How many clients fit in `nofile` descriptors (pure; the server's limit once raised).
std::size_t clients_for(std::uint64_t nofile) {
    if (nofile <= kOwnFds + kFdsPerClient) return 1;
    return std::min<std::size_t>(kMaxClients, static_cast<std::size_t>((nofile - kOwnFds) / kFdsPerClient));
}

class Server {
public:
    Server(const PreparedRun& prepared, const Policy& runs, std::string socket, std::vector<std::string> preload,
           char** host_argv)
        : prepared_(prepared), socket_(std::move(socket)), preload_(std::move(preload)), host_argv_(host_argv),
          // Planned as each run's client plans its limits: against this server's cgroup site.
          bounds_(serve_bounds(runs, plan_limits(runs.limits, prepared.plan.cgroup.ok),
                               prepared.plan.seccomp ? std::optional(prepared.plan.seccomp->allow) : std::nullopt)) {
        // The runs' leaves go where the template's does: the cgroup pyjail serve found.
        site_ = prepared.plan.cgroup;
        bind_ids_of(bounds_, prepared.plan.host_ids);  // runs' host binds (serve_bounds.hpp)
        char real[PATH_MAX];
        rootfs_ = ::realpath(prepared.plan.rootfs.c_str(), real) != nullptr ? real : prepared.plan.rootfs;
    }
    ~Server() {
        for (auto& c : clients_) kill_run(*c);
        stop_template();
        if (listen_) ::unlink(socket_.c_str());
    }

    int run() {
        sigset_t set;
        sigemptyset(&set);
        for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
        ::sigprocmask(SIG_BLOCK, &set, nullptr);
        sigfd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
        ::signal(SIGPIPE, SIG_IGN);
        max_clients_ = clients_for(raise_fd_limit());
        // Attack: many clients at once. poll() over every client's descriptors failed with
        // EINVAL once they outnumbered the open-file limit (about 510 clients), and the server
        // exited with every run in flight. epoll holds any number; the clients themselves are
        // bounded (accept_clients), and nothing a client does ends this loop.
        epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
        if (!epoll_) throw JailError("serve", "cannot create an epoll instance", errno);
        spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        listen_ = listen_at(socket_);
        watch(sigfd_.get(), &signal_watch_);
        watch_owner();
        watch(listen_.get(), &listen_watch_);
        start_template();
        epoll_event events[64];
        while (true) {
            int n = ::epoll_wait(epoll_.get(), events, 64, next_deadline_in_ms());
            if (n < 0) {
                if (errno == EINTR) continue;
                throw JailError("serve", "epoll_wait", errno);
            }
            bool accept_now = false;
            for (int i = 0; i < n; ++i) {
                const Watch& w = *static_cast<const Watch*>(events[i].data.ptr);
                switch (w.kind) {
                    case Watch::Kind::Signal:
                        std::fprintf(stderr, "pyjail serve: stopping\n");
                        return 0;
                    case Watch::Kind::Owner:
                        // Not 0: nobody asked it to stop, and its runs were cut short.
                        std::fprintf(stderr,
                                     "pyjail serve: stopping (exit status %d): the reader of its standard output is "
                                     "gone (the program that started it ended); stop it with SIGTERM, or give it "
                                     "an output that stays open\n",
                                     kExitServeOwnerGone);
                        return kExitServeOwnerGone;
                    case Watch::Kind::Listen: accept_now = true; break;
                    case Watch::Kind::Control:
                        if (control_ && (events[i].events & EPOLLOUT)) on_template_writable();
                        if (control_ && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_template_message();
                        break;
                    case Watch::Kind::Template:
                        if (template_pidfd_) on_template_gone();
                        break;
                    case Watch::Kind::Conn:
                        if (w.client->conn) on_client(*w.client);
                        break;
                    case Watch::Kind::RunEnd:
                        // Readable for good once the run's pid 1 is gone: watched no more.
                        unwatch(w.client->pidfd.get());
                        w.client->run_ended = true;
                        break;
                }
            }
            // A client is forgotten (and its leaf removed) once its connection is closed, the
            // template has answered for it, and its run (if any) has ended.
            clients_.remove_if([](const std::unique_ptr<Client>& c) {
                return !c->conn && c->state != Client::State::Forwarded && (!c->pidfd || c->run_ended);
            });
            if (accept_now) accept_clients();
            end_overdue_runs();
        }
    }

private:
    // The template: a jail run by a child of ours (its supervisor, spawn.cpp's run_jail), with
    // our end of a socket pair as its stdin. It dies with us (the supervisor's parent-death
    // signal, then its jail's).
    void start_template() {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
            throw JailError("serve", "cannot create the template's socket", errno);
        UniqueFd ours(sv[0]), theirs(sv[1]);
        int failure[2];
        if (::pipe2(failure, O_CLOEXEC | O_NONBLOCK) != 0)
            throw JailError("serve", "cannot create the template's error pipe", errno);
        UniqueFd failure_read(failure[0]), failure_write(failure[1]);
        std::fflush(nullptr);
        pid_t pid = ::fork();
        if (pid < 0) throw JailError("serve", "cannot start the template's supervisor", errno);
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() == 1) ::_exit(kExitJailError);
            ::dup2(theirs.get(), 0);
            // The error pipe is the supervisor's alone. Attack: the template's program writing a
            // forged start-up failure (or a flood) to the server: the jail's pid 1 closes every
            // descriptor it was not given (lock_down), and the pipe is CLOEXEC besides; the
            // server reads one bounded, terminated record, once the supervisor has ended.
            ::dup2(failure_write.get(), 3);
            // The template's supervisor holding the server's sockets to other clients
            // (and so their runs) is not started.
            if (sys_close_range(4, ~0U, 0) != 0 || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0) {
                send_start_failure(3, JailError("serve", "cannot close the server's descriptors", errno));
                ::_exit(kExitJailError);
            }
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            ::signal(SIGPIPE, SIG_DFL);
            int code = kExitJailError;
            try {
                RunFacts facts;
                code = supervisor::run_jail(prepared_, host_argv_, facts);
            } catch (const JailError& e) {
                send_start_failure(3, e);
            } catch (const std::exception& e) {
                send_start_failure(3, JailError("internal", e.what()));
            }
            std::fflush(nullptr);
            ::_exit(code);
        }
        template_pid_ = pid;
        template_failure_ = std::move(failure_read);
        template_pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
        control_ = std::move(ours);
        if (epoll_) {
            watch(control_.get(), &control_watch_);
            watch(template_pidfd_.get(), &template_watch_);
        }
        template_ready_ = false;
        template_full_ = false;
        starts_++;
    }

    // Closing its socket ends the template (its loop sees EOF) and so its supervisor, which
    // removes the template's cgroup leaf on the way out; SIGKILL only if that takes too long.
    void stop_template() {
        if (template_pid_ <= 0) return;
        control_.reset();
        pollfd p{template_pidfd_.get(), POLLIN, 0};
        if (!template_pidfd_ || ::poll(&p, 1, 5000) != 1) ::kill(template_pid_, SIGKILL);
        ::waitpid(template_pid_, nullptr, 0);
        template_pid_ = -1;
        control_.reset();
        template_pidfd_.reset();
    }

    // The template ended (its supervisor exited, or its socket closed).
    void on_template_gone() {
        int status = 0;
        if (template_pid_ > 0) ::waitpid(template_pid_, &status, 0);
        template_pid_ = -1;
        close_control();
        unwatch(template_pidfd_.get());
        template_pidfd_.reset();
        std::string how = WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                            : fmt::format("signal {}", WTERMSIG(status));
        for (Client* c : forwarded_) {
            send_refusal(c->conn.get(), "the template ended while starting the run (" + how + ")", "template", 0,
                         "the server's stderr says why; it starts another template");
            c->state = Client::State::Running;
            close_conn(*c);
        }
        forwarded_.clear();
        JailError why = start_failure(template_failure_.get(), how);
        template_failure_.reset();
        if (!ever_ready_) throw why;
        std::fprintf(stderr, "pyjail serve: the template ended (%s); starting another%s%s\n", how.c_str(),
                     why.step() == "template" ? "" : ": ", why.step() == "template" ? "" : why.one_line().c_str());
        if (starts_ > 3 && !template_ready_) {
            // Three starts in a row that never got ready: refuse runs rather than loop.
            for (auto& c : clients_)
                if (c->state == Client::State::Queued) {
                    send_refusal(c->conn.get(), "the template cannot start again", "template", 0,
                                 "the server's stderr says why; restart pyjail serve");
                    close_conn(*c);
                }
            queued_.clear();
            return;
        }
        restarted_ = true;
        start_template();
    }

    // Attack: the template's code answering with a pidfd of a process outside its jail (this
    // server, whose socket it holds; a client, or whatever is at the other end of a socket a
    // client passed: SO_PEERPIDFD gives them), which the server and the client would signal as
    // the run's pid 1: kills the template cannot make from its pid namespace. Only a process
    // below its supervisor is the template's: nothing outside the jail descends from it (our
    // child, not reaped until it is gone, so its pid is not another's). The walk reads /proc,
    // not the processes themselves: an ancestor that ended in that instant, its pid taken at
    // once by a process of the jail, would pass; the template cannot time that.
    bool in_template(int pidfd) const {
        std::optional<pid_t> gone_or_pid = pidfd_pid(pidfd);
        if (!gone_or_pid) return false;
        // A run can end, and be reaped by the template, before its answer is read here; a
        // process gone is nobody's to kill any more.
        pid_t pid = *gone_or_pid;
        if (pid == -1) return true;
        for (int hops = 0; template_pid_ > 0 && pid > 1 && hops < 64; ++hops) {
            pid_t up = parent_of(pid);
            if (up == template_pid_) return true;
            // The run itself ended and was reaped between the two reads: gone, as above.
            if (up == 0 && hops == 0) return pidfd_pid(pidfd) == -1;
            pid = up;
        }
        return false;
    }

    void on_template_message() {
        TemplateReply r{};
        int fd = -1;
        ssize_t n = recv_with_fd(control_.get(), &r, sizeof r, fd, MSG_DONTWAIT);
        UniqueFd passed(fd);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n != static_cast<ssize_t>(sizeof r)) {  // the template's end closed: it is going
            close_control();
            return;
        }
        r.text[sizeof r.text - 1] = '\0';
        if (r.kind == TemplateReplyKind::Ready) {
            template_ready_ = true;
            starts_ = 0;
            if (prepared_.plan.policy.verbose && r.text[0] != '\0')  // huge_pages.hpp
                std::fprintf(stderr, "pyjail serve: the template's memory: %s\n", r.text);
            if (!ever_ready_) {
                ever_ready_ = true;
                std::string mods;
                for (const auto& m : preload_) mods += (mods.empty() ? "" : ", ") + m;
                std::printf("pyjail serve: ready at %s (preloaded: %s)\n", socket_.c_str(),
                            mods.empty() ? "nothing" : mods.c_str());
                std::fflush(stdout);
            }
            forward_next();
            return;
        }
        if (forwarded_.empty()) return;
        Client* c = forwarded_.front();
        forwarded_.pop_front();
        c->deadline_ms = 0;  // answered: the run's own deadline, if it started, is set below
        forward_next();
        if (r.kind == TemplateReplyKind::Started && passed && !in_template(passed.get())) {
            std::fprintf(stderr, "pyjail serve: the template answered a run with a process outside its jail: "
                                 "refused\n");
            c->state = Client::State::Running;
            send_refusal(c->conn.get(), "the template answered with a process outside its jail", "template", 0,
                         "check the template's preloads");
            close_conn(*c);
            return;
        }
        if (r.kind == TemplateReplyKind::Started && passed) {
            c->state = Client::State::Running;
            c->pidfd = std::move(passed);
            if (!try_watch(c->pidfd.get(), &c->end_watch)) {  // its end could not be seen: ended now
                kill_run(*c);
                c->run_ended = true;
                send_refusal(c->conn.get(), "the server cannot watch the run", "serve", errno);
                close_conn(*c);
                return;
            }
            if (!c->conn) {  // its client left while it started
                kill_run(*c);
                return;
            }
            if (c->wall_time > 0) c->deadline_ms = monotonic_ms() + (c->wall_time + kWallTimeBackstopS) * 1000;
            std::string leaf = c->leaf ? c->leaf->path() : std::string();
            send_reply(c->conn.get(), TemplateReplyKind::Started, r.pid, restarted_, leaf, c->pidfd.get());
            restarted_ = false;
        } else {
            c->state = Client::State::Running;  // nothing started: forgotten with its connection
            r.step[sizeof r.step - 1] = '\0';
            r.hint[sizeof r.hint - 1] = '\0';
            send_refusal(c->conn.get(), r.text, r.step[0] != '\0' ? r.step : "template", r.err, r.hint);
            close_conn(*c);
        }
    }

    void accept_clients() {
        // A bounded number per turn: a stream of connections must not keep the loop from the
        // template's replies and the runs' ends.
        for (int turn = 0; turn < 64; ++turn) {
            UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!conn) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                // Out of descriptors, the pending connection would keep the listening socket
                // readable and this loop spinning: take it with the spare one, and refuse it.
                if ((errno == EMFILE || errno == ENFILE) && spare_) {
                    spare_.reset();
                    UniqueFd taken(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
                    if (taken) refuse_connection(taken.get(), "the server is out of file descriptors");
                    taken.reset();
                    spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
                    continue;
                }
                return;
            }
            // Only the server's own user (and root) may start runs: the socket's mode says so
            // too, but a socket inherited or passed on must not widen it.
            ucred cred{};
            socklen_t len = sizeof cred;
            if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
                !trusted_serve_peer(cred.uid, ::geteuid()))
                continue;
            if (clients_.size() >= max_clients_) {
                refuse_connection(conn.get(), fmt::format("the server holds {} clients, its most; try again when "
                                                          "runs have ended, or start another pyjail serve",
                                                          max_clients_));
                continue;
            }
            ServeHello hello{};
            hello.version = kServeProtocolVersion;
            hello.cgroup_ok = site_.ok ? 1 : 0;
            std::snprintf(hello.rootfs, sizeof hello.rootfs, "%s", rootfs_.c_str());
            std::snprintf(hello.why_not, sizeof hello.why_not, "%s", site_.why_not.c_str());
            if (::send(conn.get(), &hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) !=
                static_cast<ssize_t>(sizeof hello))
                continue;
            auto c = std::make_unique<Client>();
            c->conn = std::move(conn);
            if (!try_watch(c->conn.get(), &c->conn_watch)) continue;
            clients_.push_back(std::move(c));
        }
    }

    void refuse_connection(int fd, const std::string& why) {
        ServeHello hello{};
        hello.version = kServeProtocolVersion;
        std::snprintf(hello.refused, sizeof hello.refused, "%s", why.c_str());
        (void)::send(fd, &hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT);
    }

    // The soft open-file limit raised to the hard one (never lowered): what the clients'
    // descriptors have to fit in.
    static std::uint64_t raise_fd_limit() {
        rlimit l{};
        if (::getrlimit(RLIMIT_NOFILE, &l) != 0) return 1024;
        if (l.rlim_cur < l.rlim_max) {
            rlimit raised{l.rlim_max, l.rlim_max};
            if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) l = raised;
        }
        return l.rlim_cur;
    }

    // A server started by a program (pyjail.Pool, pyjail-server) reads its "ready" line from
    // a pipe or socket. Prevents: a program killed with SIGKILL, which cannot stop us, leaving
    // this server and its template running for ever. The other end's last close shows here as
    // EPOLLERR (a pipe) or EPOLLHUP (a socket), which epoll reports whatever is asked for; a
    // terminal or a file has no such end, and is not watched.
    void watch_owner() {
        struct stat st{};
        if (::fstat(STDOUT_FILENO, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return;
        epoll_event ev{};
        ev.data.ptr = &owner_watch_;
        if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, STDOUT_FILENO, &ev) != 0)
            throw JailError("serve", "cannot watch its standard output", errno);
    }

    // The server's own descriptors must be watched; a client's that cannot be (the kernel
    // out of memory, or of the user's epoll watches) is refused or ended, not fatal.
    bool try_watch(int fd, Watch* w) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = w;
        return ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
    }
    void watch(int fd, Watch* w) {
        if (!try_watch(fd, w)) throw JailError("serve", "cannot watch a descriptor", errno);
    }
    // Before a watched descriptor closes: a copy of it elsewhere (a child between fork and
    // its close_range) would keep it in the epoll set.
    void unwatch(int fd) {
        if (fd >= 0 && epoll_) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    }
    void close_conn(Client& c) {
        unwatch(c.conn.get());
        c.conn.reset();
    }
    void close_control() {
        unwatch(control_.get());
        control_.reset();
    }

    void on_client(Client& c) {
        std::string buf(kMaxRequestBytes + 1, '\0');
        int fds[kMaxPassedFds];
        int got = 0;
        ssize_t n = recv_with_fds(c.conn.get(), buf.data(), buf.size(), fds, kMaxPassedFds, got, MSG_DONTWAIT);
        std::vector<UniqueFd> owned;
        for (int k = 0; k < got; ++k) owned.emplace_back(fds[k]);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n <= 0) {  // the client is gone: so is its run
            kill_run(c);
            close_conn(c);
            return;
        }
        if (c.state != Client::State::AwaitRequest) return;  // one request per connection
        try {
            RunRequest r = decode_request(std::string_view(buf.data(), static_cast<std::size_t>(n)));
            // Only this server puts a run in a cgroup, through a cgroup.procs it opened: a
            // client's flag would have the run's pid 1 write to a descriptor of the client's.
            if (r.into_cgroup) throw BadRequest("the request names a cgroup of its own: only the server makes one");
            if (got != request_fd_count(r)) throw BadRequest("the request's descriptors are missing");
            if (auto why = beyond_bounds(r, bounds_)) throw BadRequest(*why);
            // The run's filter is the one this server compiles from the set it just checked,
            // never bytes whose set it cannot tell.
            if (prepared_.plan.seccomp) r.lockdown.seccomp_filter = filter_for(r.seccomp_allow);
            if (!r.cgroup_files.empty()) {
                if (!site_.ok) throw BadRequest("cgroup limits asked for, but this server has no cgroup for runs");
                c.leaf.emplace(site_, r.cgroup_files);
                UniqueFd procs(::open((c.leaf->path() + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
                if (!procs) throw JailError("cgroup", "cannot open the run's cgroup.procs", errno);
                owned.push_back(std::move(procs));
                r.into_cgroup = true;
            }
            c.request = encode_request(r);
            c.fds = std::move(owned);
            c.wall_time = r.wall_time;
        } catch (const JailError& e) {
            send_refusal(c.conn.get(), e);
            close_conn(c);
            return;
        } catch (const std::exception& e) {  // BadRequest: the request itself
            send_refusal(c.conn.get(), e.what());
            close_conn(c);
            return;
        }
        c.state = Client::State::Queued;
        queued_.push_back(&c);
        forward_next();
    }

    // Attack: a burst of clients. The template's replies are blocking: with many requests
    // forwarded at once, the template's replies (read one per turn of the loop) fill their
    // socket while this server still sends, and each then waits for the other for ever, with
    // every run of this server. A few requests at the template at a time: their replies (a
    // few hundred bytes each) never fill the template's socket, so the template never waits.
    void forward_next() {
        while (template_ready_ && !template_full_ && forwarded_.size() < kAtTemplate && !queued_.empty()) {
            Client* c = queued_.front();
            queued_.pop_front();
            forward(*c);  // sent: awaited now; not sent: answered, and the next is tried
        }
    }

    void forward(Client& c) {
        std::vector<int> fds;
        for (const auto& f : c.fds) fds.push_back(f.get());
        int e = control_ ? send_with_fds(control_.get(), c.request.data(), c.request.size(), fds.data(),
                                         static_cast<int>(fds.size()), MSG_DONTWAIT)
                         : EPIPE;
        // Attack: a template that answers without reading its requests, or stops reading: a
        // send that waited for room would stop this server (its clients, its runs' deadlines,
        // SIGTERM) for as long as the template likes. The request waits at the head of the
        // queue until the template's socket has room (on_template_writable).
        if (e == EAGAIN) {
            queued_.push_front(&c);
            template_full_ = true;
            watch_control(EPOLLIN | EPOLLOUT);
            return;
        }
        c.fds.clear();  // the template has them now
        if (e != 0) {
            send_refusal(c.conn.get(), "cannot reach the template", "template", e,
                         "the server's stderr says why; it starts another template");
            close_conn(c);
            return;
        }
        c.state = Client::State::Forwarded;
        // Until the template answers: past the run's wall time, the template is stuck.
        if (c.wall_time > 0) c.deadline_ms = monotonic_ms() + (c.wall_time + kWallTimeBackstopS) * 1000;
        forwarded_.push_back(&c);
    }

    void on_template_writable() {
        template_full_ = false;
        watch_control(EPOLLIN);
        forward_next();
    }
    void watch_control(std::uint32_t events) {
        epoll_event ev{};
        ev.events = events;
        ev.data.ptr = &control_watch_;
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, control_.get(), &ev);
    }

    // The filter of a set within this server's (beyond_bounds checked it): the server's own
    // for its own set, else compiled here (about a millisecond), the last one kept.
    const std::vector<sock_filter>& filter_for(const std::vector<std::string>& allow) {
        if (allow == prepared_.plan.seccomp->allow) return prepared_.plan.seccomp_filter;
        if (allow != last_allow_) {
            SeccompSet set;
            set.allow = allow;
            std::sort(set.allow.begin(), set.allow.end());
            set.allow.erase(std::unique(set.allow.begin(), set.allow.end()), set.allow.end());
            last_filter_ = compile_seccomp(set, prepared_.plan.policy.net);
            last_allow_ = allow;
        }
        return last_filter_;
    }

    // Attack: a client that stops (SIGSTOP, a debugger) or never enforces the wall time it
    // asked for: its connection stays open, and the run would last for ever, beyond the
    // server's --wall-time. The server ends it a little after its own wall time.
    int next_deadline_in_ms() const {
        double next = 0;
        for (const auto& c : clients_)
            if (c->deadline_ms > 0 && !c->run_ended && (next == 0 || c->deadline_ms < next)) next = c->deadline_ms;
        if (next == 0) return -1;
        double in = next - monotonic_ms();
        return in <= 0 ? 0 : static_cast<int>(std::min(in + 1, 3600.0 * 1000));
    }
    void end_overdue_runs() {
        const double now = monotonic_ms();
        for (auto& c : clients_) {
            if (c->deadline_ms <= 0 || c->run_ended || now < c->deadline_ms) continue;
            c->deadline_ms = 0;
            if (c->state == Client::State::Forwarded) {
                // Attack (or a stalled template): a request the template never answers holds
                // its client's descriptors (its stdout, its report socket) in the template's
                // socket for as long as the template lives. Unanswered for longer than the run
                // could have lasted, the template is ended; on_template_gone refuses what it
                // still held and starts another.
                std::fprintf(stderr, "pyjail serve: the template did not answer a request within the run's wall time "
                             "(%g s) and %g s: ending it\n", c->wall_time, kWallTimeBackstopS);
                if (template_pidfd_) sys_pidfd_send_signal(template_pidfd_.get(), SIGKILL);
                return;
            }
            kill_run(*c);
            if (!prepared_.plan.policy.quiet)
                std::fprintf(stderr, "pyjail serve: a run outlived its wall time (%g s) by %g s; its client did not "
                             "end it: killed\n", c->wall_time, kWallTimeBackstopS);
        }
    }

    // A run whose client is gone must not outlive it: the client enforced its limits.
    void kill_run(Client& c) {
        if (c.pidfd && !c.run_ended) sys_pidfd_send_signal(c.pidfd.get(), SIGKILL);
        if (c.leaf) c.leaf->kill_all();
        for (auto it = queued_.begin(); it != queued_.end(); ++it)
            if (*it == &c) {
                queued_.erase(it);
                break;
            }
    }

    const PreparedRun& prepared_;
    std::string socket_;
    std::vector<std::string> preload_;
    char** host_argv_;
    ServeBounds bounds_;  // every request is held to the server's own settings
    std::vector<std::string> last_allow_;
    std::vector<sock_filter> last_filter_;
    UniqueFd epoll_, spare_;
    std::size_t max_clients_ = kMaxClients;
    Watch signal_watch_{Watch::Kind::Signal}, owner_watch_{Watch::Kind::Owner}, listen_watch_{Watch::Kind::Listen},
        control_watch_{Watch::Kind::Control}, template_watch_{Watch::Kind::Template};
    CgroupSite site_;
    std::string rootfs_;
    UniqueFd sigfd_, listen_;
    pid_t template_pid_ = -1;
    UniqueFd template_pidfd_, control_;
    UniqueFd template_failure_;  // start_failure's: the read end of the template's error pipe
    bool template_ready_ = false, ever_ready_ = false, restarted_ = false;
    bool template_full_ = false;  // a request waits for room in the template's socket
    int starts_ = 0;
    std::list<std::unique_ptr<Client>> clients_;
    std::deque<Client*> queued_;     // waiting for the template: to be ready, to answer earlier ones
    // Requests sent to the template and not yet answered, at most: enough for the template
    // to find the next request waiting when it has forked a run.
    static constexpr std::size_t kAtTemplate = 4;
    std::deque<Client*> forwarded_;  // sent to the template, in order, awaiting its reply
};

}  // namespace

int serve(const PreparedRun& prepared, const Policy& runs, const std::string& socket,
          const std::vector<std::string>& preload, char** host_argv) {
    Server server(prepared, runs, socket, preload, host_argv);
    return server.run();
}

}  // namespace pyjail::serve
