#include "cli.hpp"

#include <fmt/format.h>

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
    "command cannot be executed / is not found.  See pyjail(1).\n";

UsageError unknown_option(const std::string& arg) {
    std::string name = arg.substr(0, arg.find('='));
    std::string hint = "see pyjail --help";
    if (name.rfind("--", 0) == 0)
        if (auto s = suggest_option(name.substr(2)); !s.empty())
            hint = fmt::format("did you mean --{}?", s);
    return UsageError(fmt::format("unknown option {}", name), hint);
}

}  // namespace

std::string usage_text() {
    std::string out = fmt::format("{}\nUsage: pyjail [OPTIONS] [--] COMMAND [ARGS...]\n\nOptions:\n", kSummary);
    auto line = [&](const std::string& left, std::string_view help) {
        out += fmt::format("  {:<28}{}\n", left, help);
    };
    line("-h,--help", "Print this help and exit");
    line("-V,--version", "Print the version and exit");
    for (const auto& o : option_table()) {
        std::string left = fmt::format("--{}", o.name);
        if (o.kind != OptKind::Flag) left += fmt::format(" {}", o.value_name);
        std::string help(o.help);
        if (!o.default_value.empty() && o.kind == OptKind::Text)
            help += fmt::format(" [default: {}]", o.default_value);
        line(left, help);
    }
    return out + "\n" + kFooter;
}

// Options come from the option table alone, so the parser is a loop over the arguments:
// `--name VALUE`, `--name=VALUE`, `--flag`, `-h/--help`, `-V/--version`; the command starts
// after `--` or at the first word that is not an option. (A general-purpose parser cost a
// tenth of a millisecond per run just to build its model of these options.)
CliArgs parse_cli(const std::vector<std::string>& args) {
    CliArgs out;
    std::size_t i = 0;
    for (; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {
            ++i;
            break;
        }
        if (arg.size() < 2 || arg[0] != '-') break;  // the command
        if (arg == "-h" || arg == "--help") {
            out.exit_now = 0;
            out.output = usage_text();
            return out;
        }
        if (arg == "-V" || arg == "--version") {
            out.exit_now = 0;
            out.output = "pyjail " PYJAIL_VERSION "\n";
            return out;
        }
        if (arg.rfind("--", 0) != 0) throw unknown_option(arg);
        auto eq = arg.find('=');
        std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
        const OptionSpec* o = find_option(name);
        if (o == nullptr) throw unknown_option(arg);
        auto& values = out.given[name];
        if (o->kind == OptKind::Flag) {
            if (eq != std::string::npos)
                throw UsageError(fmt::format("--{} takes no value", name), "see pyjail --help");
            values = {"true"};
            continue;
        }
        std::string value;
        if (eq != std::string::npos) {
            value = arg.substr(eq + 1);
        } else if (i + 1 < args.size()) {
            value = args[++i];
        } else {
            throw UsageError(fmt::format("--{} needs a value ({})", name, o->value_name),
                             "see pyjail --help");
        }
        if (o->kind == OptKind::Text) values = {value};
        else values.push_back(value);
    }
    out.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
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
