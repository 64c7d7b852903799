// GCC 12 at -O2 sees a null dereference in libstdc++'s strings as inlined into CLI11 2.1's
// detail::split (a false positive: the vector it grows is never null); the pragma stands
// before every include, where those headers are read.
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"

// CLI11 includes <iostream>, whose static ios_base::Init object builds the eight standard
// streams and the classic locale before main in every start of pyjail (about 0.1-0.2 ms of
// CPU and 20 page faults, `pyjail --version` included). pyjail never writes to std::cout or
// std::cerr (nor does what it uses of CLI11: its exit() and deprecation warnings are not
// called), so <iostream> is stood in for here by its declarations without that object.
// A stream used from this file would be unconstructed (unless another file includes the real
// <iostream>), so each is declared deprecated: using one fails the build (-Werror).
#include <istream>
#include <ostream>
#ifndef _GLIBCXX_IOSTREAM
#define _GLIBCXX_IOSTREAM 1
namespace std {
// Deprecated: a use from this file is a warning, and so an error of the build.
[[deprecated("unconstructed here: see above")]] extern istream cin;
[[deprecated("unconstructed here: see above")]] extern ostream cout;
[[deprecated("unconstructed here: see above")]] extern ostream cerr;
[[deprecated("unconstructed here: see above")]] extern ostream clog;
}  // namespace std
#endif
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "error.hpp"

namespace pyjail {

namespace {

constexpr const char* kSummary =
    "pyjail: run Python in a jail (namespaces, read-only rootfs, no privileges)";
constexpr const char* kFooter =
    "Run:   pyjail [OPTIONS] [--] COMMAND [ARGS...]\n"
    "       pyjail doctor [--json]   (can this host run jails? how to fix it)\n"
    "       pyjail profiles          (the profiles --profile NAME finds)\n"
    "  python, python3 and python3.X name the rootfs's interpreter; in\n"
    "  `python script.py`, the script is made visible read-only inside the jail.\n"
    "Exit status: the program's own; 128+N if it died of signal N; 124 when\n"
    "--wall-time or --cpu-time ran out; 125 when pyjail failed; 126/127 when the\n"
    "command cannot be executed / is not found.  See pyjail(1).";

// Stands for the empty value of `--name=`: CLI11 2.1 reads `--name=` as `--name`, its value
// still to come (the next argument); pyjail reads it as an empty value (see parse_cli).
constexpr const char* kEmptyValue = "\x1f(empty)";

constexpr const char* kDoctorUsage = "usage: pyjail doctor [--json] [--rootfs NAME|DIR]";
constexpr const char* kDoctorHelp =
    "Usage: pyjail doctor [--json] [--rootfs NAME|DIR ...]\n"
    "Checks whether this host can run jails and says how to fix what is missing.\n"
    "--rootfs also verifies that rootfs against its manifest.\n"
    "Exit status 0 when --profile strict can run here (and every rootfs checks out), 1 if not.\n";

constexpr const char* kProfilesUsage = "usage: pyjail profiles";
constexpr const char* kProfilesHelp =
    "Usage: pyjail profiles\n"
    "Lists the profiles --profile NAME finds: each name, the first line of its file's opening\n"
    "comment, and the file. --profile FILE takes any other profile file.\n";

// CLI11's layout, with pyjail's usage line: the command comes after the options.
class HelpFormatter : public CLI::Formatter {
  public:
    std::string make_usage(const CLI::App*, std::string) const override {
        return "Usage: pyjail [OPTIONS] [--] COMMAND [ARGS...]\n";
    }
};

// CLI11's model of the option table, or of part of it, and of the subcommands. Descriptions,
// value names and the layout serve only --help, so a parse builds the model without them.
struct Model {
    CLI::App app;
    std::vector<std::pair<const OptionSpec*, CLI::Option*>> options;
    CLI::Option* version = nullptr;
    CLI::App* serve = nullptr;   // the run's options (fallthrough), no command
    CLI::App* doctor = nullptr;  // its own options, none of a run's
    CLI::App* launcher = nullptr;  // no options: its requests carry each run's
    CLI::Option* doctor_json = nullptr;
    CLI::Option* doctor_rootfs = nullptr;
    CLI::App* rootfs = nullptr;  // everything after it is the builder's
    CLI::App* profiles = nullptr;  // no options

