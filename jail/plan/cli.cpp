#include "cli.hpp"

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
    "  python, python3 and python3.X name the rootfs's interpreter; in\n"
    "  `python script.py`, the script is made visible read-only inside the jail.\n"
    "Exit status: the program's own; 128+N if it died of signal N; 124 when\n"
    "--wall-time or --cpu-time ran out; 125 when pyjail failed; 126/127 when the\n"
    "command cannot be executed / is not found.  See pyjail(1).";

// What CLI11 records for a flag given without a value. A value written after `=` is something
// else (short of this very string, which nobody types), so `--verbose=yes` or `=true` is
// refused rather than read as a boolean.
constexpr const char* kFlagGiven = "\x1f(given)";

// Stands for the empty value of `--name=` (see parse_cli).
constexpr const char* kEmptyValue = "\x1f(empty)";

// CLI11's layout, with pyjail's usage line: the command comes after the options.
class HelpFormatter : public CLI::Formatter {
  public:
    std::string make_usage(const CLI::App*, std::string) const override {
        return "Usage: pyjail [OPTIONS] [--] COMMAND [ARGS...]\n";
    }
};

// CLI11's model of the option table, or of part of it. Descriptions, value names and the
// layout serve only --help, so a parse builds the model without them.
struct Model {
    CLI::App app;
    std::vector<std::pair<const OptionSpec*, CLI::Option*>> options;
    CLI::Option* version = nullptr;

    // For --help, `values` (the settings of a profile) give each option's default.
    Model(const std::vector<const OptionSpec*>& specs, bool for_help, const Settings* values = nullptr)
        : app(for_help ? kSummary : "", "pyjail") {
        auto text = [for_help](std::string_view s) { return for_help ? std::string(s) : std::string(); };
        // CLI11's App comes with -h,--help; --help gives it pyjail's words.
        if (for_help) app.set_help_flag("-h,--help", "Print this help and exit");
        version = app.add_flag("-V,--version")->description(text("Print the version and exit"));
        // The command starts at the first word that is not an option, or after `--`; CLI11
        // leaves it, and any unknown option before it, in remaining().
        app.prefix_command();
        options.reserve(specs.size());
        for (const OptionSpec* o : specs) {
            std::string flag = fmt::format("--{}", o->name);
            CLI::Option* opt = nullptr;
            if (o->kind == OptKind::Flag) {
                opt = app.add_flag(for_help ? flag : fmt::format("{}{{{}}}", flag, kFlagGiven));
            } else {
                // Every value is kept as given, in order (a repeated Text option: the last
                // one wins, in parse_cli); values are text here, checked by policy.cpp.
                opt = app.add_option(flag)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
            }
            if (for_help) {
                std::string help(o->help);
                std::string shown = o->kind == OptKind::Text ? std::string(o->default_value) : "";
                if (values != nullptr && o->kind != OptKind::Flag) {
                    shown.clear();
                    if (auto it = values->find(o->name); it != values->end())
                        for (const auto& item : it->second)
                            shown += (shown.empty() ? "" : ", ") + item.value;
                }
                if (!shown.empty()) help += fmt::format(" [default: {}]", shown);
                opt->description(help);
                if (o->kind != OptKind::Flag) opt->option_text(std::string(o->value_name));
            }
            options.emplace_back(o, opt);
        }
        if (for_help) {
            app.formatter(std::make_shared<HelpFormatter>());
            app.get_formatter()->column_width(30);
            app.footer(kFooter);
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
        if (auto s = suggest_option(name.substr(2)); !s.empty())
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

CliArgs parse_cli(const std::vector<std::string>& args) {
    CliArgs out;
    Model m(options_named(args), false);
    // CLI11 takes the arguments last first. It reads `--name=` as `--name` with its value still
    // to come (the next argument); pyjail reads it as an empty value, so such an argument is
    // handed over with a stand-in for the empty value. Arguments map one to one, so the
    // command is taken from `args`, unchanged.
    std::vector<std::string> reversed;
    reversed.reserve(args.size());
    for (auto it = args.rbegin(); it != args.rend(); ++it) {
        bool empty_value = it->size() > 3 && it->back() == '=' && it->compare(0, 2, "--") == 0 &&
                           find_option(std::string_view(*it).substr(2, it->size() - 3)) != nullptr;
        reversed.push_back(empty_value ? *it + kEmptyValue : *it);
    }
    try {
        m.app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        out.exit_now = 0;
        out.help = true;
        out.output = usage_text();
        return out;
    } catch (const CLI::ArgumentMismatch& e) {
        throw missing_value(args, e);
    } catch (const CLI::ParseError& e) {
        throw UsageError(e.what(), "see pyjail --help");
    }
    if (m.version->count() > 0) {
        out.exit_now = 0;
        out.output = "pyjail " PYJAIL_VERSION "\n";
        return out;
    }
    // What CLI11 did not take: the command (after the `--` that ended the options, if one
    // did), and before it any unknown option.
    std::vector<std::string> rest = m.app.remaining();
    std::size_t command = rest.size();
    if (!rest.empty() && rest[0] == "--") command = rest.size() - 1;
    else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') throw unknown_option(rest[0]);
    out.command.assign(args.end() - static_cast<std::ptrdiff_t>(command), args.end());

    for (const auto& [spec, opt] : m.options) {
        const std::vector<std::string>& results = opt->results();
        if (results.empty()) continue;
        std::string name(spec->name);
        auto& values = out.given[name];
        switch (spec->kind) {
            case OptKind::Flag:
                for (const auto& r : results)
                    if (r != kFlagGiven)
                        throw UsageError(fmt::format("--{} takes no value", name), "see pyjail --help");
                values = {"true"};
                break;
            case OptKind::Text:
            case OptKind::List:
                for (const auto& r : results) values.push_back(r == kEmptyValue ? std::string() : r);
                if (spec->kind == OptKind::Text) values.erase(values.begin(), values.end() - 1);
                break;
        }
    }
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
