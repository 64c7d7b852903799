#include "audit.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "utc_time.hpp"

namespace pyjail {

namespace {

using Json = nlohmann::ordered_json;

// Cuts to `max` bytes. A UTF-8 sequence cut in the middle is replaced when dumped.
std::string cut(const std::string& s, std::size_t max) {
    return s.size() <= max ? s : s.substr(0, max) + "...";
}

struct Bounds {
    std::size_t arg = std::string::npos;  // bytes per command word
    std::size_t args = std::string::npos; // command words
    std::size_t text = std::string::npos; // profile, error message
    bool denied = true;                   // the denied syscalls, or only their total
};

Json build(const AuditIdentity& who, const RunFacts& f, const Bounds& b) {
    Json j;
    j["time"] = utc_timestamp(who.time);
    j["pyjail_version"] = PYJAIL_VERSION;
    j["uid"] = who.uid;
    j["user"] = who.user.empty() ? Json(nullptr) : Json(who.user);
    j["profile"] = cut(f.profile, b.text);
    Json cmd = Json::array();
    bool truncated = false;
    for (std::size_t i = 0; i < f.command.size(); ++i) {
        if (i == b.args) {
            truncated = true;
            break;
        }
        if (f.command[i].size() > b.arg) truncated = true;
        cmd.push_back(cut(f.command[i], b.arg));
    }
    j["command"] = cmd;
    j["command_truncated"] = truncated;
    j["program_sha256"] = who.program_sha256 ? Json(*who.program_sha256) : Json(nullptr);
    j["status"] = run_status(f);
    j["exit_code"] = f.exit_code;
    j["wall_time_s"] = f.wall_s;
    j["cpu_user_s"] = f.user_s ? Json(*f.user_s) : Json(nullptr);
    j["cpu_system_s"] = f.system_s ? Json(*f.system_s) : Json(nullptr);
    j["memory_peak_bytes"] = f.memory_peak ? Json(*f.memory_peak) : Json(nullptr);
    Json denied = Json::array();
    if (b.denied)
        for (const auto& [what, n] : f.denied.entries())
            denied.push_back({{"syscall", what}, {"count", n}});
    j["denied_syscalls"] = denied;
    j["denied_syscalls_total"] = f.denied.total();
    // --net allow: the totals (the report has each decision).
    j["egress"] = f.egress.enabled ? Json{{"connections", f.egress.connections},
                                          {"refused", f.egress.refused},
                                          {"dns_refused", f.egress.dns_refused},
                                          {"bytes_out", f.egress.bytes_out},
                                          {"bytes_in", f.egress.bytes_in}}
                                   : Json(nullptr);
    j["error"] = f.setup_error
                     ? Json(cut(fmt::format("{}: {}", f.error_step, f.error_message), b.text))
                     : Json(nullptr);
    return j;
}

std::string dump(const Json& j) {
    // Invalid UTF-8 (a command line is bytes) is replaced, never an exception.
    return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string utc_timestamp(std::time_t t) {
    const UtcTime u = utc_time(t);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", u.year, u.month, u.day, u.hour, u.minute, u.second);
}

std::string audit_line(const AuditIdentity& who, const RunFacts& facts) {
    // Whole when it fits; else the long parts cut, step by step, to a size that always fits:
    // 64 words of 128 bytes (each at most 6x as JSON escapes) and two texts of 512 are far
    // below kMaxAuditLine with the fixed fields and 33 denied entries.
    for (const Bounds& b : {Bounds{}, Bounds{1024, 64, 1024, true}, Bounds{128, 16, 512, true},
                            Bounds{32, 8, 128, false}}) {
        std::string line = dump(build(who, facts, b));
        if (line.size() <= kMaxAuditLine) return line;
    }
    // Unreachable by the sizes above; a line is still bounded.
    return dump(Json{{"time", utc_timestamp(who.time)}, {"uid", who.uid},
                     {"status", run_status(facts)}, {"exit_code", facts.exit_code},
                     {"command_truncated", true}});
}

std::optional<std::string> inline_program(const std::vector<std::string>& argv) {
    if (argv.empty() || !is_python_name(argv[0])) return std::nullopt;
    const PythonCommand c = parse_python_command(argv);
    if (!c.malformed.empty() || c.kind != PythonKind::Code) return std::nullopt;
    return c.target;
}

}  // namespace pyjail
