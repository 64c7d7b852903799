#include "report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstring>
#include <variant>

#include "utc_time.hpp"

namespace pyjail {

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

std::string utc_timestamp_ms(std::int64_t unix_ms) {
    std::int64_t ms = unix_ms % 1000;
    if (ms < 0) ms += 1000;  // before 1970: the second below, plus the milliseconds
    const UtcTime u = utc_time((unix_ms - ms) / 1000);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", u.year, u.month, u.day, u.hour, u.minute,
                       u.second, ms);
}

RunStatus classify_run(const RunFacts& f) {
    const Outcome& o = f.outcome;
    bool failed = !(o.kind == Outcome::Kind::Exited && o.code == 0);
    if (f.setup_error) return RunStatus::SetupError;
    if (o.kind == Outcome::Kind::WallTimeout) return RunStatus::WallTimeout;
    if (o.kind == Outcome::Kind::GraceTimeout) return RunStatus::GraceTimeout;
    // RLIMIT_CPU (the fallback) ends a process with SIGXCPU.
    if (f.cpu_timeout || (o.kind == Outcome::Kind::Signaled && o.signal == SIGXCPU))
        return RunStatus::CpuTimeout;
    if (f.output_limit) return RunStatus::OutputLimit;
    if (f.oom_kills > 0) return RunStatus::Oom;
    if (f.pids_limit_hits > 0 && failed) return RunStatus::PidsLimit;
    // The status says how the program ended. A refusal is named as the cause only when the
    // program died of it: the filter's kill action (a foreign ABI's syscall) ends it with
    // SIGSYS, which nothing else in a jail sends. A program that exits after a refusal, even
    // at once, exits: numpy's refused NUMA calls once made every failing numpy program read as
    // "seccomp-denied", whatever it died of. The refusals stay in denied_syscalls.
    if (o.kind == Outcome::Kind::Signaled && o.signal == SIGSYS) return RunStatus::SeccompDenied;
    if (o.kind == Outcome::Kind::Exited) return o.code == 0 ? RunStatus::Ok : RunStatus::Exit;
    return RunStatus::Signal;
}

std::string run_status(const RunFacts& f) { return std::string(status_name(classify_run(f))); }

bool usage_is_partial(bool from_cgroup, bool setup_error, bool pid1_exited, int pid1_code) {
    if (from_cgroup) return false;
    // A failed set-up ends before the program starts: pid 1 exits with the error's code and
    // has nothing to wait for.
    if (setup_error) return false;
    return !(pid1_exited && pid1_code == 0);
}

namespace {

// Each limit: its text (as ever), how it is enforced, and the same value as a number.
nlohmann::ordered_json limits_json(const std::vector<LimitEntry>& entries) {
    using Json = nlohmann::ordered_json;
    Json limits = Json::object();
    for (const auto& l : entries)
        limits[l.name] = {{"value", l.value},
                          {"mechanism", mechanism_name(l.mechanism)},
                          {"detail", l.detail},
                          {"amount", std::visit([](auto n) { return Json(n); }, l.amount)},
                          {"unit", l.unit}};
    return limits;
}

// --net allow: every decision once (repeats counted), at most kMaxEgressDecisions; else null.
nlohmann::ordered_json egress_json(const EgressReport& e) {
    using Json = nlohmann::ordered_json;
    if (!e.enabled) return nullptr;
    Json decisions = Json::array();
    for (const auto& d : e.decisions)
        decisions.push_back({{"host", d.host},
                             {"port", d.port == 0 ? Json("dns") : Json(d.port)},
                             {"verdict", d.verdict},
                             {"why", d.why},
                             {"bytes_out", d.bytes_out},
                             {"bytes_in", d.bytes_in},
                             {"count", d.count}});
    return {{"connections", e.connections},   {"most_at_once", e.most_at_once},
            {"refused", e.refused},
            {"dns_queries", e.dns_queries},   {"dns_refused", e.dns_refused},
            {"bytes_out", e.bytes_out},       {"bytes_in", e.bytes_in},
            {"bytes_limit_hit", e.bytes_limit_hit}, {"decisions", decisions},
            {"decisions_dropped", e.decisions_dropped}};
}

}  // namespace