    // For --help, `values` (the settings of a profile) give each option's default. A parse's
    // model has only the subcommand its first word names (`first`), if any (see parse_cli).
    Model(const std::vector<const OptionSpec*>& specs, bool for_help, const Settings* values = nullptr,
          std::string_view first = {})
        : app(for_help ? kSummary : "", "pyjail") {
        auto text = [for_help](std::string_view s) { return for_help ? std::string(s) : std::string(); };
        // CLI11's App comes with -h,--help; --help gives it pyjail's words.
        if (for_help) app.set_help_flag("-h,--help", "Print this help and exit");
        version = app.add_flag("-V,--version")->description(text("Print the version and exit"));
        // The command starts at the first word that is not an option (nor a subcommand's
        // name), or after `--`; CLI11 leaves it, and any unknown option before it, in
        // remaining().
        app.prefix_command();
        options.reserve(specs.size());
        for (const OptionSpec* o : specs) {
            std::string flag = fmt::format("--{}", o->name);
            CLI::Option* opt = nullptr;
            if (o->kind == OptKind::Flag) {
                // `--verbose=yes` is refused rather than read as a boolean.
                opt = app.add_flag(flag)->disable_flag_override();
            } else {
                // Every value is kept as given, in order (a repeated Text option: the last
                // one wins, in parse_cli); values are text here, checked by policy.cpp.
                opt = app.add_option(flag)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            }
            if (for_help) describe(*o, *opt, values);
            options.emplace_back(o, opt);
        }
        add_subcommands(for_help, first);
        if (for_help) {
            app.formatter(std::make_shared<HelpFormatter>());
            app.get_formatter()->column_width(30);
            app.footer(kFooter);
        }
    }

  private:
    static void describe(const OptionSpec& o, CLI::Option& opt, const Settings* values) {
        std::string help(o.help);
        std::string shown = o.kind == OptKind::Text ? std::string(o.default_value) : "";
        if (values != nullptr && o.kind != OptKind::Flag) {
            shown.clear();
            if (auto it = values->find(o.name); it != values->end())
                for (const auto& item : it->second) shown += (shown.empty() ? "" : ", ") + item.value;
        }
        if (!shown.empty()) help += fmt::format(" [default: {}]", shown);
        opt.description(help);
        if (o.kind != OptKind::Flag) opt.option_text(std::string(o.value_name));
    }

    void add_subcommands(bool for_help, std::string_view first) {
        auto text = [for_help](std::string_view s) { return for_help ? std::string(s) : std::string(); };
        if (for_help || first == "serve") {
            // The run's options (given after its name too: fallthrough), and no command.
            serve = app.add_subcommand("serve", text("Hold a template for runs (--socket PATH; see pyjail(1))"));
            serve->fallthrough();
            serve->prefix_command();
            serve->set_help_flag();  // pyjail serve --help: the run's options, the parent's --help
        }
        if (for_help || first == "doctor") {
            doctor = app.add_subcommand("doctor", text("Can this host run jails? How to fix it"));
            doctor_json = doctor->add_flag("--json")->disable_flag_override();
            doctor_rootfs = doctor->add_option("--rootfs")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            doctor->allow_extras();  // refused in parse_cli, in doctor's own words
        }
        if (for_help || first == "profiles") {
            profiles = app.add_subcommand("profiles", text("List the profiles, with what each is for"));
            profiles->allow_extras();  // refused in parse_cli, in its own words
        }
        if (first == "launcher") {  // the Python package's, not a user's: not in --help
            launcher = app.add_subcommand("launcher");
            launcher->allow_extras();  // refused in parse_cli
        }
        if (for_help || first == "rootfs") {
            rootfs = app.add_subcommand("rootfs", text("Build, rebuild, inspect or list root filesystems"));
            rootfs->set_help_flag();  // its --help is the builder's (rootfs_command.cpp)
            rootfs->prefix_command();
            rootfs->allow_extras();
        }
    }
};

// The options of the table that `args` name (as `--name` or `--name=...`, wherever they
// stand). A parse needs only these in its model: an option the command line does not name
// cannot match any of its arguments, so CLI11 parses it exactly as with the whole table --
// and building its model of all the options, which cost a tenth of a millisecond on every
// run, is left to --help.
std::vector<const OptionSpec*> options_named(const std::vector<std::string>& args) {
    std::vector<const OptionSpec*> named;
    for (const auto& arg : args) {
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) continue;
        const OptionSpec* o = find_option(std::string_view(arg).substr(2, arg.find('=') - 2));
        if (o != nullptr && std::find(named.begin(), named.end(), o) == named.end())
            named.push_back(o);
    }
    return named;
}

std::vector<const OptionSpec*> all_options() {
    std::vector<const OptionSpec*> all;
    for (const auto& o : option_table()) all.push_back(&o);
    return all;
}

UsageError unknown_option(const std::string& arg) {
    std::string name = arg.substr(0, arg.find('='));
    std::string hint = "see pyjail --help";
    if (name.rfind("--", 0) == 0)
        if (auto s = suggest_option(name.substr(2), true); !s.empty())
            hint = fmt::format("did you mean --{}?", s);
    return UsageError(fmt::format("unknown option {}", name), hint);
}

// CLI11 ran out of arguments while collecting an option's value: that option is the last
// argument.
UsageError missing_value(const std::vector<std::string>& args, const CLI::Error& e) {
    if (!args.empty() && args.back().rfind("--", 0) == 0) {
        std::string name = args.back().substr(2, args.back().find('=') - 2);
        if (const OptionSpec* o = find_option(name); o != nullptr && o->kind != OptKind::Flag)
            return UsageError(fmt::format("--{} needs a value ({})", name, o->value_name),
                              "see pyjail --help");
    }
    return UsageError(e.what(), "see pyjail --help");
}

}  // namespace

