#include "seccomp.hpp"

#include <fmt/format.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <asm/ioctls.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <set>

#include "error.hpp"
#include "profile.hpp"

namespace pyjail {

namespace {

// Flags of clone() that create namespaces. CLONE_NEWTIME (0x80) is left out: in clone() that
// bit belongs to the exit signal, and the kernel accepts CLONE_NEWTIME only from clone3 and
// unshare, which are refused anyway.
constexpr std::uint64_t kCloneNewFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS |
                                         CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                         CLONE_NEWNET;

// Syscalls that are never allowed as such: a set that allows them gets argument checks.
bool is_checked_by_arguments(const std::string& name) {
    static const std::set<std::string> checked = {
        "clone", "socket", "socketpair", "ioctl", "personality", "chmod", "fchmod", "fchmodat",
        "fchmodat2", "open", "openat", "creat", "mknod", "mknodat", "openat2", "mbind",
        "set_mempolicy_home_node"};
    return checked.count(name) != 0;
}

// Mode bits a jail may never set on a file: a setuid or setgid file left in a writable bind
// is owned by the jail's host user and runs as that user for whoever starts it on the host.
// (S_ISVTX is harmless and stays allowed.)
constexpr std::uint64_t kSetIdBits = S_ISUID | S_ISGID;

// Flags of open() that create a file, and so use the mode argument.
constexpr std::uint64_t kOpenCreates = O_CREAT | __O_TMPFILE;

using Ctx = std::unique_ptr<void, void (*)(scmp_filter_ctx)>;

// Aligned blocks [value, value + ~mask] that together cover [lo, hi] of the 32-bit range,
// each as a 64-bit (mask, value) pair whose mask also demands a zero high half.
void cover(std::uint64_t lo, std::uint64_t hi, std::vector<std::pair<std::uint64_t, std::uint64_t>>& out) {
    while (lo <= hi) {
        std::uint64_t size = 1;
        while ((lo & (size * 2 - 1)) == 0 && lo + size * 2 - 1 <= hi && size < (1ULL << 32)) size *= 2;
        out.emplace_back(~(size - 1), lo);
        lo += size;
    }
}

void check(int rc, const std::string& what) {
    if (rc < 0) throw JailError("seccomp", "cannot build the filter: " + what, -rc);
}

bool allows(const SeccompSet& set, const char* name) {
    return std::binary_search(set.allow.begin(), set.allow.end(), std::string(name));
}

// Threads and processes, but no namespaces; sockets only of the families the network mode has.
void add_clone_and_socket_rules(scmp_filter_ctx ctx, const SeccompSet& set, NetMode net) {
    if (allows(set, "clone"))
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                               SCMP_A0_64(SCMP_CMP_MASKED_EQ, kCloneNewFlags, 0)),
              "clone");
    // glibc's fork and pthread_create try clone3 first and fall back to clone on ENOSYS.
    check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
    if (allows(set, "socket")) {
        std::vector<int> families = {AF_UNIX};
        if (net == NetMode::Loopback) families.insert(families.end(), {AF_INET, AF_INET6});
        for (int f : families)
            check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                                   SCMP_A0_64(SCMP_CMP_EQ, static_cast<std::uint64_t>(f))),
                  "socket");
    }
    if (allows(set, "socketpair"))
        // Only AF_UNIX, in every network mode: AF_INET has no socketpair (EOPNOTSUPP), and the
        // families that do (AF_TIPC) are kernel surface a Python program has no use for.
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1,
                               SCMP_A0_64(SCMP_CMP_EQ, static_cast<std::uint64_t>(AF_UNIX))),
              "socketpair");
}

