#include "run_request.hpp"

#include <sys/resource.h>

#include <string.h>  // explicit_bzero

#include <cmath>
#include <cstring>

#include "error.hpp"
#include "policy.hpp"

namespace pyjail {

namespace {

// 2: the command travels parsed (command.hpp's PythonCommand), not as argv.
constexpr std::string_view kMagic = "PYJAIL-RUN/2";
constexpr std::uint32_t kMaxItems = 4096;        // argv, env, rlimits, mounts, cgroup files
constexpr std::uint32_t kMaxFilter = 4096;       // BPF_MAXINSNS
constexpr std::uint32_t kMaxPins = 256;          // --net-resolve entries
constexpr std::uint32_t kMaxPythonOptions = 256; // python's own options, as -W -W -W ...

class Writer {
public:
    void u32(std::uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void u64(std::uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void str(std::string_view s) {
        u32(static_cast<std::uint32_t>(s.size()));
        out_.append(s);
    }
    void strs(const std::vector<std::string>& v) {
        u32(static_cast<std::uint32_t>(v.size()));
        for (const auto& s : v) str(s);
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

// Every read is bounds-checked; a short or inconsistent message is a BadRequest, never a read
// past its end.
class Reader {
public:
    explicit Reader(std::string_view in) : in_(in) {}
    std::uint32_t u32() {
        std::uint32_t v;
        take(&v, sizeof v);
        return v;
    }
    std::uint64_t u64() {
        std::uint64_t v;
        take(&v, sizeof v);
        return v;
    }
    std::string str(const char* what) {
        std::uint32_t n = u32();
        if (n > in_.size() - pos_) throw BadRequest(std::string(what) + " runs past the end of the request");
        std::string s(in_.substr(pos_, n));
        pos_ += n;
        if (s.find('\0') != std::string::npos) throw BadRequest(std::string(what) + " holds a NUL byte");
        return s;
    }
    std::uint32_t count(const char* what, std::uint32_t max) {
        std::uint32_t n = u32();
        if (n > max) throw BadRequest(std::string("too many ") + what);
        return n;
    }
    std::vector<std::string> strs(const char* what) {
        std::vector<std::string> v(count(what, kMaxItems));
        for (auto& s : v) s = str(what);
        return v;
    }
    bool done() const { return pos_ == in_.size(); }

private:
    void take(void* out, std::size_t n) {
        if (n > in_.size() - pos_) throw BadRequest("the request is cut short");
        std::memcpy(out, in_.data() + pos_, n);
        pos_ += n;
    }
    std::string_view in_;
    std::size_t pos_ = 0;
};

// A run's mount target: below the run's own directories, relative, no "..".
bool run_target_ok(const std::string& t) {
    if (t.empty() || t.front() == '/' || t.back() == '/') return false;
    std::size_t start = 0;
    while (start <= t.size()) {
        auto end = t.find('/', start);
        if (end == std::string::npos) end = t.size();
        std::string_view part(t.data() + start, end - start);
        if (part.empty() || part == "." || part == "..") return false;
        start = end + 1;
    }
    return true;
}

// The directories a run from a template makes its own; everything else is the template's
// root (the rootfs, read-only).
bool is_run_private(const std::string& t) {
    for (std::string_view top : {"tmp", "work", "proc", "dev/shm", "dev/pts"})
        if (t == top || (t.size() > top.size() && t.compare(0, top.size(), top) == 0 && t[top.size()] == '/'))
            return true;
    return false;
}

// Seconds travel as the bits of a double; a decoded one is a number of seconds a comparison
// can order (NaN compares false with everything: it would pass every bound).
std::uint64_t seconds_bits(double s) {
    std::uint64_t v;
    std::memcpy(&v, &s, sizeof v);
    return v;
}

double seconds_from_bits(std::uint64_t bits, const char* what) {
    double s;
    std::memcpy(&s, &bits, sizeof s);
    if (!std::isfinite(s) || s < 0) throw BadRequest(std::string(what) + " is not a number of seconds");
    return s;
}

// The program, as the client's parser left it: a kind the template runs, a target that kind
// has, and only options the template honours (what it cannot, it must not pretend to).
void decode_command(Reader& in, PythonCommand& c) {
    std::uint32_t kind = in.u32();
    if (kind > static_cast<std::uint32_t>(PythonKind::Stdin)) throw BadRequest("an unknown kind of command");
    c.kind = static_cast<PythonKind>(kind);
    c.target = in.str("the command's target");
    if ((c.kind == PythonKind::File || c.kind == PythonKind::Module) && c.target.empty())
        throw BadRequest("a script or module without a name");
    if (c.kind == PythonKind::Stdin && !c.target.empty()) throw BadRequest("a program from stdin with a target");
    c.args = in.strs("the command's arguments");
    c.options.resize(in.count("interpreter options", kMaxPythonOptions));
    for (auto& o : c.options) {
        std::uint32_t letter = in.u32();
        o.letter = letter < 128 ? static_cast<char>(letter) : '\0';
        o.value = in.str("an interpreter option's value");
        if (o.letter == '\0' || !template_option_refusal(o).empty())
            throw BadRequest("an interpreter option a run from a template cannot honour");
        if (o.letter != 'W' && o.letter != 'X' && !o.value.empty())
            throw BadRequest("a value for an interpreter option that takes none");
    }
}

// --net allow's part of a request: the policy, checked as the command line's is, and the
// sockets the run's pid 1 is to bind, which must be the ones that policy plans.
// Attack: a request whose sockets are not its policy's (a listener for a host the server's
// allowlist never saw, or thousands of them) passing the server's check of the policy.
void decode_egress(Reader& in, RunRequest& r) {
    EgressPolicy& e = r.egress;
    auto checked = [](auto&& f) {
        try {
            f();
        } catch (const UsageError& u) {
            throw BadRequest(std::string("egress: ") + u.what());
        }
    };
    e.hosts.resize(in.count("allowed hosts", kMaxAllowHosts));
    for (auto& h : e.hosts) {
        std::string name = in.str("an allowed host");
        checked([&] { h = parse_allow_host(name, "the request"); });
        if (h.name != name) throw BadRequest("an allowed host not in its plain form: " + name);
        h.ports.resize(in.count("ports of an allowed host", kMaxPortsPerHost));
        for (auto& port : h.ports) {
            std::uint32_t v = in.u32();
            if (v == 0 || v > 65535) throw BadRequest("an allowed host's port out of range");
            port = static_cast<std::uint16_t>(v);
        }
        if (h.ports.empty()) throw BadRequest("an allowed host without a port");
        h.origin = "the request";
    }
    e.pins.resize(in.count("pinned names", kMaxPins));
    for (auto& p : e.pins) {
        std::string name = in.str("a pinned name");
        std::string address = in.str("a pinned address");
        checked([&] { p = parse_net_resolve(name + ":" + address, "the request"); });
    }
    const bool has_bytes = in.u32() != 0;
    const std::uint64_t bytes = in.u64();
    if (has_bytes) e.bytes = bytes;
    std::string dns_server = in.str("the resolver");
    std::uint32_t dns_port = in.u32();
    if (dns_port == 0 || dns_port > 65535) throw BadRequest("the resolver's port out of range");
    if (!dns_server.empty())
        checked([&] { parse_net_dns(dns_server + ":" + std::to_string(dns_port), "the request", e); });
    auto& sockets = r.lockdown.egress_sockets;
    sockets.resize(in.count("egress sockets", kMaxListeners + 1));
    for (auto& sock : sockets) {
        sock.address = in.u32();
        std::uint32_t port = in.u32();
        if (port == 0 || port > 65535) throw BadRequest("an egress socket's port out of range");
        sock.port = static_cast<std::uint16_t>(port);
        sock.udp = in.u32() != 0;
    }
    const bool allow = r.net == static_cast<std::uint32_t>(NetMode::Allow);
    if (!allow) {
        if (!e.hosts.empty() || !e.pins.empty() || e.bytes || e.dns_server || !sockets.empty())
            throw BadRequest("egress settings without --net allow");
        return;
    }
    if (e.hosts.empty()) throw BadRequest("--net allow without an allowed host");
    checked([&] { check_egress_policy(e); });
    const auto planned = egress_socket_specs(plan_egress(e));
    bool same = planned.size() == sockets.size();
    for (std::size_t i = 0; same && i < planned.size(); ++i)
        same = planned[i].address == sockets[i].address && planned[i].port == sockets[i].port &&
               planned[i].udp == sockets[i].udp;
    if (!same) throw BadRequest("egress sockets that are not the allowed hosts' own");
}

}  // namespace

const char* rlimit_name(int resource) {
    switch (resource) {
        case RLIMIT_CORE: return "RLIMIT_CORE";
        case RLIMIT_NOFILE: return "RLIMIT_NOFILE";
        case RLIMIT_RTPRIO: return "RLIMIT_RTPRIO";
        case RLIMIT_NICE: return "RLIMIT_NICE";
        case RLIMIT_MEMLOCK: return "RLIMIT_MEMLOCK";
        case RLIMIT_SIGPENDING: return "RLIMIT_SIGPENDING";
        case RLIMIT_DATA: return "RLIMIT_DATA";
        case RLIMIT_NPROC: return "RLIMIT_NPROC";
        case RLIMIT_CPU: return "RLIMIT_CPU";
        case RLIMIT_FSIZE: return "RLIMIT_FSIZE";
        case RLIMIT_AS: return "RLIMIT_AS";
        case RLIMIT_STACK: return "RLIMIT_STACK";
        default: return nullptr;
    }
}

int request_fd_count(const RunRequest& r) {
    return 4 + (r.has_script ? 1 : 0) + (r.into_cgroup ? 1 : 0) + static_cast<int>(r.binds);
}

namespace {

// python's command line, parsed by the client (command.hpp).
void encode_command(Writer& w, const PythonCommand& c) {
    w.u32(static_cast<std::uint32_t>(c.kind));
    w.str(c.target);
    w.strs(c.args);
    w.u32(static_cast<std::uint32_t>(c.options.size()));
    for (const auto& o : c.options) {
        w.u32(static_cast<unsigned char>(o.letter));
        w.str(o.value);
    }
}

// --net allow: the run's egress policy, and the sockets its pid 1 binds for it.
void encode_egress(Writer& w, const EgressPolicy& e, const std::vector<EgressSocketSpec>& sockets) {
    w.u32(static_cast<std::uint32_t>(e.hosts.size()));
    for (const auto& h : e.hosts) {
        w.str(h.name);
        w.u32(static_cast<std::uint32_t>(h.ports.size()));
        for (auto port : h.ports) w.u32(port);
    }
    w.u32(static_cast<std::uint32_t>(e.pins.size()));
    for (const auto& p : e.pins) {
        w.str(p.name);
        w.str(dns::format_ipv4(p.address));
    }
    w.u32(e.bytes ? 1 : 0);
    w.u64(e.bytes.value_or(0));
    w.str(e.dns_server ? dns::format_ipv4(*e.dns_server) : std::string());
    w.u32(e.dns_port);
    w.u32(static_cast<std::uint32_t>(sockets.size()));
    for (const auto& sock : sockets) {
        w.u32(sock.address);
        w.u32(sock.port);
        w.u32(sock.udp ? 1 : 0);
    }
}

}  // namespace

std::string encode_request(const RunRequest& r) {
    Writer w;
    w.str(kMagic);
    encode_command(w, r.command);
    w.strs(r.env);
    // The lock-down's fields and the mount plan's keep their places of version 1.
    const Lockdown& lock = r.lockdown;
    w.str(r.mounts.cwd);
    w.str(lock.hostname);
    w.u32(lock.loopback_up ? 1 : 0);
    w.u32(static_cast<std::uint32_t>(lock.rlimits.size()));
    for (const auto& l : lock.rlimits) {
        w.u32(static_cast<std::uint32_t>(l.resource));
        w.u64(l.value);
        w.u64(l.hard);
    }
    w.u32(static_cast<std::uint32_t>(r.mounts.ops.size()));
    for (const auto& op : r.mounts.ops) {
        w.u32(static_cast<std::uint32_t>(op.kind));
        w.str(op.target);
        w.str(op.source_path);
        w.u64(op.flags);
        w.str(op.data);
        w.u32(op.mode);
        w.u32(op.if_exists ? 1 : 0);
    }
    w.u32(static_cast<std::uint32_t>(lock.seccomp_filter.size()));
    for (const auto& f : lock.seccomp_filter) {
        w.u32(f.code);
        w.u32(static_cast<std::uint32_t>(f.jt) | static_cast<std::uint32_t>(f.jf) << 8);
        w.u32(f.k);
    }
    w.u32(static_cast<std::uint32_t>(r.cgroup_files.size()));
    for (const auto& [file, value] : r.cgroup_files) {
        w.str(file);
        w.str(value);
    }
    w.str(r.rootfs);
    w.u32((r.has_script ? 1u : 0u) | (r.into_cgroup ? 2u : 0u));
    w.strs(r.seccomp_allow);
    w.u32(r.net);
    w.u64(seconds_bits(r.wall_time));
    w.u64(seconds_bits(r.cpu_time));
    w.u64(r.output);
    // The host binds: which op mounts each handed-over tree, in the order of their slots.
    w.u32(r.files_uid);
    w.u32(r.files_gid);
    w.u32(r.binds);
    for (std::uint32_t k = 0; k < r.binds; ++k)
        for (std::size_t i = 0; i < r.mounts.ops.size(); ++i)
            if (r.mounts.ops[i].kind == OpKind::Bind &&
                r.mounts.ops[i].source_slot == kFirstHandedSlot + static_cast<int>(k))
                w.u32(static_cast<std::uint32_t>(i));
    encode_egress(w, r.egress, lock.egress_sockets);
    return w.take();
}

void wipe_request(RunRequest& r) {
    // explicit_bzero: the compiler may not drop the stores to memory about to be freed.
    auto wipe = [](std::string& s) { ::explicit_bzero(s.data(), s.size()); };
    wipe(r.command.target);
    for (auto& s : r.command.args) wipe(s);
    for (auto& o : r.command.options) wipe(o.value);
    for (auto& s : r.env) wipe(s);
    wipe(r.mounts.cwd);
    wipe(r.lockdown.hostname);
    for (auto& op : r.mounts.ops) {
        wipe(op.target);
        wipe(op.source_path);
        wipe(op.data);
    }
    for (auto& [file, value] : r.cgroup_files) {
        wipe(file);
        wipe(value);
    }
    for (auto& src : r.mounts.sources) wipe(src.host_path);
    wipe(r.rootfs);
    for (auto& h : r.egress.hosts) wipe(h.name);
    for (auto& p : r.egress.pins) wipe(p.name);
}

namespace {

// The mount ops, each held to the run's own directories.
void decode_mount_ops(Reader& in, RunRequest& r) {
    r.mounts.ops.resize(in.count("mounts", kMaxItems));
    for (auto& op : r.mounts.ops) {
        std::uint32_t kind = in.u32();
        if (kind > static_cast<std::uint32_t>(OpKind::Copy)) throw BadRequest("an unknown mount op");
        op.kind = static_cast<OpKind>(kind);
        op.target = in.str("a mount target");
        op.source_path = in.str("a mount source");
        op.flags = in.u64();
        op.data = in.str("mount options");
        op.mode = in.u32() & 07777;
        op.if_exists = in.u32() != 0;
        // A run mounts only over its own directories, and binds only from within the jail:
        // whatever sent this cannot make the template's run cover or expose anything else.
        if (!run_target_ok(op.target) || !is_run_private(op.target))
            throw BadRequest("a mount outside the run's own directories: /" + op.target);
        // Bind sources are the template's own paths (its root is all a run can name): one
        // of the run's directories, or a device the template has (the /proc masks); or none,
        // a tree the client hands over (checked with the list of them, below).
        if (op.kind == OpKind::Bind && op.source_path.find("..") != std::string::npos)
            throw BadRequest("a bind from an unusable source: " + op.source_path);
        if (op.kind == OpKind::Symlink) throw BadRequest("a symlink op in a run");
        op.source_slot = op.kind == OpKind::Copy ? 1 : -1;
    }
}

// The host binds: which of the binds from nothing take the trees the client hands over.
void decode_host_binds(Reader& in, RunRequest& r) {
    r.binds = in.count("host binds", kMaxRunBinds);
    // Slot 0 (the rootfs) and 1 (the script) are never opened by a run (kFirstHandedSlot).
    r.mounts.sources.assign(kFirstHandedSlot, SourceRef{"", true});
    for (std::uint32_t k = 0; k < r.binds; ++k) {
        std::uint32_t i = in.u32();
        if (i >= r.mounts.ops.size()) throw BadRequest("a host bind of no mount op");
        MountOp& op = r.mounts.ops[i];
        if (op.kind != OpKind::Bind || !op.source_path.empty() || op.source_slot >= 0)
            throw BadRequest("a host bind of an op that is not a bind from nothing, or of one twice");
        op.source_slot = kFirstHandedSlot + static_cast<int>(k);
        r.mounts.sources.push_back(SourceRef{"", false});
    }
}

}  // namespace

RunRequest decode_request(std::string_view bytes) {
    if (bytes.size() > kMaxRequestBytes) throw BadRequest("the request is larger than its limit");
    Reader in(bytes);
    if (in.str("the magic") != kMagic) throw BadRequest("not a run request of this pyjail version");
    RunRequest r;
    decode_command(in, r.command);
    r.env = in.strs("env");
    for (const auto& e : r.env)
        if (e.find('=') == std::string::npos) throw BadRequest("an environment entry without '='");
    Lockdown& lock = r.lockdown;
    r.mounts.cwd = in.str("cwd");
    if (r.mounts.cwd.empty() || r.mounts.cwd.front() != '/')
        throw BadRequest("the working directory is not absolute");
    lock.hostname = in.str("hostname");
    if (lock.hostname.size() > 64) throw BadRequest("the host name is longer than 64 bytes");
    lock.loopback_up = in.u32() != 0;
    lock.rlimits.resize(in.count("rlimits", 64));
    for (auto& l : lock.rlimits) {
        l.resource = static_cast<int>(in.u32());
        l.name = rlimit_name(l.resource);
        if (l.name == nullptr) throw BadRequest("an unknown rlimit");
        l.value = in.u64();
        l.hard = in.u64();
    }
    decode_mount_ops(in, r);
    lock.seccomp_filter.resize(in.count("filter instructions", kMaxFilter));
    for (auto& f : lock.seccomp_filter) {
        f.code = static_cast<std::uint16_t>(in.u32());
        std::uint32_t j = in.u32();
        f.jt = static_cast<std::uint8_t>(j & 0xff);
        f.jf = static_cast<std::uint8_t>((j >> 8) & 0xff);
        f.k = in.u32();
    }
    r.cgroup_files.resize(in.count("cgroup files", 64));
    for (auto& [file, value] : r.cgroup_files) {
        file = in.str("a cgroup file");
        value = in.str("a cgroup value");
        if (file.empty() || file.find('/') != std::string::npos || file.front() == '.')
            throw BadRequest("a cgroup file name that is not a plain name");
    }
    r.rootfs = in.str("the rootfs");
    std::uint32_t flags = in.u32();
    r.has_script = (flags & 1) != 0;
    r.into_cgroup = (flags & 2) != 0;
    r.seccomp_allow = in.strs("syscall names");
    r.net = in.u32();
    r.wall_time = seconds_from_bits(in.u64(), "the wall time");
    r.cpu_time = seconds_from_bits(in.u64(), "the CPU time");
    r.output = in.u64();
    r.files_uid = in.u32();
    r.files_gid = in.u32();
    decode_host_binds(in, r);
    decode_egress(in, r);
    if (!in.done()) throw BadRequest("bytes after the end of the request");
    for (const auto& op : r.mounts.ops)
        if (op.kind == OpKind::Bind && op.source_path.empty() && op.source_slot < 0)
            throw BadRequest("a bind from nothing: /" + op.target);
    for (const auto& op : r.mounts.ops)
        if (op.kind == OpKind::Copy && !r.has_script) throw BadRequest("a copy op without a script");
    // Not the client's to choose: every run from a template gets a user namespace of its own,
    // so one run's processes and pending signals are not every run's (run_userns.hpp).
    r.lockdown.own_user_namespace = true;
    // Nor this: the run keeps the template's empty keyring (lockdown.hpp, new_keyring).
    r.lockdown.new_keyring = false;
    return r;
}

std::vector<MountOp> plan_forked_mounts(const MountPlan& plan) {
    std::vector<MountOp> ops;
    for (const auto& op : plan.ops) {
        const bool host_bind = op.kind == OpKind::Bind && op.source_slot > 0;
        // The run's mount namespace is its own, but its root is the template's read-only
        // rootfs: a bind lands in a directory the run makes its own, nowhere else.
        if (host_bind && (op.target.empty() || !is_run_private(op.target)))
            throw UsageError("--via: a run from a template binds host paths only below /work and /tmp, not at /" +
                                 op.target,
                             "bind it at /work or below /tmp, or run without --via");
        if (op.target.empty() || !is_run_private(op.target)) continue;
        // --net allow's resolver files, staged in /tmp and bound over /etc: a run from a
        // template has its template's (which serves --net allow too: serve_bounds.hpp).
        if (op.kind == OpKind::Write || op.target.rfind("tmp/.net", 0) == 0) continue;
        MountOp kept = op;
        if (kept.kind == OpKind::Copy) kept.source_slot = 1;
        ops.push_back(std::move(kept));
    }
    return ops;
}

}  // namespace pyjail