std::string report_json(const RunFacts& f) {
    using Json = nlohmann::ordered_json;  // fields in the documented order
    const Outcome& o = f.outcome;
    Json j;
    j["pyjail_version"] = PYJAIL_VERSION;
    j["status"] = run_status(f);
    j["exit_code"] = f.exit_code;
    j["program_exit_code"] = nullptr;
    if (o.kind == Outcome::Kind::Exited && !f.setup_error) j["program_exit_code"] = o.code;
    int signal = 0;
    if (o.kind == Outcome::Kind::Signaled || (o.kind == Outcome::Kind::JailDied && o.signal != 0))
        signal = o.signal;
    if (o.kind == Outcome::Kind::GraceTimeout) signal = SIGKILL;  // what ended it
    auto signal_name = [](int sig) {
        return sig != 0 && sigabbrev_np(sig) != nullptr ? Json(std::string("SIG") + sigabbrev_np(sig))
                                                        : Json(nullptr);
    };
    j["signal"] = signal != 0 ? Json(signal) : Json(nullptr);
    j["signal_name"] = signal_name(signal);
    j["relayed_signal"] = signal_name(f.relayed_signal);
    j["started_at"] = f.started_unix_ms ? Json(utc_timestamp_ms(*f.started_unix_ms)) : Json(nullptr);
    j["wall_time_s"] = f.wall_s;
    j["cpu_user_s"] = f.user_s ? Json(*f.user_s) : Json(nullptr);
    j["cpu_system_s"] = f.system_s ? Json(*f.system_s) : Json(nullptr);
    j["memory_peak_bytes"] = f.memory_peak ? Json(*f.memory_peak) : Json(nullptr);
    j["memory_peak_source"] = f.memory_peak ? Json(f.memory_peak_source) : Json(nullptr);
    j["usage_partial"] = f.usage_partial;
    j["setup_time_ms"] = f.setup_ms;
    j["limits"] = limits_json(f.limits);
    j["cgroup"] = f.cgroup.empty() ? Json(nullptr) : Json(f.cgroup);
    j["host_uid"] = f.host_uid ? Json(*f.host_uid) : Json(nullptr);
    j["host_gid"] = f.host_gid ? Json(*f.host_gid) : Json(nullptr);
    j["host_ids"] = f.host_ids.empty() ? Json(nullptr) : Json(f.host_ids);
    j["budgets_shared_with"] = f.budgets_shared_with.empty() ? Json(nullptr) : Json(f.budgets_shared_with);
    j["budgets_shared_why"] = f.budgets_shared_why.empty() ? Json(nullptr) : Json(f.budgets_shared_why);
    j["counts_charged_to_uid"] = f.counts_charged_to_uid ? Json(*f.counts_charged_to_uid) : Json(nullptr);
    j["oom_kills"] = f.oom_kills;
    j["pids_limit_hits"] = f.pids_limit_hits;
    Json cuts = Json::array();
    for (const auto& c : f.streams_cut)
        cuts.push_back({{"stream", c.stream}, {"limit", c.limit}, {"limit_bytes", c.bytes}});
    j["streams_cut"] = cuts;
    Json denied = Json::array();
    for (const auto& [what, n] : f.denied.entries()) denied.push_back({{"syscall", what}, {"count", n}});
    j["denied_syscalls"] = denied;
    j["denied_syscalls_throttled"] = f.denied_throttled;
    j["egress"] = egress_json(f.egress);
    j["error"] = nullptr;
    if (f.setup_error || f.record_error) {
        const char* name = f.error_errno != 0 ? strerrorname_np(f.error_errno) : nullptr;
        j["error"] = {{"step", f.error_step},
                      {"errno", f.error_errno},
                      {"errno_name", name != nullptr ? Json(name) : Json(nullptr)},
                      {"message", f.error_message},
                      {"hint", f.error_hint}};
    }
    j["profile"] = f.profile;
    j["command"] = f.command;
    // Invalid UTF-8 (a command line is bytes) is replaced, never an exception.
    return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace pyjail
