// pyjail: parse, plan, run. Every failure becomes one line on stderr and exit status 125
// (126/127 when the command cannot be executed / is not found).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audit_target.hpp"
#include "cli.hpp"
#include "doctor.hpp"
#include "environment.hpp"
#include "error.hpp"
#include "exitstatus.hpp"
#include "explain.hpp"
#include "hostopen.hpp"
#include "launcher.hpp"
#include "mountplan.hpp"
#include "notice_stamp.hpp"
#include "paths.hpp"
#include "policy.hpp"
#include "prepare.hpp"
#include "profile.hpp"
#include "profiles_command.hpp"
#include "report.hpp"
#include "sha256.hpp"
#include "rootfs_command.hpp"
#include "serve.hpp"
#include "serve_bounds.hpp"
#include "spawn.hpp"
#include "sys.hpp"

using namespace pyjail;

namespace {

int run_doctor(const CliArgs& cli) {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw JailError("doctor", "cannot find pyjail's own path", errno);
    auto checks = run_doctor_checks(std::string(self, static_cast<std::size_t>(n)), cli.doctor_rootfses);
    std::fputs(format_checks(checks, cli.doctor_json).c_str(), stdout);
    return doctor_exit_code(checks);
}

// --explain's cgroup line when a systemd scope is planned: asked for only when the jail runs.
std::string explain_scope(const RunPlan& plan) {
    return fmt::format("a delegated scope from systemd's {} (asked over {} when the jail runs), "
                       "as {}",
                       plan.systemd_scope->system ? "system manager" : "user manager",
                       plan.systemd_scope->origin, plan.cgroup.why_not.substr(0, plan.cgroup.why_not.find(';')));
}

std::string cli_path(const CliArgs& cli, const char* option, const std::string& cwd) {
    auto it = cli.given.find(option);
    return it == cli.given.end() || it->second.back().empty()
               ? std::string()
               : absolute_path(it->second.back(), cwd);
}

int cli_report_fd(const CliArgs& cli) {
    auto it = cli.given.find("report-fd");
    if (it == cli.given.end()) return -1;
    const std::string& v = it->second.back();
    auto fd = parse_small_number(v);
    if (!fd || *fd < 3)
        throw UsageError(fmt::format("--report-fd: '{}' is not a descriptor above 2", v),
                         "0-2 are the program's");
    return static_cast<int>(*fd);
}

// The audit log of this run (--audit-log): its path once checked usable, and the hash of the
// program text once known.
struct AuditTarget {
    std::string path;
    std::optional<std::string> program_sha256;
    std::vector<WritablePlace> places;  // where the jail can write: never the log's place

