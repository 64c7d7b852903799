#include <doctest/doctest.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "error.hpp"
#include "seccomp.hpp"
#include "shipped_sets.hpp"

using namespace pyjail;

namespace {
SeccompSet python_set() {
    return parse_seccomp_set(slurp(kSeccompDir + "python.toml"), "python.toml", slurp(kSeccompDir + "groups.toml"),
                             "groups.toml");
}
bool has(const std::vector<std::string>& v, const char* n) {
    return std::binary_search(v.begin(), v.end(), std::string(n));
}
}  // namespace

TEST_CASE("the python set allows what CPython needs and denies the dangerous groups") {
    SeccompSet s = python_set();
    for (const char* n : {"read", "write", "openat", "mmap", "futex", "clone", "execve", "wait4",
                          "socket", "ioctl", "epoll_wait", "getrandom", "rseq"})
        CHECK_MESSAGE(has(s.allow, n), n);
    for (const char* n : {"ptrace", "process_vm_readv", "process_vm_writev", "bpf",
                          "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
                          "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root",
                          "chroot", "open_by_handle_at", "init_module", "finit_module",
                          "kexec_load", "reboot", "swapon", "acct", "quotactl",
                          "settimeofday", "clock_settime", "unshare", "setns"})
        CHECK_MESSAGE(has(s.deny, n), n);
    CHECK_FALSE(has(s.allow, "clone3"));
    CHECK(s.allow.size() > 150);
}

TEST_CASE("set errors name the file, the line and the name") {
    std::string groups = "g = [\"read\"]\n";
    CHECK_THROWS_WITH_AS(parse_seccomp_set("allow = [\"@nope\"]\n", "s.toml", groups, "g.toml"),
                         "s.toml:1: no syscall group '@nope' in g.toml", UsageError);
    CHECK_THROWS_WITH_AS(parse_seccomp_set("\nallow = [\"reed\"]\n", "s.toml", groups, "g.toml"),
                         "s.toml:2: unknown syscall 'reed'", UsageError);
    CHECK_THROWS_WITH_AS(parse_seccomp_set("allow = []\n", "s.toml", "g = [\"bogus\"]\n", "g.toml"),
                         "g.toml:1: group 'g': unknown syscall 'bogus'", UsageError);
    CHECK_THROWS_WITH_AS(parse_seccomp_set("allow = [\"read\"]\ndeny = [\"@g\"]\n", "s.toml", groups, "g.toml"),
                         "s.toml: 'read' is both allowed and denied", UsageError);
    CHECK_THROWS_AS(parse_seccomp_set("permit = []\n", "s.toml", groups, "g.toml"), UsageError);
    // A set that would leave the jail's own pid 1 unable to hand over its listener.
    CHECK_THROWS_WITH_AS(parse_seccomp_set("allow = [\"@g\"]\n", "s.toml", groups, "g.toml"),
                         "s.toml: the set must allow sendmsg, sendto, close, clone, execve, exit_group, "
                         "wait4, rt_sigaction, rt_sigprocmask, rt_sigtimedwait, kill, openat, dup2 "
                         "(the jail itself needs them once the filter is in place)",
                         UsageError);
}

TEST_CASE("the compiled filter (PFC)") {
    SeccompSet s = python_set();
    std::string pfc = seccomp_pfc(s, NetMode::None);
    if (const char* out = std::getenv("PYJAIL_DUMP_PFC")) std::ofstream(out) << pfc;
    // Default: notify the supervisor; other architectures: kill.
    CHECK(pfc.find("# default action\n  action 0x7fc00000;") != std::string::npos);  // NOTIFY
    CHECK(pfc.find("if ($arch == 3221225534)") != std::string::npos);  // AUDIT_ARCH_X86_64
    CHECK(pfc.find("action KILL_PROCESS") != std::string::npos);
    // x32 syscall numbers (0x40000000 and up) never reach the allow rules: the BPF checks
    // for them right after the architecture (PFC does not show that check).
    auto bpf = compile_seccomp(s, NetMode::None);
    CHECK(std::any_of(bpf.begin(), bpf.end(), [](const sock_filter& f) {
        return f.code == (BPF_JMP | BPF_JGE | BPF_K) && f.k == 0x40000000;
    }));
    CHECK(pfc.find("# filter for syscall \"clone3\"") != std::string::npos);
    CHECK(pfc.find("action ERRNO(38)") != std::string::npos);  // clone3 -> ENOSYS
    // socket: only AF_UNIX without the network.
    std::string loop = seccomp_pfc(s, NetMode::Loopback);
    CHECK(pfc.find("if ($a0.hi32 == 0)\n        if ($a0.lo32 == 2)") == std::string::npos);
    CHECK(loop.size() > pfc.size());
}

