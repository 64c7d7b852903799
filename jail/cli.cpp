#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "error.hpp"

namespace pyjail {

namespace {

struct App {
    CLI::App app{"pyjail: run Python in a jail (namespaces, read-only rootfs, no privileges)",
                 "pyjail"};
    std::map<std::string, std::string, std::less<>> text;
    std::map<std::string, std::vector<std::string>, std::less<>> lists;
    std::map<std::string, bool, std::less<>> flags;
    bool version = false;

    App() {
        app.set_help_flag("-h,--help", "Print this help and exit");
        app.add_flag("-V,--version", version, "Print the version and exit");
        app.footer(
            "Run:   pyjail [OPTIONS] [--] COMMAND [ARGS...]\n"
            "       pyjail doctor [--json]   (can this host run jails? how to fix it)\n"
            "  python, python3 and python3.X name the rootfs's interpreter; in\n"
            "  `python script.py`, the script is made visible read-only inside the jail.\n"
            "Exit status: the program's own; 128+N if it died of signal N; 124 when\n"
            "--wall-time or --cpu-time ran out; 125 when pyjail failed; 126/127 when the\n"
            "command cannot be executed / is not found.  See pyjail(1).");
        for (const auto& o : option_table()) {
            std::string flag = "--" + std::string(o.name);
            std::string help(o.help);
            if (!o.default_value.empty() && o.kind == OptKind::Text)
                help += fmt::format(" [default: {}]", o.default_value);
            switch (o.kind) {
                case OptKind::Text:
                    app.add_option(flag, text[std::string(o.name)], help)
                        ->type_name(std::string(o.value_name))
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
                    break;
                case OptKind::List:
                    app.add_option(flag, lists[std::string(o.name)], help)
                        ->type_name(std::string(o.value_name))
                        ->type_size(1)
                        ->expected(1)
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
                    break;
                case OptKind::Flag:
                    app.add_flag(flag, flags[std::string(o.name)], help);
                    break;
            }
        }
    }
};

}  // namespace

std::string usage_text() {
    App a;
    return a.app.help();
}

CliArgs parse_cli(const std::vector<std::string>& args) {
    CliArgs out;
    // The command starts after the first `--`, or at the first word that is not an option.
    auto sep = std::find(args.begin(), args.end(), "--");
    std::vector<std::string> ours(args.begin(), sep);
    if (sep != args.end()) out.command.assign(sep + 1, args.end());

    App a;
    a.app.prefix_command(sep == args.end());
    std::vector<std::string> reversed(ours.rbegin(), ours.rend());  // CLI11 wants them reversed
    try {
        a.app.parse(reversed);
    } catch (const CLI::CallForHelp&) {
        out.exit_now = 0;
        out.output = a.app.help();
        return out;
    } catch (const CLI::ExtrasError& e) {
        auto extras = a.app.remaining();
        std::string first = extras.empty() ? std::string("?") : extras.front();
        if (!first.empty() && first[0] == '-')
            throw UsageError(fmt::format("unknown option {}", first), "see pyjail --help");
        throw UsageError(fmt::format("unexpected argument '{}' before --", first),
                         "write options first, then -- and the command");
    } catch (const CLI::ParseError& e) {
        throw UsageError(e.what(), "see pyjail --help");
    }
    if (a.version) {
        out.exit_now = 0;
        out.output = "pyjail " PYJAIL_VERSION "\n";
        return out;
    }
    if (sep == args.end()) {
        out.command = a.app.remaining();
        if (!out.command.empty() && out.command.front().size() > 1 && out.command.front()[0] == '-')
            throw UsageError(fmt::format("unknown option {}", out.command.front()),
                             "see pyjail --help");
    }
    for (const auto& o : option_table()) {
        std::string name(o.name);
        CLI::Option* opt = a.app.get_option("--" + name);
        if (opt->count() == 0) continue;
        switch (o.kind) {
            case OptKind::Text: out.given[name] = {a.text[name]}; break;
            case OptKind::List: out.given[name] = a.lists[name]; break;
            case OptKind::Flag: out.given[name] = {a.flags[name] ? "true" : "false"}; break;
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
