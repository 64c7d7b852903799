#include <doctest/doctest.h>
#include <linux/mempolicy.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "error.hpp"
#include "seccomp.hpp"
#include "shipped_sets.hpp"

using namespace pyjail;

namespace {
SeccompSet python_set() {
    return parse_seccomp_set(slurp(kSeccompDir + "python.toml"), "python.toml", slurp(kSeccompDir + "groups.toml"),
                             "groups.toml");
}
bool lists(const std::vector<std::string>& v, const char* n) {
    return std::binary_search(v.begin(), v.end(), std::string(n));
}

// The values of the first argument that the PFC rule of syscall `name` allows, sorted. The rule runs from its "# filter for syscall" comment to the
// next rule, `else` branch or default action, whatever the nesting depth of the tree.
std::vector<std::uint64_t> first_args_allowed(const std::string& pfc, const std::string& name) {
    std::vector<std::uint64_t> values;
    std::size_t at = pfc.find("# filter for syscall \"" + name + "\"");
    if (at == std::string::npos) return values;
    std::size_t line_end = pfc.find('\n', at);
    while (line_end != std::string::npos) {
        std::size_t start = line_end + 1;
        line_end = pfc.find('\n', start);
        std::string line = pfc.substr(start, line_end - start);
        std::string trimmed = line.substr(std::min(line.find_first_not_of(' '), line.size()));
        if (trimmed.rfind("# filter for syscall", 0) == 0 || trimmed.rfind("else", 0) == 0 ||
            trimmed.rfind("# default action", 0) == 0)
            break;
        const std::string check = "if ($a0.lo32 == ";
        if (trimmed.rfind(check, 0) == 0)
            values.push_back(std::stoull(trimmed.substr(check.size())));
    }
    std::sort(values.begin(), values.end());
    return values;
}
}  // namespace

TEST_CASE("the python set allows what CPython needs and denies the dangerous groups") {
    SeccompSet s = python_set();
    for (const char* n : {"read", "write", "openat", "mmap", "futex", "clone", "execve", "wait4",
                          "socket", "ioctl", "epoll_wait", "getrandom", "rseq"})
        CHECK_MESSAGE(lists(s.allow, n), n);
    for (const char* n : {"ptrace", "process_vm_readv", "process_vm_writev", "bpf",
                          "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
                          "keyctl", "add_key", "request_key", "mount", "umount2", "pivot_root",
                          "chroot", "open_by_handle_at", "init_module", "finit_module",
                          "kexec_load", "reboot", "swapon", "acct", "quotactl",
                          "settimeofday", "clock_settime", "unshare", "setns"})
        CHECK_MESSAGE(lists(s.deny, n), n);
    CHECK_FALSE(lists(s.allow, "clone3"));
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
                         "s.toml: the set must allow sendmsg, sendto, recvfrom, close, clone, execve, exit_group, "
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
    // socket: only AF_UNIX without the network; AF_INET and AF_INET6 too with loopback.
    std::string loop = seccomp_pfc(s, NetMode::Loopback);
    CHECK(first_args_allowed(pfc, "socket") == std::vector<std::uint64_t>{AF_UNIX});
    CHECK(first_args_allowed(loop, "socket") ==
          std::vector<std::uint64_t>{AF_UNIX, AF_INET, AF_INET6});
    CHECK(first_args_allowed(loop, "socketpair") == std::vector<std::uint64_t>{AF_UNIX});
}

