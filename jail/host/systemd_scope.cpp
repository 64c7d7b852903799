// The pure half of systemd_scope.hpp: whether to ask, whom, and the messages.
#include "systemd_scope.hpp"

#include <fmt/format.h>

namespace pyjail {

namespace {

constexpr const char* kSystemd = "org.freedesktop.systemd1";
constexpr const char* kManagerPath = "/org/freedesktop/systemd1";
constexpr const char* kManager = "org.freedesktop.systemd1.Manager";

}  // namespace

namespace setup {

ScopeDecision decide_scope(CgroupManager manager, CgroupMode mode, bool wants_cgroup,
                           const CgroupSite& site, bool parent_given, bool systemd_booted) {
    ScopeDecision d;
    // Nothing to ask for: no limit wants a cgroup, rlimits by choice, a cgroup named by the
    // user, or pyjail's own cgroup already delegated (the common fast path: no connection).
    if (manager == CgroupManager::None || mode == CgroupMode::Off || !wants_cgroup || site.ok ||
        parent_given)
        return d;
    bool explicit_systemd = manager == CgroupManager::Systemd;
    if (!site.not_delegated) {
        // No cgroup2, or controllers bound to cgroup v1: a scope would not have them either.
        if (explicit_systemd)
            d.refusal = "--cgroup-manager systemd: a systemd scope cannot help: " + site.why_not;
        return d;
    }
    if (!systemd_booted) {
        if (explicit_systemd)
            d.refusal = "--cgroup-manager systemd: systemd is not the init here "
                        "(/run/systemd/system does not exist)";
        return d;
    }
    d.ask = true;
    return d;
}

std::optional<BusChoice> choose_bus(uid_t uid, const char* session_address,
                                    const char* xdg_runtime_dir, const char* system_address,
                                    std::string& why_not) {
    BusChoice b;
    auto from_address = [&](const char* address, const char* variable) -> std::optional<BusChoice> {
        auto socket = dbus::unix_socket_of(address);
        if (!socket) {
            why_not = fmt::format("${} ({}) names no unix socket", variable, address);
            return std::nullopt;
        }
        b.socket = *socket;
        b.origin = fmt::format("${}", variable);
        return b;
    };
    if (uid == 0) {
        b.system = true;
        if (system_address != nullptr && *system_address != '\0')
            return from_address(system_address, "DBUS_SYSTEM_BUS_ADDRESS");
        b.socket = "/run/dbus/system_bus_socket";
        b.origin = "the system bus";
        return b;
    }
    if (session_address != nullptr && *session_address != '\0')
        return from_address(session_address, "DBUS_SESSION_BUS_ADDRESS");
    // Only an absolute $XDG_RUNTIME_DIR counts (as sd-bus has it): a relative one would name a
    // socket in whatever directory pyjail was started in.
    if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
        b.socket = std::string(xdg_runtime_dir) + "/bus";
        b.origin = "$XDG_RUNTIME_DIR/bus";
        return b;
    }
    b.socket = fmt::format("/run/user/{}/bus", uid);
    b.origin = "the user's runtime directory";
    return b;
}

}  // namespace setup

namespace systemd {

std::string scope_name(std::uint64_t random) { return fmt::format("pyjail-{:016x}.scope", random); }

dbus::Call hello_call() {
    return {"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "", ""};
}

dbus::Call add_match_call() {
    dbus::Writer w;
    w.string(fmt::format("type='signal',sender='{}',path='{}',interface='{}',member='JobRemoved'",
                         kSystemd, kManagerPath, kManager));
    return {"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
            "s", w.bytes()};
}

dbus::Call start_scope_call(const std::string& unit, pid_t pid) {
    dbus::Writer w;
    w.string(unit);
    // "fail": refuse rather than replace a unit of the same name (the name is random).
    w.string("fail");
    std::size_t props = w.begin_array(8);
    auto property = [&](const char* name, const char* type) {
        w.begin_struct();
        w.string(name);
        w.signature(type);
    };
    property("Description", "s");
    w.string("pyjail supervisor and its jails");
    property("PIDs", "au");
    std::size_t pids = w.begin_array(4);
    w.u32(static_cast<std::uint32_t>(pid));
    w.end_array(pids);
    // The point of the scope: the cgroup below it is pyjail's to manage.
    property("Delegate", "b");
    w.boolean(true);
    // Forget the unit however it ends, so that a failed scope is not left listed.
    property("CollectMode", "s");
    w.string("inactive-or-failed");
    w.end_array(props);
    std::size_t aux = w.begin_array(8);  // no auxiliary units
    w.end_array(aux);
    return {kSystemd, kManagerPath, kManager, "StartTransientUnit", "ssa(sv)a(sa(sv))", w.bytes()};
}

std::optional<JobRemoved> parse_job_removed(const dbus::Message& m) {
    if (m.type != dbus::Type::Signal || m.member != "JobRemoved" || m.interface != kManager ||
        m.path != kManagerPath || m.signature != "uoss")
        return std::nullopt;
    dbus::Reader r(m.body, m.big_endian);
    r.u32();  // the job's number
    JobRemoved j;
    j.sender = m.sender;
    j.job = r.string();
    j.unit = r.string();
    j.result = r.string();
    return j;
}

}  // namespace systemd

}  // namespace pyjail
