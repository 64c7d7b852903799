#include "forked_run.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <linux/capability.h>
#include <unistd.h>

#include <csetjmp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "exitstatus.hpp"
#include "init.hpp"
#include "steps.hpp"
#include "sys.hpp"

namespace pyjail {

namespace {

// The program's signal state, as the template's interpreter set it up.
sigset_t g_program_mask;
struct sigaction g_program_actions[NSIG];

// The run's pid 1 shares the template's memory (CLONE_VM | CLONE_VFORK: the template waits,
// no page is copied) until it has forked the program and exec'd the reaper; the program, the
// one copy of the template, comes back into the template's frame through this jump.
sigjmp_buf g_program_entry;
int g_reaper_fd = -1;              // pyjail-reaper, opened when the template starts
// The next run's network namespace, made while the template waits for requests (see
// make_spare_network): a new one for each run, never used by two. -1: none, the run's pid 1
// makes its own.
int g_spare_net = -1;
constexpr std::size_t kPid1Stack = 256 * 1024;
void* g_pid1_stack = nullptr;      // mapped for each run's pid 1 while it shares our memory
// pid 1's descriptors while it sets the run up: 3 the report socket, 4 the reaper's binary,
// 5 and 6 the ends of the pipe the program waits on until the reaper is undumpable.
constexpr int kReleaseReadFd = 6;

struct Pid1Args {
    const RunRequest* request;
    const int* fds;
    int release_w, release_r;
    int spare_net;  // g_spare_net at the fork, or -1
};

}  // namespace

namespace program {

namespace {

// The run's program: what a fresh interpreter would have, and nothing of pid 1's.
void become_program() {
    // pid 1 execs the reaper right after forking us; until the reaper has made itself
    // undumpable again (exec resets it), we must not run a byte of the program: /proc/1/mem
    // would be open to us. Then none of pid 1's descriptors (3-6) stays with us.
    char go;
    while (::read(kReleaseReadFd, &go, 1) < 0 && errno == EINTR) {
    }
    // Attack: the program holding pid 1's report socket (3) forges the run's report, or its
    // release pipe and the reaper's binary. lock_down kept only 3-6: under a seccomp set that
    // refuses close_range, each is closed by itself, and a program that cannot lose them
    // never starts.
    if (sys_close_range(3, ~0U, 0) != 0)
        for (int fd = 3; fd <= 6; ++fd)
            if (::close(fd) != 0 && errno != EBADF) ::_exit(kExitJailError);
    // pid 1's stack, copied with the rest: not ours to keep.
    if (g_pid1_stack != nullptr) ::munmap(g_pid1_stack, kPid1Stack);
    for (int s = 1; s < NSIG; ++s)
        if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &g_program_actions[s], nullptr);
    ::sigprocmask(SIG_SETMASK, &g_program_mask, nullptr);
    // pid 1 is not dumpable; the program is, as an exec'd one would be: it may read its own
    // /proc files. It cannot reach pid 1 or the template.
    (void)::prctl(PR_SET_DUMPABLE, 1);
}

}  // namespace

}  // namespace program