TEST_CASE("first_args_allowed reads a syscall's rule out of PFC text") {
    // The helper the PFC checks above rely on, on PFC as libseccomp writes it: it must see
    // the values of the rule it is asked about, and only those.
    std::string pfc =
        "    # filter for syscall \"socket\" (41) [priority: 65533]\n"
        "    if ($syscall == 41)\n"
        "      if ($a0.hi32 == 0)\n"
        "        if ($a0.lo32 == 2)\n"
        "          action ALLOW;\n"
        "        if ($a0.lo32 == 1)\n"
        "          action ALLOW;\n"
        "    # filter for syscall \"socketpair\" (53) [priority: 65533]\n"
        "    if ($syscall == 53)\n"
        "      if ($a0.hi32 == 0)\n"
        "        if ($a0.lo32 == 1)\n"
        "          action ALLOW;\n"
        "  else # ($syscall <= 40)\n"
        "    if ($a0.lo32 == 10)\n";
    CHECK(first_args_allowed(pfc, "socket") == std::vector<std::uint64_t>{1, 2});
    CHECK(first_args_allowed(pfc, "socketpair") == std::vector<std::uint64_t>{1});
    CHECK(first_args_allowed(pfc, "connect").empty());
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

namespace {
// A classic-BPF interpreter for seccomp programs (the instructions libseccomp emits): what the
// kernel would answer for a syscall, so tests check the compiled program's behaviour rather
// than its text.
std::uint32_t run_filter(const std::vector<sock_filter>& prog, int nr, std::array<std::uint64_t, 6> args) {
    unsigned char data[64] = {};
    std::uint32_t arch = 0xC000003E;  // AUDIT_ARCH_X86_64
    std::memcpy(data, &nr, 4);
    std::memcpy(data + 4, &arch, 4);
    std::memcpy(data + 16, args.data(), 48);
    std::uint32_t a = 0, x = 0, mem[16] = {};
    for (std::size_t pc = 0; pc < prog.size(); ++pc) {
        const sock_filter& f = prog[pc];
        switch (f.code) {
            case BPF_LD | BPF_W | BPF_ABS: std::memcpy(&a, data + f.k, 4); break;
            case BPF_LD | BPF_MEM: a = mem[f.k]; break;
            case BPF_LDX | BPF_MEM: x = mem[f.k]; break;
            case BPF_ST: mem[f.k] = a; break;
            case BPF_STX: mem[f.k] = x; break;
            case BPF_MISC | BPF_TAX: x = a; break;
            case BPF_MISC | BPF_TXA: a = x; break;
            case BPF_ALU | BPF_AND | BPF_K: a &= f.k; break;
            case BPF_ALU | BPF_OR | BPF_K: a |= f.k; break;
            case BPF_JMP | BPF_JA: pc += f.k; break;
            case BPF_JMP | BPF_JEQ | BPF_K: pc += a == f.k ? f.jt : f.jf; break;
            case BPF_JMP | BPF_JGT | BPF_K: pc += a > f.k ? f.jt : f.jf; break;
            case BPF_JMP | BPF_JGE | BPF_K: pc += a >= f.k ? f.jt : f.jf; break;
            case BPF_JMP | BPF_JSET | BPF_K: pc += (a & f.k) != 0 ? f.jt : f.jf; break;
            case BPF_RET | BPF_K: return f.k;
            default: FAIL("instruction the test interpreter does not know: ", f.code); return 0;
        }
    }
    FAIL("the program ran off its end");
    return 0;
}
constexpr std::uint32_t kAllow = 0x7fff0000;  // SECCOMP_RET_ALLOW
constexpr std::uint32_t kNotify = 0x7fc00000;  // SECCOMP_RET_USER_NOTIF: refused by pyjail
}  // namespace

TEST_CASE("socketpair: only AF_UNIX, in every network mode") {
    for (NetMode net : {NetMode::None, NetMode::Loopback}) {
        auto bpf = compile_seccomp(python_set(), net);
        CHECK(run_filter(bpf, SYS_socketpair, {1, 1, 0, 0, 0, 0}) == kAllow);  // AF_UNIX
        for (std::uint64_t family : {2ULL, 10ULL, 30ULL /* AF_TIPC */, 0x100000001ULL})
            CHECK_MESSAGE(run_filter(bpf, SYS_socketpair, {family, 1, 0, 0, 0, 0}) == kNotify, family);
    }
    // socket still follows the network mode.
    CHECK(run_filter(compile_seccomp(python_set(), NetMode::None), SYS_socket, {2, 1, 0, 0, 0, 0}) == kNotify);
    CHECK(run_filter(compile_seccomp(python_set(), NetMode::Loopback), SYS_socket, {2, 1, 0, 0, 0, 0}) == kAllow);
    CHECK(seccomp_errno_for(python_set(), SYS_socketpair) == EPERM);
}

TEST_CASE("--net allow's filter is loopback's, whoever compiles it") {
    // A run from a template compiles its filter in the server from the policy's --net: under
    // allow it refused internet sockets, and the run reached none of its allowed hosts.
    CHECK(filter_net_mode(NetMode::Allow) == NetMode::Loopback);
    CHECK(filter_net_mode(NetMode::Loopback) == NetMode::Loopback);
    CHECK(filter_net_mode(NetMode::None) == NetMode::None);
    auto allow = compile_seccomp(python_set(), NetMode::Allow);
    auto loop = compile_seccomp(python_set(), NetMode::Loopback);
    CHECK(run_filter(allow, SYS_socket, {2, 1, 0, 0, 0, 0}) == kAllow);
    CHECK(run_filter(allow, SYS_socket, {10, 1, 0, 0, 0, 0}) == kAllow);
    REQUIRE(allow.size() == loop.size());
    for (std::size_t i = 0; i < allow.size(); ++i) {
        CHECK(allow[i].code == loop[i].code);
        CHECK(allow[i].k == loop[i].k);
    }
    CHECK(seccomp_pfc(python_set(), NetMode::Allow) == seccomp_pfc(python_set(), NetMode::Loopback));
}

TEST_CASE("no syscall may make a setuid or setgid file") {
    auto bpf = compile_seccomp(python_set(), NetMode::None);
    struct Case {
        int nr;
        unsigned mode_arg;
    };
    for (Case c : {Case{SYS_chmod, 1}, Case{SYS_fchmod, 1}, Case{SYS_fchmodat, 2}, Case{452 /* fchmodat2 */, 2},
                   Case{SYS_creat, 1}, Case{SYS_mknod, 1}, Case{SYS_mknodat, 2}}) {
        auto with_mode = [&](std::uint64_t mode) {
            std::array<std::uint64_t, 6> a{3, 0, 0, 0, 0, 0};
            a[c.mode_arg] = mode;
            return run_filter(bpf, c.nr, a);
        };
        CAPTURE(c.nr);
        CHECK(with_mode(0755) == kAllow);
        CHECK(with_mode(01777) == kAllow);  // the sticky bit is harmless
        CHECK(with_mode(0100644) == kAllow);  // mknod of a regular file
        CHECK(with_mode(04755) == kNotify);
        CHECK(with_mode(02755) == kNotify);
        CHECK(with_mode(06777) == kNotify);
        CHECK(with_mode(0x100004755ULL) == kNotify);  // junk above the 16 bits the kernel reads
        CHECK(seccomp_errno_for(python_set(), c.nr) == EPERM);
    }
    // open/openat: a mode matters only when the call creates (O_CREAT or O_TMPFILE).
    for (auto [nr, flags_arg] : {std::pair{SYS_open, 1u}, std::pair{SYS_openat, 2u}}) {
        auto call = [&](std::uint64_t flags, std::uint64_t mode) {
            std::array<std::uint64_t, 6> a{3, 0, 0, 0, 0, 0};
            a[flags_arg] = flags;
            a[flags_arg + 1] = mode;
            return run_filter(bpf, nr, a);
        };
        CAPTURE(nr);
        CHECK(call(O_RDONLY, 0) == kAllow);
        CHECK(call(O_RDONLY, 04755) == kAllow);  // no O_CREAT: the mode is unused
        CHECK(call(O_WRONLY | O_CREAT | O_TRUNC, 0644) == kAllow);
        CHECK(call(O_WRONLY | O_CREAT, 04755) == kNotify);
        CHECK(call(O_WRONLY | O_CREAT | O_EXCL, 02700) == kNotify);
        CHECK(call(O_TMPFILE | O_RDWR, 04700) == kNotify);
    }
    // openat2 keeps its mode in a struct: ENOSYS, so callers fall back to openat.
    CHECK(run_filter(bpf, 437 /* openat2 */, {3, 0, 0, 24, 0, 0}) == (0x00050000u | ENOSYS));
}

TEST_CASE("System V IPC and memfd_create are refused: no rlimit counts their memory") {
    SeccompSet s = python_set();
    auto bpf = compile_seccomp(s, NetMode::None);
    for (int nr : {SYS_shmget, SYS_shmat, SYS_msgget, SYS_msgsnd, SYS_semget, SYS_memfd_create}) {
        CHECK_MESSAGE(run_filter(bpf, nr, {0, 4096, 0, 0, 0, 0}) == kNotify, nr);
        CHECK_MESSAGE(seccomp_errno_for(s, nr) == EPERM, nr);
    }
    // Plain reading and writing are untouched.
    CHECK(run_filter(bpf, SYS_read, {0, 0, 0, 0, 0, 0}) == kAllow);
    CHECK(run_filter(bpf, SYS_mprotect, {0, 0, 0, 0, 0, 0}) == kAllow);
}

TEST_CASE("a template's own filter answers in the kernel, and ranks below a run's notification") {
    // Stacked under a run's filter, whose listener is the stack's one: it must never notify,
    // and its refusals (SECCOMP_RET_TRACE, ENOSYS without a tracer) must rank below the run's
    // SECCOMP_RET_USER_NOTIF, so that a call both refuse still reaches the run's supervisor.
    std::vector<sock_filter> prog = compile_template_filter();
    REQUIRE_FALSE(prog.empty());
    bool traces = false;
    for (const auto& insn : prog) {
        if (BPF_CLASS(insn.code) != BPF_RET) continue;
        std::uint32_t action = insn.k & SECCOMP_RET_ACTION_FULL;
        CHECK(action != SECCOMP_RET_USER_NOTIF);
        CHECK(action != SECCOMP_RET_ERRNO);
        traces = traces || action == SECCOMP_RET_TRACE;
    }
    CHECK(traces);
    CHECK(static_cast<std::int32_t>(SECCOMP_RET_USER_NOTIF) < static_cast<std::int32_t>(SECCOMP_RET_TRACE));
}

TEST_CASE("a process's own NUMA policy: allowed; moving pages: refused") {
    SeccompSet s = python_set();
    auto bpf = compile_seccomp(s, NetMode::None);
    auto mbind = [&](std::uint64_t flags) { return run_filter(bpf, SYS_mbind, {0x1000, 4096, 2, 0, 64, flags}); };
    CHECK(mbind(0) == kAllow);
    CHECK(mbind(MPOL_MF_STRICT) == kAllow);
    CHECK(mbind(MPOL_MF_MOVE) == kNotify);
    CHECK(mbind(MPOL_MF_MOVE_ALL) == kNotify);
    CHECK(mbind(MPOL_MF_STRICT | MPOL_MF_MOVE) == kNotify);
    CHECK(mbind(1 << 3) == kNotify);  // MPOL_MF_LAZY, and any flag to come
    // The kernel reads the flags as an unsigned int; OpenBLAS leaves junk above it.
    CHECK(mbind(0x7f0000000000ULL) == kAllow);
    CHECK(mbind(0x7f0000000000ULL | MPOL_MF_MOVE_ALL) == kNotify);
    CHECK(seccomp_errno_for(s, SYS_mbind) == EPERM);
    CHECK(run_filter(bpf, SYS_set_mempolicy, {2, 0, 64, 0, 0, 0}) == kAllow);
    CHECK(run_filter(bpf, SYS_get_mempolicy, {0, 0, 0, 0, 0, 0}) == kAllow);
    CHECK(run_filter(bpf, 450 /* set_mempolicy_home_node */, {0x1000, 4096, 0, 0, 0, 0}) == kAllow);
    CHECK(run_filter(bpf, 450, {0x1000, 4096, 0, 1, 0, 0}) == kNotify);
    for (int nr : {SYS_migrate_pages, SYS_move_pages}) {
        CHECK_MESSAGE(run_filter(bpf, nr, {0, 64, 0, 0, 0, 0}) == kNotify, nr);
        CHECK_MESSAGE(seccomp_errno_for(s, nr) == EPERM, nr);
    }
    const std::uint64_t move_all[6] = {0, 0, 0, 0, 0, MPOL_MF_MOVE_ALL | (1ULL << 40)};
    CHECK(describe_syscall(SYS_mbind, move_all) == "mbind(MPOL_MF_MOVE_ALL)");
    const std::uint64_t lazy[6] = {0, 0, 0, 0, 0, 1 << 3};
    CHECK(describe_syscall(SYS_mbind, lazy) == "mbind(other flags)");
}
