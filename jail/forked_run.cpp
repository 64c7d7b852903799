#include "forked_run.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "exitstatus.hpp"
#include "init.hpp"
#include "steps.hpp"

namespace pyjail {

namespace {

// The program's signal state, as the template's interpreter set it up.
sigset_t g_program_mask;
struct sigaction g_program_actions[NSIG];

}  // namespace

namespace program {

namespace {

// The run's program: what a fresh interpreter would have, and nothing of pid 1's.
void become_program() {
    for (int s = 1; s < NSIG; ++s)
        if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &g_program_actions[s], nullptr);
    ::sigprocmask(SIG_SETMASK, &g_program_mask, nullptr);
    // pid 1 is not dumpable (it is a copy of the template); the program is, as an exec'd one
    // would be: it may read its own /proc files. It cannot reach pid 1 or the template.
    (void)::prctl(PR_SET_DUMPABLE, 1);
    // The report socket is pid 1's alone: close-on-exec does nothing where nothing execs.
    ::close(pid1::report_fd());
}

}  // namespace

}  // namespace program

namespace pid1 {

namespace {

// Returns only in the program.
void run_forked(const RunRequest& r, const int* fds, const zygote::ForkHooks& hooks) {
    set_report_fd(fds[0]);
    // This process is a copy of the template: the program (same uid) must not read its memory
    // or ptrace it.
    if (::prctl(PR_SET_DUMPABLE, 0) != 0) fail(ChildStep::Dumpable, errno, kExitJailError, "prctl");
    int at = 4;
    const int script_fd = r.has_script ? fds[at++] : -1;
    if (r.into_cgroup) {
        // The leaf the server made for this run, opened by the server: the kernel checks the
        // move with the opener's credentials, so the template needs no rights over the
        // cgroup tree. "0" moves the writer; everything the run starts is born there.
        int procs = fds[at++];
        if (::write(procs, "0", 1) != 1) fail(ChildStep::RunCgroup, errno, kExitJailError, "join the run's cgroup");
    }
    // The run's own namespaces, besides the pid namespace it was forked into: nothing it
    // mounts, binds, names or sends reaches the template or another run.
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) != 0)
        fail(ChildStep::RunNamespaces, errno, kExitJailError, "unshare");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        fail(ChildStep::MountPrivate, errno, kExitJailError, "make / private");
    if (::chdir("/") != 0) fail(ChildStep::Chdir, errno, kExitJailError, "chdir /");
    const MountPlan no_sources;
    for (const MountOp& op : r.mounts) apply_mount_op(op, no_sources, {}, script_fd, op.target.c_str());
    if (::chdir(r.cwd.c_str()) != 0) fail(ChildStep::Chdir, errno, kExitJailError, "cannot enter %s", r.cwd.c_str());
    set_hostname(r.hostname);
    set_up_network(r.loopback_up);
    set_rlimits(r.rlimits);
    const int stdio[3] = {fds[1], fds[2], fds[3]};
    take_stdio(stdio);
    new_session();
    close_inherited_fds();
    drop_capabilities();
    set_no_new_privs();
    join_new_keyring();
    int listener = install_seccomp(r.seccomp_filter);
    install_init_signals();
    send_ready(listener);

    // The program: a fork of this copy of the interpreter, with its locks and at-fork hooks
    // (which reseed `random`) seen to. pid 1 never runs the interpreter again.
    if (hooks.before) hooks.before();
    pid_t program = ::fork();
    if (program < 0) fail(ChildStep::Fork, errno, kExitJailError, "cannot start the program");
    if (program == 0) {
        if (hooks.after_child) hooks.after_child();
        program::become_program();
        return;  // into the interpreter: the caller's caller runs the program
    }
    run_reaper(program, report_fd());
}

}  // namespace

}  // namespace pid1

namespace zygote {

void save_program_signals() {
    ::sigprocmask(SIG_SETMASK, nullptr, &g_program_mask);
    for (int s = 1; s < NSIG; ++s) ::sigaction(s, nullptr, &g_program_actions[s]);
}

pid_t fork_run(const RunRequest& request, const int* fds, int own_pidns, const ForkHooks& hooks,
               std::string& error) {
    // The next child is pid 1 of a new pid namespace: it sees neither the template nor any
    // other run, and everything it leaves dies with it.
    if (::unshare(CLONE_NEWPID) != 0) {
        error = std::string("cannot create the run's pid namespace: ") + std::strerror(errno);
        return -1;
    }
    if (hooks.before) hooks.before();
    pid_t pid = ::fork();
    if (pid == 0) {
        if (hooks.after_child) hooks.after_child();
        pid1::run_forked(request, fds, hooks);
        return 0;  // only the program gets here
    }
    int fork_errno = errno;
    if (hooks.after_parent) hooks.after_parent();
    // Back to our own pid namespace for the next run's unshare.
    if (::setns(own_pidns, CLONE_NEWPID) != 0) {
        // Later runs would not get a pid namespace of their own: the template ends here (the
        // server sees it go, and starts another for the next run).
        std::fprintf(stderr, "pyjail template: cannot return to its own pid namespace: %s\n",
                     std::strerror(errno));
        ::_exit(kExitJailError);
    }
    if (pid < 0) {
        error = std::string("cannot fork the template: ") + std::strerror(fork_errno);
        return -1;
    }
    return pid;
}

}  // namespace zygote

}  // namespace pyjail