namespace pid1 {

namespace {

// The run's pid 1, on a stack of its own in the template's memory (the template waits). Never
// returns: ends in the reaper's exec (or _exit on a failed step).
int run_forked(void* arg) {
    const auto& a = *static_cast<const Pid1Args*>(arg);
    const RunRequest& r = *a.request;
    const int* fds = a.fds;
    // Until the exec, the template waits for us: nothing here may wait on the client. A client
    // that does not read its report socket (or many runs sharing one) makes our messages fail,
    // and the run with them, instead of freezing the template for every other run. Each send
    // says so itself (MSG_DONTWAIT): O_NONBLOCK would belong to the socket's open file, which
    // runs given one socket share, and another run's reaper makes it blocking again.
    set_report_fd(fds[0], true);
    // Sharing the template's memory: the program (same uid) must not read it or ptrace us.
    if (::prctl(PR_SET_DUMPABLE, 0) != 0) fail(ChildStep::Dumpable, errno, kExitJailError, "prctl");
    int at = 4;
    const int script_fd = r.has_script ? fds[at++] : -1;
    // The script is copied in before the exec: from a regular file only (a pipe could stall).
    struct stat script_st {};
    if (script_fd >= 0 && (::fstat(script_fd, &script_st) != 0 || !S_ISREG(script_st.st_mode)))
        fail(ChildStep::CopyScript, EINVAL, kExitJailError, "the script is not a regular file");
    // The host binds' trees the client opened (template_binds.hpp), by their slots.
    std::vector<int> bind_trees(r.mounts.sources.size(), -1);
    for (std::uint32_t k = 0; k < r.binds; ++k) bind_trees[kFirstHandedSlot + k] = fds[at++];
    if (r.into_cgroup) {
        // The leaf the server made for this run, opened by the server: the kernel checks the
        // move with the opener's credentials, so the template needs no rights over the
        // cgroup tree. "0" moves the writer; everything the run starts is born there.
        int procs = fds[at++];
        if (::write(procs, "0", 1) != 1) fail(ChildStep::RunCgroup, errno, kExitJailError, "join the run's cgroup");
    }
    // The run's own namespaces, besides the pid namespace it was forked into: nothing it
    // mounts, binds, names or sends reaches the template or another run. Its network
    // namespace is the spare the template made for it alone, if there is one (a new one takes
    // the kernel most of a millisecond, on the path to the program's first line).
    enter_network(a.spare_net, ChildStep::RunNamespaces);
    if (::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) != 0)
        fail(ChildStep::RunNamespaces, errno, kExitJailError, "unshare");
    apply_mount_plan(r.mounts, bind_trees, script_fd, nullptr);
    const int stdio[3] = {fds[1], fds[2], fds[3]};
    const int keep[4] = {fds[0], g_reaper_fd, a.release_w, a.release_r};  // -> 3, 4, 5, 6
    lock_down(r.lockdown, stdio, keep, 4);

    // The program: the one copy of the template's memory. It goes back into the template's
    // frame (g_program_entry), where the interpreter's fork bookkeeping is finished.
    pid_t program = ::fork();
    if (program < 0) fail(ChildStep::Fork, errno, kExitJailError, "cannot start the program");
    if (program == 0) ::siglongjmp(g_program_entry, 1);
    // pid 1 leaves the template's memory for the reaper (init.cpp): the report socket and the
    // program's release go with it; the reaper binary's descriptor does not.
    if (::fcntl(3, F_SETFD, 0) != 0 || ::fcntl(5, F_SETFD, 0) != 0)
        fail(ChildStep::Exec, errno, kExitJailError, "fcntl");
    char pid_text[16];
    std::snprintf(pid_text, sizeof pid_text, "%d", program);
    char* argv[] = {const_cast<char*>("pyjail-reaper"), pid_text, const_cast<char*>("3"),
                    const_cast<char*>("5"), nullptr};
    char* envp[] = {nullptr};
    ::syscall(SYS_execveat, 4, "", argv, envp, AT_EMPTY_PATH);
    int e = errno;
    ::kill(program, SIGKILL);
    fail(ChildStep::Exec, e, kExitJailError, "cannot execute the run's reaper");
}

}  // namespace

}  // namespace pid1

namespace template_ {

namespace {

// The effective set: the permitted one (`raise`) or nothing. The inheritable set stays empty,
// so nothing the template execs gets a capability.
int set_effective_capabilities(bool raise) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct sets[_LINUX_CAPABILITY_U32S_3]{};
    if (::syscall(SYS_capget, &header, sets) != 0) return errno;
    for (auto& s : sets) {
        s.effective = raise ? s.permitted : 0;
        s.inheritable = 0;
    }
    return ::syscall(SYS_capset, &header, sets) == 0 ? 0 : errno;
}

}  // namespace

int lower_capabilities() {
    // Attack: a .pth file or a preload of the rootfs running with the template's capabilities
    // (new namespaces, mounts, network devices in the template's user namespace). Code that
    // calls capset(2) itself can still raise them: what remains is in man pyjail(1),
    // TEMPLATES; the template's filter (seccomp.cpp) holds for it either way.
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
    return set_effective_capabilities(false);
}

void save_program_signals() {
    ::sigprocmask(SIG_SETMASK, nullptr, &g_program_mask);
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, nullptr, &g_program_actions[s]);
}

void set_reaper(int fd) { g_reaper_fd = fd; }