// Files' modes: no call that sets a mode may set the setuid or setgid bits.
void add_file_mode_rules(scmp_filter_ctx ctx, const SeccompSet& set) {
    // chmod and friends only without the setuid/setgid bits (see kSetIdBits). The kernel reads
    // the mode as 16 bits; the mask looks at bits inside them, so junk in the high half
    // cannot hide a setuid bit.
    const std::pair<const char*, unsigned> mode_args[] = {
        {"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2}, {"creat", 1},
        {"mknod", 1}, {"mknodat", 2}};
    for (const auto& [name, arg] : mode_args) {
        if (!allows(set, name)) continue;
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, seccomp_syscall_resolve_name(name), 1,
                               scmp_arg_cmp{arg, SCMP_CMP_MASKED_EQ, kSetIdBits, 0}),
              name);
    }
    // open and openat create files too: the kernel strips S_ISGID in some cases but keeps
    // S_ISUID for the owner, so open("f", O_CREAT, 04755) would leave a setuid file. Allowed:
    // any open that creates nothing (its mode argument is unused, whatever it holds), or a
    // mode without the set-id bits.
    const std::pair<const char*, unsigned> open_args[] = {{"open", 1}, {"openat", 2}};
    for (const auto& [name, flags_arg] : open_args) {
        if (!allows(set, name)) continue;
        int nr = seccomp_syscall_resolve_name(name);
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                               scmp_arg_cmp{flags_arg, SCMP_CMP_MASKED_EQ, kOpenCreates, 0}),
              name);
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                               scmp_arg_cmp{flags_arg + 1, SCMP_CMP_MASKED_EQ, kSetIdBits, 0}),
              name);
    }
    // openat2's mode is in a struct the filter cannot read: ENOSYS, and callers (glibc never
    // uses it) fall back to openat, which is checked above.
    if (allows(set, "openat2"))
        check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0), "openat2");
}

// ioctl, NUMA memory policy and personality: allowed for what programs use, not for the
// requests that reach other processes' terminals, pages or execution domain.
void add_ioctl_numa_personality_rules(scmp_filter_ctx ctx, const SeccompSet& set) {
    if (allows(set, "ioctl")) {
        // Every request but TIOCSTI and TIOCLINUX. The kernel reads the request as 32 bits,
        // and libseccomp's range checks see all 64, so "anything but these two" is spelt
        // as masked matches of aligned blocks of 32-bit values with the high half zero: a
        // request with junk in the high half (still TIOCSTI to the kernel) matches none.
        for (const auto& [mask, value] : ioctl_allowed_blocks())
            check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
                                   SCMP_A1_64(SCMP_CMP_MASKED_EQ, mask, value)),
                  "ioctl");
    }
    // A process's own NUMA policy (numpy and OpenBLAS set one for their buffers) decides only
    // where its own future pages come from, inside the jail's memory limit. Moving pages that
    // exist is another matter: MPOL_MF_MOVE_ALL moves pages shared with other processes (the
    // host's page cache of the rootfs, other jails' pages), and MPOL_MF_MOVE runs the page
    // migration code, kernel surface nothing a jail runs needs; both are refused. The kernel
    // reads mbind's flags as an unsigned int, and callers leave junk above it (OpenBLAS passes
    // them through syscall(2)'s varargs): the rule compares the low 32 bits, all the kernel
    // sees.
    if (allows(set, "mbind"))
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mbind), 1,
                               SCMP_A5_32(SCMP_CMP_MASKED_EQ, ~static_cast<std::uint32_t>(MPOL_MF_STRICT), 0)),
              "mbind");
    // Its flags must be 0 today; a flag added later is refused until this rule names it.
    if (allows(set, "set_mempolicy_home_node"))
        check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(set_mempolicy_home_node), 1,
                               SCMP_A3_64(SCMP_CMP_EQ, 0)),
              "set_mempolicy_home_node");
    if (allows(set, "personality")) {
        // Querying is fine; switching (e.g. to READ_IMPLIES_EXEC or ADDR_NO_RANDOMIZE) is not.
        for (std::uint64_t v : {0xffffffffULL, 0ULL})
            check(seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                                   SCMP_A0_64(SCMP_CMP_EQ, v)),
                  "personality");
    }
}

Ctx build(const SeccompSet& set, NetMode net) {
    Ctx ctx(seccomp_init(SCMP_ACT_NOTIFY), seccomp_release);
    if (!ctx) throw JailError("seccomp", "cannot build the filter (libseccomp init)", ENOMEM);
    // Another architecture's entry points (int 0x80, x32) would bypass a filter written for
    // x86-64's syscall numbers: those calls kill the process.
    check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "badarch");
    check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2), "binary tree");

    for (const auto& name : set.allow) {
        if (is_checked_by_arguments(name)) continue;
        int nr = seccomp_syscall_resolve_name(name.c_str());
        check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0), name);
    }
    // The rest of the allowed calls, each with the checks of its arguments.
    add_clone_and_socket_rules(ctx.get(), set, net);
    add_file_mode_rules(ctx.get(), set);
    add_ioctl_numa_personality_rules(ctx.get(), set);
    return ctx;
}

// The filter libseccomp exported into a memfd, from its start, into `out`. Returns 0 or an
// errno: an unreadable export must not pass for an empty filter.
int memfd_text(int fd, std::string& out) {
    if (::lseek(fd, 0, SEEK_SET) != 0) return errno;
    char buf[8192];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return 0;
}

