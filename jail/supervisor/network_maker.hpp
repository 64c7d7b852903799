// The jail's network namespace, made beside pid 1's set-up instead of in its clone.
//
// A network namespace costs the kernel about half a millisecond to make (its loopback, the
// per-namespace sysctl tables), the largest single step of a jail's start. Made by clone3, it
// delays pid 1 by that much; made here, by a helper that joins the jail's user namespace, it
// is ready by the time pid 1 has built its mount tree on another CPU, and pid 1 enters it
// (setns) before its lock-down. The namespace is owned by the jail's user namespace either way,
// and nothing of the program runs before pid 1 is in it.
#pragma once

#include <sys/types.h>

namespace pyjail::supervisor {

// Made by the supervisor right after the jail's id maps are in: a helper sharing our memory
// (CLONE_VM | CLONE_VFORK, as posix_spawn starts a program: nothing is copied, and we wait
// the half millisecond while pid 1 works) enters the user namespace of `jail_pidfd`, makes a
// network namespace there and sends it to pid 1 over `sync_fd`. Every failure is sent instead
// (NetworkHandoff::err), and pid 1 makes its own namespace as a run from a template does
// without a spare: the isolation is the same, only the time differs. Never throws.
void send_jail_network(int jail_pidfd, int sync_fd) noexcept;

}  // namespace pyjail::supervisor