std::string usage_text() {
    Model m(all_options(), true);
    return m.app.help();
}

std::string usage_text(const Settings& values, const std::string& profile) {
    Model m(all_options(), true, &values);
    m.app.footer(fmt::format("Defaults shown are profile {}'s (--profile NAME --help shows "
                             "another's).\n{}",
                             profile, kFooter));
    return m.app.help();
}

std::optional<std::string> help_profile(const std::vector<std::string>& args) {
    std::optional<std::string> profile;
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--") break;
        if (args[i] == "--profile" && i + 1 < args.size()) profile = args[++i];
        else if (args[i].rfind("--profile=", 0) == 0) profile = args[i].substr(10);
    }
    return profile;
}

namespace {

// What CLI11 left of the run's command line: the command (after the `--` that ended the
// options, if one did), and before it any unknown option. Arguments map one to one to `args`,
// so the command is taken from `args`, unchanged (no `--name=` stand-in in it).
std::vector<std::string> command_of(const std::vector<std::string>& args, const std::vector<std::string>& rest) {
    std::size_t command = rest.size();
    if (!rest.empty() && rest[0] == "--") command = rest.size() - 1;
    else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') throw unknown_option(rest[0]);
    return {args.end() - static_cast<std::ptrdiff_t>(command), args.end()};
}

void collect_given(const Model& m, CliArgs& out) {
    for (const auto& [spec, opt] : m.options) {
        const std::vector<std::string>& results = opt->results();
        if (results.empty()) continue;
        auto& values = out.given[std::string(spec->name)];
        if (spec->kind == OptKind::Flag) {
            values = {"true"};
            continue;
        }
        for (const auto& r : results) values.push_back(r == kEmptyValue ? std::string() : r);
        if (spec->kind == OptKind::Text) values.erase(values.begin(), values.end() - 1);
    }
}

// A flag written with a value, even `=true` (which CLI11 takes), among the first `options`
// arguments (the command's are its own): pyjail's flags are given or not.
void refuse_flag_values(const std::vector<std::string>& args, std::size_t options) {
    for (std::size_t i = 0; i < options; ++i) {
        const std::string& a = args[i];
        if (a.compare(0, 2, "--") != 0 || a.find('=') == std::string::npos) continue;
        const OptionSpec* o = find_option(std::string_view(a).substr(2, a.find('=') - 2));
        if (o != nullptr && o->kind == OptKind::Flag)
            throw UsageError(fmt::format("--{} takes no value", o->name), "see pyjail --help");
    }
}

void collect_doctor(const Model& m, CliArgs& out) {
    out.subcommand = Subcommand::Doctor;
    if (!out.given.empty())
        throw UsageError(fmt::format("doctor: --{} is not an option of pyjail doctor", out.given.begin()->first),
                         kDoctorUsage);
    if (auto extra = m.doctor->remaining(); !extra.empty())
        throw UsageError(fmt::format("doctor: unknown argument '{}'", extra[0]), kDoctorUsage);
    out.doctor_json = m.doctor_json->count() > 0;
    for (const auto& r : m.doctor_rootfs->results()) out.doctor_rootfses.push_back(r);
}

// --help: a subcommand's own, where it has one, or pyjail's.
CliArgs help_of(const Model& m) {
    CliArgs out;
    out.exit_now = 0;
    if (m.doctor != nullptr && m.doctor->parsed()) {
        out.subcommand = Subcommand::Doctor;
        out.output = kDoctorHelp;
    } else if (m.profiles != nullptr && m.profiles->parsed()) {
        out.subcommand = Subcommand::Profiles;
        out.output = kProfilesHelp;
    } else {
        out.help = true;
        out.output = usage_text();
    }
    return out;
}

// `pyjail profiles` takes nothing: a run's option or a word after it is a mistake.
void collect_profiles(const Model& m, CliArgs& out) {
    out.subcommand = Subcommand::Profiles;
    if (!out.given.empty())
        throw UsageError(fmt::format("profiles: --{} is not an option of pyjail profiles", out.given.begin()->first),
                         kProfilesUsage);
    if (auto extra = m.profiles->remaining(); !extra.empty())
        throw UsageError(fmt::format("profiles: unknown argument '{}'", extra[0]), kProfilesUsage);
}

}  // namespace