std::string export_with(const Ctx& ctx, int (*exporter)(const scmp_filter_ctx, int)) {
    int fd = ::memfd_create("pyjail-seccomp", MFD_CLOEXEC);
    if (fd < 0) throw JailError("seccomp", "memfd_create", errno);
    int rc = exporter(ctx.get(), fd);
    std::string out;
    int read_err = rc == 0 ? memfd_text(fd, out) : 0;
    ::close(fd);
    if (rc < 0) throw JailError("seccomp", "cannot export the filter", -rc);
    if (read_err != 0) throw JailError("seccomp", "cannot read the exported filter", read_err);
    return out;
}

}  // namespace

std::vector<std::pair<std::uint64_t, std::uint64_t>> ioctl_allowed_blocks() {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    const std::uint64_t denied[] = {TIOCSTI, TIOCLINUX};  // ascending
    std::uint64_t lo = 0;
    for (std::uint64_t d : denied) {
        if (d > lo) cover(lo, d - 1, out);
        lo = d + 1;
    }
    cover(lo, 0xffffffffULL, out);
    return out;
}

SeccompSet parse_seccomp_set(const std::string& set_text, const std::string& set_path,
                             const std::string& groups_text, const std::string& groups_path) {
    std::map<std::string, std::vector<std::string>> groups;
    for (const auto& e : parse_profile(groups_text, groups_path).entries) {
        for (const auto& name : e.values)
            if (seccomp_syscall_resolve_name(name.c_str()) == __NR_SCMP_ERROR)
                throw UsageError(fmt::format("{}:{}: group '{}': unknown syscall '{}'", groups_path,
                                             e.line, e.key, name));
        groups[e.key] = e.values;
    }
    SeccompSet set;
    set.name = set_path;
    std::set<std::string> allow, deny;
    for (const auto& e : parse_profile(set_text, set_path).entries) {
        std::set<std::string>* into = e.key == "allow" ? &allow : e.key == "deny" ? &deny : nullptr;
        if (into == nullptr)
            throw UsageError(fmt::format("{}:{}: unknown key '{}'", set_path, e.line, e.key),
                             "a seccomp set has `allow` and `deny` lists");
        for (const auto& item : e.values) {
            if (!item.empty() && item[0] == '@') {
                auto g = groups.find(item.substr(1));
                if (g == groups.end())
                    throw UsageError(fmt::format("{}:{}: no syscall group '{}' in {}", set_path,
                                                 e.line, item, groups_path));
                into->insert(g->second.begin(), g->second.end());
            } else if (seccomp_syscall_resolve_name(item.c_str()) == __NR_SCMP_ERROR) {
                throw UsageError(fmt::format("{}:{}: unknown syscall '{}'", set_path, e.line, item));
            } else {
                into->insert(item);
            }
        }
    }
    for (const auto& name : allow)
        if (deny.count(name) != 0)
            throw UsageError(fmt::format("{}: '{}' is both allowed and denied", set_path, name));
    // After the filter is installed the jail's pid 1 still hands its listener to pyjail,
    // starts the program, reaps it and reports how it ended (send(), which is sendto): a set
    // without these would deadlock (the refusal of a sendmsg cannot be answered before the
    // listener arrives), never start the program, or lose its exit status.
    std::string missing;
    for (const char* need : {"sendmsg", "sendto", "recvfrom", "close", "clone", "execve", "exit_group",
                             "wait4", "rt_sigaction", "rt_sigprocmask", "rt_sigtimedwait", "kill",
                             "openat", "dup2"})
        if (allow.count(need) == 0) missing += (missing.empty() ? "" : ", ") + std::string(need);
    if (!missing.empty())
        throw UsageError(fmt::format("{}: the set must allow {} (the jail itself needs them "
                                     "once the filter is in place)",
                                     set_path, missing));
    set.allow.assign(allow.begin(), allow.end());
    set.deny.assign(deny.begin(), deny.end());
    return set;
}

NetMode filter_net_mode(NetMode net) { return net == NetMode::Allow ? NetMode::Loopback : net; }

std::string seccomp_pfc(const SeccompSet& set, NetMode net) {
    return export_with(build(set, filter_net_mode(net)), seccomp_export_pfc);
}

