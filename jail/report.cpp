#include "report.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

namespace pyjail {

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) out += fmt::format("\\u{:04x}", c);
                else out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

std::string run_status(const RunFacts& f) {
    const Outcome& o = f.outcome;
    bool failed = !(o.kind == Outcome::Kind::Exited && o.code == 0);
    if (f.setup_error) return "setup-error";
    if (o.kind == Outcome::Kind::WallTimeout) return "wall-timeout";
    // RLIMIT_CPU (the fallback) ends a process with SIGXCPU.
    if (f.cpu_timeout || (o.kind == Outcome::Kind::Signaled && o.signal == SIGXCPU))
        return "cpu-timeout";
    if (f.output_limit) return "output-limit";
    if (f.oom_kills > 0) return "oom";
    if (f.pids_limit_hits > 0 && failed) return "pids-limit";
    // A refused syscall ended the program: it was killed for a foreign ABI (SIGSYS), or it
    // failed after something was refused.
    if (!f.denied.empty() && failed) return "seccomp-denied";
    if (o.kind == Outcome::Kind::Exited) return o.code == 0 ? "ok" : "exit";
    return "signal";
}

namespace {
template <typename T>
std::string opt(const std::optional<T>& v) {
    return v ? fmt::format("{}", *v) : "null";
}
std::string seconds(double s) { return fmt::format("{:.6f}", s); }
}  // namespace

std::string report_json(const RunFacts& f) {
    const Outcome& o = f.outcome;
    std::optional<int> program_exit, signal;
    if (o.kind == Outcome::Kind::Exited && !f.setup_error) program_exit = o.code;
    if (o.kind == Outcome::Kind::Signaled || (o.kind == Outcome::Kind::JailDied && o.signal != 0))
        signal = o.signal;
    std::string signal_name = "null";
    if (signal && sigabbrev_np(*signal) != nullptr)
        signal_name = json_string(std::string("SIG") + sigabbrev_np(*signal));

    std::string limits;
    for (const auto& l : f.limits)
        limits += fmt::format("{}\n    {}: {{\"value\": {}, \"mechanism\": {}, \"detail\": {}}}",
                              limits.empty() ? "" : ",", json_string(l.name), json_string(l.value),
                              json_string(mechanism_name(l.mechanism)), json_string(l.detail));
    std::string denied;
    for (const auto& [what, n] : f.denied)
        denied += fmt::format("{}{{\"syscall\": {}, \"count\": {}}}", denied.empty() ? "" : ", ",
                              json_string(what), n);
    std::string command;
    for (const auto& a : f.command) command += (command.empty() ? "" : ", ") + json_string(a);
    std::string error = "null";
    if (f.setup_error)
        error = fmt::format("{{\"step\": {}, \"errno\": {}, \"errno_name\": {}, \"message\": {}, "
                            "\"hint\": {}}}",
                            json_string(f.error_step), f.error_errno,
                            f.error_errno != 0 && strerrorname_np(f.error_errno) != nullptr
                                ? json_string(strerrorname_np(f.error_errno))
                                : "null",
                            json_string(f.error_message), json_string(f.error_hint));

    return fmt::format(
        "{{\n"
        "  \"pyjail_version\": {},\n"
        "  \"status\": {},\n"
        "  \"exit_code\": {},\n"
        "  \"program_exit_code\": {},\n"
        "  \"signal\": {},\n"
        "  \"signal_name\": {},\n"
        "  \"wall_time_s\": {},\n"
        "  \"cpu_user_s\": {},\n"
        "  \"cpu_system_s\": {},\n"
        "  \"memory_peak_bytes\": {},\n"
        "  \"memory_peak_source\": {},\n"
        "  \"setup_time_ms\": {:.3f},\n"
        "  \"limits\": {{{}\n  }},\n"
        "  \"cgroup\": {},\n"
        "  \"oom_kills\": {},\n"
        "  \"pids_limit_hits\": {},\n"
        "  \"denied_syscalls\": [{}],\n"
        "  \"error\": {},\n"
        "  \"profile\": {},\n"
        "  \"command\": [{}]\n"
        "}}\n",
        json_string(PYJAIL_VERSION), json_string(run_status(f)), f.exit_code, opt(program_exit),
        opt(signal), signal_name, seconds(f.wall_s),
        f.user_s ? seconds(*f.user_s) : "null", f.system_s ? seconds(*f.system_s) : "null",
        opt(f.memory_peak), f.memory_peak ? json_string(f.memory_peak_source) : "null",
        f.setup_ms, limits, f.cgroup.empty() ? "null" : json_string(f.cgroup), f.oom_kills,
        f.pids_limit_hits, denied, error, json_string(f.profile), command);
}

}  // namespace pyjail