    void use(const std::string& p) {
        if (p.empty() || !path.empty()) return;
        check_audit_log(p);  // before anything runs: an unusable log fails the run
        path = p;
    }
    // A log the jail can reach is one it can erase, forge, or replace with a directory so
    // that its own line is never written.
    void keep_out_of(const std::vector<WritablePlace>& writable) {
        if (path.empty()) return;
        setup::check_audit_log_place(path, writable);
        places = writable;
    }
    void write(const RunFacts& facts) const {  // throws JailError
        if (!path.empty()) append_audit_line(path, audit_line(audit_identity(program_sha256), facts), places);
    }
};

void set_error(RunFacts& facts, const JailError& e) {
    facts.exit_code = e.exit_code();
    facts.error_step = e.step();
    facts.error_message = e.message();
    facts.error_errno = e.err();
    facts.error_hint = e.hint();
}

// The end of every run: its audit line, then its report. A run whose line cannot be written
// fails (exit 125), and the report says why: no run goes unrecorded with exit status 0.
int record_run(const ReportTarget& report, const AuditTarget& audit, RunFacts& facts, int code) {
    try {
        audit.write(facts);
    } catch (const JailError& e) {
        std::fprintf(stderr, "pyjail: %s\n", e.one_line().c_str());
        if (!facts.setup_error) {
            facts.record_error = true;
            set_error(facts, e);
            code = e.exit_code();
        }
    }
    if (!report.write(facts) && !facts.setup_error) code = kExitJailError;
    return code;
}

void write_error_report(const ReportTarget& report, const AuditTarget& audit, RunFacts& facts,
                        const JailError& e) {
    facts.setup_error = true;
    set_error(facts, e);
    record_run(report, audit, facts, e.exit_code());
}

// What `pyjail serve` runs: a template jail (serve.hpp) from the same settings a run would
// use, its program the template's boot, its extension module bound in.
std::vector<std::string> serve_template_settings(Settings& settings, const DataDirs& dirs) {
    std::vector<std::string> preload = preload_modules(settings);
    settings["ro-bind"].push_back(
        {dirs.template_dir + ":" + serve::kTemplateDirInJail, Source::Default, "pyjail serve"});
    // The template lives as long as the server; each run brings its own time limits.
    settings["wall-time"].push_back({"0", Source::Default, "pyjail serve"});
    settings["cpu-time"].push_back({"0", Source::Default, "pyjail serve"});
    return preload;
}

// One run's records: the report and the audit log, and the facts both are written from.
struct RunRecords {
    ReportTarget report;
    AuditTarget audit;
    RunFacts facts;
};

// --help's text shows each option's default as the chosen profile (or the default one) sets
// it. Help is still given when the profile cannot be read (a broken installation, a typo),
// with the built-in defaults and the reason on stderr.
int answer_now(CliArgs& cli, const std::vector<std::string>& args) {
    if (cli.help) {
        std::string name = help_profile(args).value_or(setting(default_settings(), "profile").value);
        try {
            DataDirs dirs = find_data_dirs();
            Settings values = settings_from_chain(profile_chain(name, profile_loader(dirs)));
            values["profile"] = {{name, Source::CommandLine, "--profile"}};
            cli.output = usage_text(values, name);
        } catch (const JailError& e) {
            std::fprintf(stderr, "pyjail: --help shows the built-in defaults: %s\n", e.one_line().c_str());
        }
    }
    std::fputs(cli.output.c_str(), stdout);
    return *cli.exit_now;
}

// `pyjail serve`: the settings as given are its runs' (the most any may have); the template
// is a jail from the same settings, its program the template's boot.
int start_server(const CliArgs& cli, Settings& settings, const DataDirs& dirs, const std::string& cwd, char** argv) {
    const char* usage = "usage: pyjail serve --socket PATH [--preload MODULE ...] [OPTIONS]";
    if (!cli.command.empty()) throw UsageError("pyjail serve takes no command: its runs bring theirs", usage);
    auto socket = cli.given.find("socket");
    if (socket == cli.given.end() || socket->second.back().empty())
        throw UsageError("pyjail serve needs --socket PATH", usage);
    const bool allow_binds = cli.given.count("allow-binds") != 0;
    // Runs' own binds (serve_bounds.hpp, bind_ids_of): as root, the template takes
    // --host-user's ids, which the runs' clients' files are owned by.
    if (allow_binds && ::geteuid() == 0) {
        auto ids = cli.given.find("host-ids");
        if (ids != cli.given.end() && ids->second.back() != "shared")
            throw UsageError("pyjail serve: --allow-binds runs the template as --host-user, not --host-ids " +
                                 ids->second.back(),
                             "drop --host-ids, or --allow-binds");
        settings["host-ids"].push_back({"shared", Source::Default, "pyjail serve --allow-binds"});
    }
    // A profile's binds (standard's and batch's current directory) are each run's, which
    // brings its own: the template, started wherever, takes none of them.
    if (allow_binds)
        for (const char* key : {"bind", "ro-bind", "workdir"}) {
            auto& items = settings[key];
            items.erase(std::remove_if(items.begin(), items.end(),
                                       [](const SettingItem& i) { return i.source == Source::Profile; }),
                        items.end());
            if (items.empty() && std::string_view(key) == "workdir")
                items.push_back({"", Source::Default, "pyjail serve --allow-binds"});
        }
    const Policy runs = make_policy(settings, {"python"}, cwd);
    if (auto why = serve_policy_refusal(runs))
        throw UsageError("pyjail serve: " + *why, "bind it read-only (--ro-bind), or send files with each run");
    std::vector<std::string> preload = serve_template_settings(settings, dirs);
    PreparedRun prepared = setup::prepare_run(make_policy(settings, serve::template_command(preload), cwd), dirs);
    prepared.plan.is_template = true;
    // --net allow: the template relays nothing and binds no listener; its rootfs's resolver
    // files are its runs' (plan_egress_etc), and each run's pid 1 binds the run's own sockets
    // for the run's client (forked_run.cpp). Its allowlist bounds its runs' (serve_bounds.hpp).
    prepared.plan.egress.reset();
    prepared.plan.template_filter = compile_template_filter();
    // The server's cgroup (a systemd scope, if one must be asked for) holds the template's
    // leaf and every run's.
    supervisor::settle_cgroup(prepared.plan);
    return serve::serve(prepared, runs, absolute_path(socket->second.back(), cwd), preload, argv);
}

// --explain: the plan, printed; nothing runs.
int explain_run(const RunPlan& plan) {
    std::fputs(explain_text({plan.policy, plan.rootfs, plan.mounts, plan.ids, plan.command.exec_path, plan.argv,
                             plan.env, plan.seccomp ? &*plan.seccomp : nullptr, plan.limits.entries,
                             plan.systemd_scope ? explain_scope(plan)
                             : plan.cgroup.ok   ? plan.cgroup.base
                             : plan.cgroup.why_not.empty()
                                 ? "none: no limit needs one (memory, pids, cpus, cpu-time unset)"
                                 : "none: " + plan.cgroup.why_not,
                             &plan.host_ids})
                   .c_str(),
               stdout);
    return 0;
}

// Before anything runs: the audit log and the report where the jail cannot write them, and
// the notice of the environment the jail does not get.
void check_records(const Policy& policy, RunRecords& rec) {
    if (!policy.explain) rec.audit.use(policy.audit_log);
    if (!rec.report.wanted()) rec.report = ReportTarget::open(policy.report_path, -1);
    if (policy.explain) return;
    if (!rec.audit.path.empty() || rec.report.wanted()) {
        // Before the jail exists: neither file where the jail can write (hostopen.hpp).
        auto places = setup::writable_places(all_binds(policy));
        rec.audit.keep_out_of(places);
        rec.report.keep_out_of(places);
    }
    const auto host_env = setup::host_environment();
    if (env_notice(policy, host_env).empty()) return;  // nothing to say: no stamp is read
    if (auto when = supervisor::env_notice_when())
        std::fprintf(stderr, "%s\n", env_notice(policy, host_env, *when).c_str());
}

// A run of the command: through a template (--via), explained, or in a fresh jail.
int run_command(const CliArgs& cli, const Settings& settings, const DataDirs& dirs, const std::string& cwd,
                RunRecords& rec, char** argv) {
    if (cli.given.count("socket") != 0) throw UsageError("--socket is an option of pyjail serve", "did you mean --via?");
    if (cli.given.count("allow-binds") != 0)
        throw UsageError("--allow-binds is an option of pyjail serve", "start the server with it");
    Policy policy = make_policy(settings, cli.command, cwd);
    check_records(policy, rec);
    AuditTarget& audit = rec.audit;
    if (auto via = cli.given.find("via"); via != cli.given.end() && !policy.explain) {
        const bool hash = !audit.path.empty();
        int code = supervisor::run_via(absolute_path(via->second.back(), cwd), std::move(policy), dirs, argv,
                                       rec.facts, [&](int script_fd) {
                                           if (hash) audit.program_sha256 = sha256_of_fd(script_fd);
                                       });
        return record_run(rec.report, audit, rec.facts, code);
    }
    PreparedRun prepared = setup::prepare_run(std::move(policy), dirs);
    // The script as the jail will read it: hashed through the descriptor it gets.
    if (!audit.path.empty() && prepared.fds.script) audit.program_sha256 = sha256_of_fd(prepared.fds.script.get());
    if (prepared.plan.policy.explain) return explain_run(prepared.plan);
    supervisor::settle_cgroup(prepared.plan);
    int code = supervisor::run_jail(prepared, argv, rec.facts);
    return record_run(rec.report, audit, rec.facts, code);
}

// The settings (defaults, the profile's chain, the command line), then serve or run.
int plan_and_run(const CliArgs& cli, const std::string& cwd, RunRecords& rec, char** argv) {
    // Like the report: named on the command line, even a bad profile is logged.
    if (cli.given.find("explain") == cli.given.end()) rec.audit.use(cli_path(cli, "audit-log", cwd));
    DataDirs dirs = find_data_dirs();
    std::string profile_name = setting(default_settings(), "profile").value;
    if (auto it = cli.given.find("profile"); it != cli.given.end()) profile_name = it->second.back();
    rec.facts.profile = profile_name;
    Settings settings = settings_from_chain(profile_chain(profile_name, profile_loader(dirs)));
    apply_cli(settings, cli);
    if (cli.subcommand == Subcommand::Serve) return start_server(cli, settings, dirs, cwd, argv);
    return run_command(cli, settings, dirs, cwd, rec, argv);
}

int run_or_fail(int argc, char** argv);

// `pyjail launcher` (launcher.hpp): each run it is sent is this same main's path, in a child.
int serve_launched_runs() {
    return launcher::serve_runs(0, [](const std::vector<std::string>& args) {
        if (!args.empty() && args[0] == "launcher") {  // its stdin is the run's, not a driver's
            std::fprintf(stderr, "pyjail: launcher: a run cannot be another launcher\n");
            return kExitJailError;
        }
        std::vector<std::string> words = {"pyjail"};
        words.insert(words.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& w : words) argv.push_back(w.data());
        argv.push_back(nullptr);
        return run_or_fail(static_cast<int>(words.size()), argv.data());
    });
}

// Now, by the realtime clock, in milliseconds since the epoch: the report's started_at.
std::int64_t unix_now_ms() {
    struct timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int run(int argc, char** argv) {
    const std::int64_t started_ms = unix_now_ms();
    std::vector<std::string> args(argv + 1, argv + argc);
    CliArgs cli = parse_cli(args);
    if (cli.exit_now) return answer_now(cli, args);
    if (cli.subcommand == Subcommand::Doctor) return run_doctor(cli);
    if (cli.subcommand == Subcommand::Profiles) return run_profiles_command();
    if (cli.subcommand == Subcommand::Launcher) return serve_launched_runs();
    if (cli.subcommand == Subcommand::Rootfs) {
        std::vector<std::string> rootfs = {"rootfs"};
        rootfs.insert(rootfs.end(), cli.rootfs_args.begin(), cli.rootfs_args.end());
        return run_rootfs_command(rootfs);
    }
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) throw JailError("cwd", "cannot read the current directory", errno);

    // A report asked for on the command line is opened first, so that even a bad profile or
    // option value is reported to whoever reads it.
    RunRecords rec{ReportTarget::open(cli_path(cli, "report", cwd), cli_report_fd(cli)), {}, {}};
    rec.facts.command = cli.command;
    rec.facts.started_unix_ms = started_ms;
    if (auto code = inline_program(cli.command)) rec.audit.program_sha256 = sha256_hex(*code);
    try {
        return plan_and_run(cli, cwd, rec, argv);
    } catch (const JailError& e) {
        // The report says what failed too: a cron job or an agent reads it, not stderr.
        write_error_report(rec.report, rec.audit, rec.facts, e);
        throw;
    } catch (const std::exception& e) {
        // Not one of ours (out of memory, say), perhaps after the program ran: the report
        // still says the run failed.
        write_error_report(rec.report, rec.audit, rec.facts, JailError("internal", e.what()));
        throw;
    }
}

// With stdin, stdout or stderr closed (as under some cron daemons), the next file pyjail
// opens would take that number and be mistaken for it -- by us, or by the program in the
// jail. Fill the gaps with /dev/null.
void ensure_standard_fds() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0 && null != fd) {
            ::dup2(null, fd);
            ::close(null);
        }
    }
}

// Every failure as one line on stderr and its exit status.
int run_or_fail(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const JailError& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "pyjail: %s\n", e.one_line().c_str());
        return e.exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pyjail: internal error: %s\n", e.what());
        return kExitJailError;
    }
}

}  // namespace

int main(int argc, char** argv) {
    ensure_standard_fds();
    // `pyjail --version` alone is answered before the command line's hundred options are
    // built (CLI11: most of what that start costs); with anything else it is parsed as ever.
    if (const std::string_view only = argc == 2 ? argv[1] : ""; only == "--version" || only == "-V")
        return std::fputs("pyjail " PYJAIL_VERSION "\n", stdout) < 0 || std::fflush(stdout) != 0 ? kExitJailError : 0;
    return run_or_fail(argc, argv);
}