CliArgs parse_cli(const std::vector<std::string>& args) {
    CliArgs out;
    // A subcommand is pyjail's first word, as pyjail(1) writes it; anywhere else (`pyjail --
    // doctor`, `pyjail --net none serve`) it is a command to run in the jail, as it always was.
    // So the model holds that one subcommand, or none. A plain run's parse builds no
    // subcommand: all three would take it from about 10 to 18 us (bench/parse_cli.cpp, the
    // fastest round; with this, the same as before the subcommands were CLI11's).
    Model m(options_named(args), false, nullptr, args.empty() ? std::string_view() : std::string_view(args[0]));
    std::vector<std::string> words;
    words.reserve(args.size());
    for (const auto& a : args) {
        bool empty_value = a.size() > 3 && a.back() == '=' && a.compare(0, 2, "--") == 0 &&
                           find_option(std::string_view(a).substr(2, a.size() - 3)) != nullptr;
        words.push_back(empty_value ? a + kEmptyValue : a);
    }
    std::vector<const char*> argv = {"pyjail"};
    for (const auto& w : words) argv.push_back(w.c_str());
    try {
        m.app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::CallForHelp&) {
        return help_of(m);
    } catch (const CLI::ArgumentMismatch& e) {
        if (std::string_view(e.what()).find("flag override") != std::string_view::npos)
            throw UsageError(fmt::format("--{} takes no value", std::string(e.what()).substr(0, std::string(e.what()).find(' '))),
                             "see pyjail --help");
        throw missing_value(args, e);
    } catch (const CLI::ParseError& e) {
        throw UsageError(e.what(), "see pyjail --help");
    }
    if (m.version->count() > 0) {
        out.exit_now = 0;
        out.output = "pyjail " PYJAIL_VERSION "\n";
        return out;
    }
    collect_given(m, out);
    if (m.doctor != nullptr && m.doctor->parsed()) {
        collect_doctor(m, out);
        return out;
    }
    if (m.rootfs != nullptr && m.rootfs->parsed()) {
        if (!out.given.empty())
            throw UsageError(fmt::format("rootfs: --{} is not an option of pyjail rootfs", out.given.begin()->first),
                             "pyjail rootfs --help");
        out.subcommand = Subcommand::Rootfs;
        out.rootfs_args = m.rootfs->remaining();
        return out;
    }
    if (m.profiles != nullptr && m.profiles->parsed()) {
        collect_profiles(m, out);
        return out;
    }
    if (m.launcher != nullptr && m.launcher->parsed()) {
        if (!out.given.empty() || !m.launcher->remaining().empty())
            throw UsageError("pyjail launcher takes no options nor arguments: each request carries its run's",
                             "usage: pyjail launcher (its stdin a socket from the Python package's Pool)");
        out.subcommand = Subcommand::Launcher;
        return out;
    }
    if (m.serve != nullptr && m.serve->parsed()) {
        out.subcommand = Subcommand::Serve;
        std::vector<std::string> rest = m.serve->remaining();
        for (const auto& r : m.app.remaining()) rest.push_back(r);
        if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-' && rest[0] != "--") throw unknown_option(rest[0]);
        out.command = rest;
        refuse_flag_values(args, args.size());
        return out;
    }
    out.command = command_of(args, m.app.remaining());
    refuse_flag_values(args, args.size() - out.command.size());
    return out;
}

void apply_cli(Settings& settings, const CliArgs& cli) {
    for (const auto& [name, values] : cli.given) {
        const OptionSpec* spec = find_option(name);
        auto& items = settings[name];
        if (spec->kind != OptKind::List) items.clear();
        for (const auto& v : values) items.push_back({v, Source::CommandLine, "--" + name});
    }
}

}  // namespace pyjail