TEST_CASE("answers and descriptions of refused syscalls") {
    SeccompSet s = python_set();
    CHECK(seccomp_errno_for(s, SYS_ptrace) == EPERM);
    CHECK(seccomp_errno_for(s, SYS_socket) == EPERM);  // allowed by family only
    CHECK(seccomp_errno_for(s, SYS_add_key) == EPERM);
    CHECK(seccomp_errno_for(s, SYS_kcmp) == EPERM);
    CHECK(seccomp_errno_for(s, SYS_lookup_dcookie) == EPERM);
    CHECK(seccomp_errno_for(s, SYS_vserver) == ENOSYS);  // not named by the set
    std::uint64_t a[6] = {2, 1, 0, 0, 0, 0};
    CHECK(describe_syscall(SYS_socket, a) == "socket(AF_INET)");
    std::uint64_t i[6] = {0, 0x100005412ULL, 0, 0, 0, 0};
    CHECK(describe_syscall(SYS_ioctl, i) == "ioctl(TIOCSTI)");
    std::uint64_t c[6] = {0x10000000 | 17, 0, 0, 0, 0, 0};
    CHECK(describe_syscall(SYS_clone, c) == "clone(CLONE_NEWUSER)");
    CHECK(describe_syscall(SYS_ptrace, a) == "ptrace");
    DeniedCounts d;
    d.add("socket(AF_INET)", 2);
    d.add("ptrace");
    d.add("socket(AF_INET)");
    CHECK(summarize_denied(d) == "ptrace x1, socket(AF_INET) x3");
}

TEST_CASE("keys of refused syscalls never carry a value the jail chose") {
    auto key = [](long nr, std::uint64_t a0, std::uint64_t a1 = 0) {
        std::uint64_t args[6] = {a0, a1, 0, 0, 0, 0};
        return describe_syscall(static_cast<int>(nr), args);
    };
    CHECK(key(SYS_socket, 10) == "socket(AF_INET6)");
    CHECK(key(SYS_socket, 16) == "socket(AF_NETLINK)");
    CHECK(key(SYS_socket, 12345) == "socket(other family)");
    CHECK(key(SYS_socket, 0xffffffff00000002ULL) == "socket(other family)");
    CHECK(key(SYS_socketpair, 2) == "socketpair(AF_INET)");
    CHECK(key(SYS_socketpair, 999) == "socketpair(other family)");
    CHECK(key(SYS_ioctl, 0, 0x541C) == "ioctl(TIOCLINUX)");
    CHECK(key(SYS_ioctl, 0, 0x1deadbeefULL) == "ioctl(other request)");
    CHECK(key(SYS_personality, 0x10000000 + 77) == "personality(other)");
    CHECK(key(SYS_personality, 0x0040000) == "personality(ADDR_NO_RANDOMIZE)");
    CHECK(key(SYS_personality, 0x0400008) == "personality(PER_LINUX32|READ_IMPLIES_EXEC)");
    CHECK(key(SYS_personality, 0x0400009) == "personality(other)");  // PER_SVR4 base: not named
    CHECK(key(SYS_clone, 0x20000 | 0x40000000 | 17) == "clone(CLONE_NEWNS|CLONE_NEWNET)");
    CHECK(key(SYS_clone, 0x11) == "clone");
    CHECK(key(1000, 0) == "unknown syscall");
    CHECK(key(123456789, 0) == "unknown syscall");
    CHECK(key(-1, 0) == "unknown syscall");
}

TEST_CASE("the table of refused syscalls is bounded and its counts saturate") {
    DeniedCounts d;
    CHECK(d.empty());
    for (std::size_t i = 0; i < DeniedCounts::kMaxEntries + 100; ++i) d.add("call" + std::to_string(i));
    d.add("call0", 4);  // an entry that made it keeps counting
    auto e = d.entries();
    REQUIRE(e.size() == DeniedCounts::kMaxEntries + 1);
    CHECK(e.back() == std::pair<std::string, std::uint64_t>(DeniedCounts::kOtherKey, 100));
    CHECK(e.front() == std::pair<std::string, std::uint64_t>("call0", 5));
    CHECK(d.total() == DeniedCounts::kMaxEntries + 104);
    d.add("call0", UINT64_MAX);
    d.add("call0");
    d.add("never seen", UINT64_MAX);
    d.add("never seen again", 7);
    e = d.entries();
    CHECK(e.front().second == UINT64_MAX);
    CHECK(e.back().second == UINT64_MAX);
    CHECK(d.total() == UINT64_MAX);
    CHECK(e.size() == DeniedCounts::kMaxEntries + 1);
}

TEST_CASE("ioctl: every 32-bit request but TIOCSTI and TIOCLINUX, never with high bits") {
    auto blocks = ioctl_allowed_blocks();
    auto allowed = [&](std::uint64_t req) {
        return std::any_of(blocks.begin(), blocks.end(),
                           [&](const auto& b) { return (req & b.first) == b.second; });
    };
    CHECK_FALSE(allowed(0x5412));                // TIOCSTI
    CHECK_FALSE(allowed(0x541C));                // TIOCLINUX
    CHECK_FALSE(allowed(0x100005412ULL));        // TIOCSTI with junk the kernel ignores
    CHECK_FALSE(allowed(0xffffffff00005412ULL));
    CHECK_FALSE(allowed(0x100000000ULL));        // no high bits at all
    for (std::uint64_t r : {0x0ULL, 0x5401ULL, 0x5411ULL, 0x5413ULL, 0x541BULL, 0x541DULL,
                            0x5421ULL, 0x5451ULL, 0x80045430ULL, 0xffffffffULL})
        CHECK_MESSAGE(allowed(r), r);
    // Blocks do not overlap and are few enough to keep the filter small.
    CHECK(blocks.size() < 48);
    std::uint64_t total = 0;
    for (const auto& b : blocks) total += (~b.first & 0xffffffffULL) + 1;
    CHECK(total == (1ULL << 32) - 2);
}
