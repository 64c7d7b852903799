// The set-up steps a jail's pid 1 takes, shared by the two ways a jail starts: cloned by the
// supervisor (child.cpp: a fresh jail) and forked from a template (forked_run.cpp: a run of
// `pyjail serve`). Each step either succeeds or reports {step, errno, message} on the report
// socket (`set_report_fd`) and exits; why each one is there is said where it is defined.
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
#include "mountplan.hpp"

namespace pyjail::pid1 {

// Where failures (and "ready") are reported: the supervisor's sync socket.
void set_report_fd(int fd) noexcept;
int report_fd() noexcept;

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

void set_hostname(const std::string& hostname);
void set_up_network(bool loopback_up);
void set_rlimits(const std::vector<RlimitValue>& rlimits);
// dup2 of each fd >= 0 onto 0, 1, 2.
void take_stdio(const int (&fds)[3]);
void new_session();
// Moves the report socket to fd 3 (close-on-exec) and closes every other fd above 2.
void close_inherited_fds();
void drop_capabilities();
// A template's instead (child.hpp: ChildPlan::template_capabilities).
void keep_template_capabilities();
void set_no_new_privs();
void join_new_keyring();
// Returns the filter's listener, or -1 without a filter.
int install_seccomp(const std::vector<sock_filter>& filter);
void install_init_signals();
// The "ready" message, with the filter's listener (closed here).
void send_ready(int listener);

}  // namespace pyjail::pid1