std::vector<sock_filter> compile_seccomp(const SeccompSet& set, NetMode net) {
    std::string raw = export_with(build(set, filter_net_mode(net)), seccomp_export_bpf);
    std::vector<sock_filter> prog(raw.size() / sizeof(sock_filter));
    std::copy(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(prog.size() * sizeof(sock_filter)),
              reinterpret_cast<char*>(prog.data()));
    if (prog.empty()) throw JailError("seccomp", "the compiled filter is empty");
    return prog;
}

// Everything else a template's program may do: it runs only the rootfs's code, and sets its
// runs up (namespaces, mounts, `lo`, setns), which these do not touch.
const char* const kTemplateRefusedSyscalls[] = {
    "io_uring_setup", "io_uring_enter", "io_uring_register",  // a second syscall path
    "bpf", "perf_event_open", "userfaultfd",                  // kernel exploit surface
    "add_key", "request_key", "keyctl",                       // keyrings are not namespaced
    "ptrace", "process_vm_readv", "process_vm_writev",        // other processes' memory
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "acct", "swapon", "swapoff", "reboot", "quotactl", "syslog", "lookup_dcookie",
    "fanotify_init", "open_by_handle_at", "iopl", "ioperm", "uselib", "vhangup", nullptr};

std::vector<sock_filter> compile_template_filter() {
    // How it stacks: a run installs its own filter on top of this one, and the kernel runs
    // both and takes the stronger action. The run's filter hands what it refuses to the
    // supervisor through its listener (SECCOMP_RET_USER_NOTIF), and a filter stack may hold
    // only one listener: this filter has none, and must not notify. Its action is
    // SECCOMP_RET_TRACE, which with no tracer fails the call with ENOSYS, and which ranks
    // below USER_NOTIF: for a syscall both refuse, the run's supervisor still hears of it and
    // answers with the set's error, as in a fresh jail (SECCOMP_RET_ERRNO would outrank the
    // notification, and the refusal would be missing from the run's report). A tracer could
    // let such a call through, but no process under the filter can become one (ptrace is
    // refused to each of them): only the host user's own, outside the jail.
    Ctx ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
    if (!ctx) throw JailError("seccomp", "cannot build the template's filter (libseccomp init)", ENOMEM);
    check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "badarch");
    for (const char* const* name = kTemplateRefusedSyscalls; *name != nullptr; ++name) {
        int nr = seccomp_syscall_resolve_name(*name);
        if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
        check(seccomp_rule_add(ctx.get(), SCMP_ACT_TRACE(0), nr, 0), *name);
    }
    std::string raw = export_with(ctx, seccomp_export_bpf);
    std::vector<sock_filter> prog(raw.size() / sizeof(sock_filter));
    std::copy(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(prog.size() * sizeof(sock_filter)),
              reinterpret_cast<char*>(prog.data()));
    if (prog.empty()) throw JailError("seccomp", "the template's compiled filter is empty");
    return prog;
}

int seccomp_errno_for(const SeccompSet& set, int syscall_nr) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, syscall_nr);
    if (name == nullptr) return ENOSYS;
    std::string n(name);
    std::free(name);
    // Argument-checked syscalls that the set allows were refused for their arguments.
    if (std::binary_search(set.deny.begin(), set.deny.end(), n) ||
        (is_checked_by_arguments(n) && std::binary_search(set.allow.begin(), set.allow.end(), n)))
        return EPERM;
    return ENOSYS;
}

namespace {

// "A|B" of the names of the bits set in `value`, or "" when a bit outside `known` is set.
template <std::size_t N>
std::string flag_names(std::uint64_t value, const std::pair<std::uint64_t, const char*> (&known)[N]) {
    std::string names;
    for (const auto& [bit, n] : known) {
        if ((value & bit) == 0) continue;
        names += (names.empty() ? "" : "|") + std::string(n);
        value &= ~bit;
    }
    return value == 0 ? names : std::string();
}

}  // namespace