void make_spare_network(int own_net) {
    if (g_spare_net >= 0 || own_net < 0) return;
    // A network namespace of its own for the next run, made now rather than on that run's
    // path: the template enters a new one, keeps a descriptor of it and goes back to its own.
    // Only the template holds it until a run's pid 1 enters it; the run's lock-down is the
    // same either way (its loopback, its filter). Any failure leaves the run to make its own.
    if (set_effective_capabilities(true) != 0) return;
    int spare = -1;
    if (::unshare(CLONE_NEWNET) == 0) {
        spare = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (::setns(own_net, CLONE_NEWNET) != 0) {
            // Every later run would share the namespace the template is now in: it ends here
            // (the server starts another), as when it cannot return to its pid namespace.
            std::fprintf(stderr, "pyjail template: cannot return to its own network namespace: %s\n",
                         std::strerror(errno));
            ::_exit(kExitJailError);
        }
    }
    if (set_effective_capabilities(false) != 0) {
        std::fprintf(stderr, "pyjail template: cannot lower its capabilities: %s\n", std::strerror(errno));
        ::_exit(kExitJailError);
    }
    g_spare_net = spare;
}

static pid_t fork_run_raised(const RunRequest& request, const int* fds, int own_pidns, const ForkHooks& hooks,
                      std::string& error) {
    int release[2];
    if (::pipe2(release, O_CLOEXEC) != 0) {
        error = std::string("pipe: ") + std::strerror(errno);
        return -1;
    }
    g_pid1_stack = ::mmap(nullptr, kPid1Stack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (g_pid1_stack == MAP_FAILED) {
        g_pid1_stack = nullptr;
        ::close(release[0]);
        ::close(release[1]);
        error = std::string("cannot map a stack for the run's pid 1: ") + std::strerror(errno);
        return -1;
    }
    // The next child is pid 1 of a new pid namespace: it sees neither the template nor any
    // other run, and everything it leaves dies with it.
    if (::unshare(CLONE_NEWPID) != 0) {
        error = std::string("cannot create the run's pid namespace: ") + std::strerror(errno);
        ::munmap(g_pid1_stack, kPid1Stack);
        ::close(release[0]);
        ::close(release[1]);
        return -1;
    }
    if (hooks.before) hooks.before();
    if (sigsetjmp(g_program_entry, 0) != 0) {
        // The run's program, forked by its pid 1: its jail is complete.
        if (hooks.after_child) hooks.after_child();
        program::become_program();
        return 0;
    }
    Pid1Args args{&request, fds, release[1], release[0], g_spare_net};
    pid_t pid = ::clone(pid1::run_forked, static_cast<char*>(g_pid1_stack) + kPid1Stack,
                        CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
    int clone_errno = errno;
    // Used (or its run failed): either way, never handed to another run.
    if (g_spare_net >= 0) ::close(g_spare_net);
    g_spare_net = -1;
    // pid 1 has exec'd the reaper (or failed): its stack and our ends of the release are ours.
    if (hooks.after_parent) hooks.after_parent();
    ::munmap(g_pid1_stack, kPid1Stack);
    g_pid1_stack = nullptr;
    ::close(release[0]);
    ::close(release[1]);
    // Back to our own pid namespace for the next run's unshare.
    if (::setns(own_pidns, CLONE_NEWPID) != 0) {
        // Later runs would not get a pid namespace of their own: the template ends here (the
        // server sees it go, and starts another for the next run).
        std::fprintf(stderr, "pyjail template: cannot return to its own pid namespace: %s\n",
                     std::strerror(errno));
        ::_exit(kExitJailError);
    }
    if (pid < 0) {
        error = std::string("cannot start the run's pid 1: ") + std::strerror(clone_errno);
        return -1;
    }
    return pid;
}

pid_t fork_run(const RunRequest& request, const int* fds, int own_pidns, const ForkHooks& hooks,
               std::string& error) {
    // Only while the run is set up: its pid 1 is cloned with them, and drops them all.
    if (int e = set_effective_capabilities(true); e != 0) {
        error = std::string("cannot raise the template's capabilities: ") + std::strerror(e);
        return -1;
    }
    pid_t pid = fork_run_raised(request, fds, own_pidns, hooks, error);
    if (int e = pid != 0 ? set_effective_capabilities(false) : 0; e != 0) {
        // A template whose preloads' code could keep using them: it ends here (the server
        // starts another).
        std::fprintf(stderr, "pyjail template: cannot lower its capabilities: %s\n", std::strerror(e));
        ::_exit(kExitJailError);
    }
    return pid;
}

}  // namespace template_

}  // namespace pyjail
