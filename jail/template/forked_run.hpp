// A run from a template: the template (a jailed interpreter that has imported trusted modules
// and waits, `pyjail serve`) forks, and the fork becomes a jail of its own before any byte of
// the run's program exists in it. Called by the template's extension module
// (template/module.cpp), which supplies the interpreter's fork hooks.
//
//   template (namespace template_)     run's pid 1 (pid1::)               the program
//   unshare(CLONE_NEWPID); clone       shares the template's memory (no
//   (CLONE_VM | CLONE_VFORK): waits -> copy): joins the run's cgroup leaf;
//                                      new mount, net, ipc, uts, cgroup
//                                      namespaces; its own /tmp, /work,
//                                      /dev/shm, /dev/pts, /proc (masked);
//                                      hostname, lo, rlimits, stdio,
//                                      setsid, close fds, drop every
//                                      capability, no_new_privs, keyring,
//                                      the run's filter, "ready"; fork -> the one copy of the
//                                      exec pyjail-reaper (init.cpp)       template: back into
//   resumes at the exec; back to its   reaps and reports                  its frame, waits until
//   own pid namespace (setns); reply                                      the reaper is
//   {pid, pidfd}                                                          undumpable, runs
//
// The same mount plan and lock-down steps as a fresh jail's (steps.cpp: apply_mount_plan,
// lock_down), from the same plan the client computed (run_plans.cpp); what
// differs is documented in man pyjail(1), TEMPLATES: the user namespace, the rootfs mount and
// the interpreter's state at fork (address-space layout, hash seed) are the template's.
#pragma once

#include <sys/types.h>

#include <string>

#include "run_request.hpp"

namespace pyjail::template_ {

// The interpreter's own fork bookkeeping (CPython's PyOS_BeforeFork and friends): its locks,
// and the at-fork hooks that reseed `random`.
struct ForkHooks {
    void (*before)() = nullptr;
    void (*after_parent)() = nullptr;
    void (*after_child)() = nullptr;
};

// The template's capabilities (steps.cpp, keep_template_capabilities: SYS_ADMIN, NET_ADMIN and
// SETPCAP of its own user namespace) reach its interpreter effective, and ambient. Called
// before the interpreter runs any module of the rootfs that could use them (the .pth files
// site processes, the preloads; pyjail_template.py): they stay permitted only, and fork_run
// makes them effective only while it sets a run up. Returns 0 or an errno.
int lower_capabilities();

// Called once when the template starts, before it changes any signal: the dispositions and
// mask each run's program starts with (the interpreter's own handlers, e.g. SIGINT's).
void save_program_signals();

// The reaper's binary (pyjail-reaper, template/reaper.cpp), opened O_PATH when the template
// starts: each run's pid 1 execs it once the program is forked.
void set_reaper(int fd);

// Makes the next run's network namespace now, while the template waits (`own_net`: an fd of
// the template's own), if none is ready: fork_run hands it to that one run, and no other.
void make_spare_network(int own_net);

// Forks `request`'s run. `fds` as request_fd_count says: report socket, fds 0-2, [script],
// [cgroup.procs]; `own_pidns` an fd of the template's pid namespace. Returns the run's pid 1
// (> 0) in the template, -1 with `error` set if it could not fork, and 0 in the run's program,
// ready to run. The run's pid 1 never returns.
pid_t fork_run(const RunRequest& request, const int* fds, int own_pidns, const ForkHooks& hooks,
               std::string& error);

}  // namespace pyjail::template_