std::string describe_syscall(int syscall_nr, const std::uint64_t args[6]) {
    char* raw = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, syscall_nr);
    // Any number reaches the filter: a key per unknown number would let the jail choose
    // how many entries the report gets.
    if (raw == nullptr) return "unknown syscall";
    std::string name = raw;
    std::free(raw);
    if (name == "socket" || name == "socketpair") {
        static const std::map<std::uint64_t, const char*> families = {
            {AF_UNIX, "AF_UNIX"},     {AF_INET, "AF_INET"},     {AF_INET6, "AF_INET6"},
            {AF_NETLINK, "AF_NETLINK"}, {AF_PACKET, "AF_PACKET"}, {AF_VSOCK, "AF_VSOCK"},
            {AF_ALG, "AF_ALG"},       {AF_BLUETOOTH, "AF_BLUETOOTH"}, {AF_KEY, "AF_KEY"},
            {AF_XDP, "AF_XDP"}};
        auto it = families.find(args[0]);
        return fmt::format("{}({})", name, it != families.end() ? it->second : "other family");
    }
    if (name == "ioctl") {
        // The kernel reads the request as 32 bits: junk in the high half still means TIOCSTI.
        std::uint64_t req = args[1] & 0xffffffffULL;
        if (req == TIOCSTI) return "ioctl(TIOCSTI)";
        if (req == TIOCLINUX) return "ioctl(TIOCLINUX)";
        return "ioctl(other request)";
    }
    if (name == "clone") {
        static const std::pair<std::uint64_t, const char*> flags[] = {
            {CLONE_NEWUSER, "CLONE_NEWUSER"}, {CLONE_NEWNS, "CLONE_NEWNS"},
            {CLONE_NEWPID, "CLONE_NEWPID"},   {CLONE_NEWNET, "CLONE_NEWNET"},
            {CLONE_NEWIPC, "CLONE_NEWIPC"},   {CLONE_NEWUTS, "CLONE_NEWUTS"},
            {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}};
        std::string names = flag_names(args[0] & kCloneNewFlags, flags);
        return names.empty() ? "clone" : fmt::format("clone({})", names);
    }
    if (name == "mbind") {
        static const std::pair<std::uint64_t, const char*> flags[] = {
            {MPOL_MF_STRICT, "MPOL_MF_STRICT"}, {MPOL_MF_MOVE, "MPOL_MF_MOVE"},
            {MPOL_MF_MOVE_ALL, "MPOL_MF_MOVE_ALL"}};
        std::string names = flag_names(args[5] & 0xffffffffULL, flags);  // as the kernel reads them
        return fmt::format("mbind({})", names.empty() ? "other flags" : names);
    }
    if (name == "personality") {
        // A persona is PER_LINUX or PER_LINUX32 plus flags (<sys/personality.h>).
        static const std::pair<std::uint64_t, const char*> flags[] = {
            {PER_LINUX32, "PER_LINUX32"},
            {UNAME26, "UNAME26"},
            {ADDR_NO_RANDOMIZE, "ADDR_NO_RANDOMIZE"},
            {FDPIC_FUNCPTRS, "FDPIC_FUNCPTRS"},
            {MMAP_PAGE_ZERO, "MMAP_PAGE_ZERO"},
            {ADDR_COMPAT_LAYOUT, "ADDR_COMPAT_LAYOUT"},
            {READ_IMPLIES_EXEC, "READ_IMPLIES_EXEC"},
            {ADDR_LIMIT_32BIT, "ADDR_LIMIT_32BIT"},
            {SHORT_INODE, "SHORT_INODE"},
            {WHOLE_SECONDS, "WHOLE_SECONDS"},
            {STICKY_TIMEOUTS, "STICKY_TIMEOUTS"},
            {ADDR_LIMIT_3GB, "ADDR_LIMIT_3GB"}};
        std::string names = flag_names(args[0], flags);
        return fmt::format("personality({})", names.empty() ? "other" : names);
    }
    return name;
}

void DeniedCounts::add(const std::string& what, std::uint64_t n) {
    auto saturating_add = [](std::uint64_t& count, std::uint64_t k) {
        count = count > UINT64_MAX - k ? UINT64_MAX : count + k;
    };
    auto it = named_.find(what);
    if (it != named_.end()) saturating_add(it->second, n);
    else if (named_.size() < kMaxEntries) named_.emplace(what, n);
    else saturating_add(other_, n);  // the table is full: no new key, whatever the jail does
}

std::uint64_t DeniedCounts::total() const {
    std::uint64_t sum = other_;
    for (const auto& [what, n] : named_) sum = sum > UINT64_MAX - n ? UINT64_MAX : sum + n;
    return sum;
}

std::vector<std::pair<std::string, std::uint64_t>> DeniedCounts::entries() const {
    std::vector<std::pair<std::string, std::uint64_t>> out(named_.begin(), named_.end());
    if (other_ > 0) out.emplace_back(kOtherKey, other_);
    return out;
}

std::string summarize_denied(const DeniedCounts& denied) {
    std::string out;
    for (const auto& [what, n] : denied.entries())
        out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", what, n);
    return out;
}

}  // namespace pyjail
