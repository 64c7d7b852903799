// The seccomp filter: a syscall allowlist defined as data (profiles/seccomp/), compiled to
// BPF in the supervisor before the jail exists, installed by the child as its last step.
//
// Every syscall the set does not allow goes to the supervisor as a user notification, which
// records it (name, count, the argument that decided it) and answers with the error: EPERM
// for syscalls the set denies by name, ENOSYS for the ones it does not know. clone3 fails
// with ENOSYS directly (glibc then falls back to clone, whose flags the filter can check).
// Syscalls of other architectures (i386 via int 0x80, x32) kill the process.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policy.hpp"

namespace pyjail {

// Raised whenever build() turns a set into other rules (a new argument check), so a filter
// compiled by an older build of the same version is never loaded (compiled_filter.hpp).
// 2: socketpair, chmod, open and mknod argument checks; openat2 fails with ENOSYS.
// 3: mbind and set_mempolicy_home_node argument checks (a process's own NUMA policy).
constexpr int kSeccompRulesRevision = 3;

struct SeccompSet {
    std::string name;                // as chosen: "python", a file path, or "off"
    bool off = false;
    std::vector<std::string> allow;  // sorted, unique syscall names
    std::vector<std::string> deny;
};

// Reads a set (its `allow` and `deny` lists of syscall names and @groups) against the groups
// file. Throws UsageError naming the file, line and the unknown name.
SeccompSet parse_seccomp_set(const std::string& set_text, const std::string& set_path,
                             const std::string& groups_text, const std::string& groups_path);

// The network mode a filter is made for: --net allow filters sockets as loopback does (what a
// socket can reach is decided by the network namespace: only lo, and pyjail's listeners). Every
// filter is compiled, precompiled and looked up for this mode, so a fresh jail and a run from
// a template under the same --net get the same filter.
NetMode filter_net_mode(NetMode net);

// The filter for a set and a network mode (the run's --net: filter_net_mode applies), as
// libseccomp's PFC text (for tests and review).
std::string seccomp_pfc(const SeccompSet& set, NetMode net);

// The filter as BPF, ready for seccomp(SECCOMP_SET_MODE_FILTER), for the run's --net
// (filter_net_mode applies). Throws JailError.
std::vector<sock_filter> compile_seccomp(const SeccompSet& set, NetMode net);

// A template's own filter (`pyjail serve`), under its runs' filters: the syscalls no template
// needs -- kernel surface a rootfs's module imported by the template (a .pth file, a preload)
// could otherwise reach with the template's capabilities, and which no run may make either.
// It answers in the kernel and has no listener (seccomp.cpp says why, and how it stacks with a
// run's filter). Throws JailError.
std::vector<sock_filter> compile_template_filter();
extern const char* const kTemplateRefusedSyscalls[];

// What the supervisor answers a notified syscall with: EPERM when the set denies it by name,
// ENOSYS otherwise.
int seccomp_errno_for(const SeccompSet& set, int syscall_nr);

// "socket(AF_INET)", "ioctl(TIOCSTI)", "clone(CLONE_NEWUSER)", "ptrace" -- for the report.
// Only names and known constants, never a raw value the jail chose: each distinct key costs
// the host a table entry, and the jail picks the arguments ("socket(other family)",
// "personality(other)", "unknown syscall" for a number no table names).
std::string describe_syscall(int syscall_nr, const std::uint64_t args[6]);

// The (mask, value) pairs of ioctl requests the filter allows: every 32-bit request but
// TIOCSTI and TIOCLINUX, with the high half zero. Exposed for tests.
std::vector<std::pair<std::uint64_t, std::uint64_t>> ioctl_allowed_blocks();

// Denied syscalls by description: at most kMaxEntries named entries; what comes after they
// are taken is counted in one more entry, kOtherKey. The jail decides how many distinct
// calls it makes, so the table must not grow with them (a million distinct keys once cost
// the supervisor 700 MB). Counts saturate at the largest std::uint64_t.
class DeniedCounts {
public:
    static constexpr std::size_t kMaxEntries = 32;
    static constexpr const char* kOtherKey = "(other syscalls)";

    void add(const std::string& what, std::uint64_t n = 1);
    bool empty() const { return named_.empty() && other_ == 0; }
    std::uint64_t total() const;
    // The named entries in key order, then kOtherKey if anything was folded into it.
    std::vector<std::pair<std::string, std::uint64_t>> entries() const;

private:
    std::map<std::string, std::uint64_t> named_;
    std::uint64_t other_ = 0;
};

std::string summarize_denied(const DeniedCounts& denied);

}  // namespace pyjail
