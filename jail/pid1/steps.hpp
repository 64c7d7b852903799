// The set-up steps a jail's pid 1 takes, shared by the two ways a jail starts: cloned by the
// supervisor (child.cpp: a fresh jail) and forked from a template (forked_run.cpp: a run of
// `pyjail serve`). Both apply their mount plan with apply_mount_plan and their lock-down with
// lock_down: what differs between the two is only what comes before (namespaces, ids) and
// after (how the program starts). Each step either succeeds or reports {step, errno, message}
// on the report socket (`set_report_fd`) and exits; why each one is there is said where it is
// defined.
//
// These run in a copy of a single-threaded process (child.hpp says why that makes allocating
// safe), with the capabilities of the jail's user namespace until drop_capabilities.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "child_step.hpp"
#include "limits.hpp"
#include "lockdown.hpp"
#include "mountplan.hpp"

namespace pyjail::pid1 {

// Where failures (and "ready") are reported: the supervisor's sync socket. `never_wait`: each
// send fails rather than waits when the socket is full (a run from a template, whose template
// waits for its pid 1 until the exec).
void set_report_fd(int fd, bool never_wait = false) noexcept;
int report_fd() noexcept;
int report_send_flags() noexcept;  // MSG_DONTWAIT or 0, for every send on report_fd()

// Reports a failed step and exits with `exit_code`.
[[noreturn]] void fail(ChildStep step, int err, int exit_code, const char* fmt, ...) noexcept
    __attribute__((format(printf, 4, 5)));

void do_mount(ChildStep step, const char* src, const char* target, const char* type,
              unsigned long flags, const char* data);

// One op of a mount plan, at its target (relative to the current directory's root). `where`
// overrides the target (the new root, assembled on a staging directory); `sources`: the
// /proc/self/fd paths of the plan's opened sources; `content_fd`: what Copy ops copy.
void apply_mount_op(const MountOp& op, const MountPlan& plan, const std::vector<std::string>& sources,
                    int content_fd, const char* where);

// The whole mount plan, from a private / to the plan's working directory. A plan with a new
// root (an op whose target is "", a fresh jail's) assembles it on `staging_dir`, pivots into it
// and makes it read-only; a plan without one (a run from a template's) mounts below the root
// it has. `content_fd`: what Copy ops copy (the script), or -1. `source_mount_fds`: per source
// slot, a detached idmapped clone of the source to put in its place first, or -1 (or none).
void apply_mount_plan(const MountPlan& plan, const std::vector<int>& source_mount_fds, int content_fd,
                      const char* staging_dir);

// The jail's network namespace, before the lock-down: `net`, one made ahead for this jail
// alone (by the supervisor's helper, network_maker.hpp, or the template's spare), or, when
// there is none (-1), a new one of our own. Never the namespace pid 1 is in; a failure of
// either is `step`'s, and ends the run.
void enter_network(int net, ChildStep step);

// The lock-down, in its one order (lockdown.hpp), ending in the "ready" message. `stdio`: the
// fds to take as 0-2 (-1: keep); `keep`: the descriptors pid 1 keeps, moved to 3, 4, ...
// (close-on-exec), the first being the report socket; every other fd above 2 is closed.
void lock_down(const Lockdown& lockdown, const int (&stdio)[3], const int* keep, int keep_count);

// Blocks and handles the signals pid 1 takes (init.cpp); also after the reaper's exec.
void install_init_signals();

}  // namespace pyjail::pid1
