#include "command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "edit_distance.hpp"
#include "environment.hpp"
#include "error.hpp"

namespace pyjail {

bool is_python_name(std::string_view name) {
    if (name == "python" || name == "python3") return true;
    if (name.substr(0, 8) != "python3." || name.size() == 8) return false;
    for (char c : name.substr(8))
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

namespace {

// CPython's short options (Python/getopt.c); those followed by ':' take an argument, from the
// rest of their word or the next word.
constexpr std::string_view kPythonShortOptions = "bBc:dEhiIm:OPqRsStuvVW:xX:?";
constexpr std::string_view kPythonLongOptions[] = {"help", "version", "help-env", "help-xoptions", "help-all"};

// pyjail's own subcommands are its first word only: anything else, a typo of one too
// (`pyjail doctr`, `pyjail help`), is a command to run in the jail. When that command is not
// there, the pyjail command it looks like ("" for none).
std::string own_command_like(const std::string& name) {
    static constexpr std::string_view kWords[] = {"doctor", "rootfs", "serve", "help"};
    std::string word = closest_word(name, kWords);
    if (word.empty()) return "";
    return word == "help" ? "pyjail --help" : "pyjail " + word;
}

}  // namespace

PythonCommand parse_python_command(const std::vector<std::string>& argv) {
    // CPython's own option grammar: short options may be grouped (-uB); an option's argument
    // is the rest of its word or the next word; -c and -m end the option list; `-` reads the
    // program from stdin; `--` ends the options, and the next word is the script whatever it
    // looks like.
    PythonCommand c;
    std::size_t i = 1;
    auto rest_from = [&](std::size_t k) { c.args.assign(argv.begin() + static_cast<std::ptrdiff_t>(std::min(k, argv.size())), argv.end()); };
    for (; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.size() < 2 || a[0] != '-') break;
        if (a[1] == '-') {
            std::string name = a.substr(2);
            if (name == "check-hash-based-pycs") {
                if (i + 1 == argv.size()) {
                    c.malformed = "Argument expected for the --check-hash-based-pycs option";
                    return c;
                }
                c.options.push_back({'-', name + "=" + argv[++i]});
            } else if (std::find(std::begin(kPythonLongOptions), std::end(kPythonLongOptions), name) !=
                       std::end(kPythonLongOptions)) {
                c.options.push_back({'-', name});
            } else {
                c.malformed = "unknown option " + a;
                return c;
            }
            continue;
        }
        for (std::size_t j = 1; j < a.size(); ++j) {
            const char letter = a[j];
            const auto at = kPythonShortOptions.find(letter);
            if (at == std::string_view::npos || letter == ':') {
                c.malformed = fmt::format("Unknown option: -{}", letter);
                return c;
            }
            const bool takes_value = at + 1 < kPythonShortOptions.size() && kPythonShortOptions[at + 1] == ':';
            if (!takes_value) {
                c.options.push_back({letter, ""});
                continue;
            }
            std::string value;
            if (j + 1 < a.size()) {
                value = a.substr(j + 1);
            } else if (i + 1 < argv.size()) {
                value = argv[++i];
            } else {
                c.malformed = fmt::format("Argument expected for the -{} option", letter);
                return c;
            }
            if (letter == 'c' || letter == 'm') {
                c.kind = letter == 'c' ? PythonKind::Code : PythonKind::Module;
                c.target = std::move(value);
                rest_from(i + 1);
                return c;
            }
            c.options.push_back({letter, std::move(value)});
            break;
        }
    }
    if (i < argv.size() && argv[i] != "-") {
        c.kind = PythonKind::File;
        c.target = argv[i];
        c.target_index = i;
    }
    rest_from(i + 1);
    return c;
}

std::optional<std::size_t> find_python_script(const std::vector<std::string>& argv) {
    PythonCommand c = parse_python_command(argv);
    if (!c.malformed.empty()) return std::nullopt;
    for (const auto& o : c.options)  // python prints its help or version and runs nothing
        if (o.letter == 'h' || o.letter == '?' || o.letter == 'V' ||
            (o.letter == '-' && o.value.rfind("check-hash-based-pycs", 0) != 0))
            return std::nullopt;
    return c.target_index;
}

std::string template_option_refusal(const PythonOption& o) {
    switch (o.letter) {
        // What the run does itself (pyjail_template.py), or what the template's interpreter,
        // started with -I (no PYTHON* variable, no user site), already does.
        case 'u': case 'B': case 'q': case 'E': case 's': case 'I': case 'P': case 't': case 'W':
            return "";
        case 'X': {
            const std::string name = o.value.substr(0, o.value.find('='));
            if (name == "dev" || name == "faulthandler") return "";
            return fmt::format("python's -X {} acts when the interpreter starts, and a run from a template "
                               "is a fork of an interpreter started before it",
                               name);
        }
        case 'h': case '?': case 'V': case '-':
            if (o.letter != '-' || o.value.rfind("check-hash-based-pycs", 0) != 0)
                return fmt::format("python's {} prints python's own help or version, which a run from a "
                                   "template does not have",
                                   o.letter == '-' ? "--" + o.value : std::string("-") + o.letter);
            return "python's --check-hash-based-pycs acts when the interpreter starts, and a run from a "
                   "template is a fork of an interpreter started before it";
        case 'R':
            return "python's -R asks for a hash seed of the run's own, and a run from a template has its "
                   "template's";
        case 'i':
            return "python's -i (interactive after the program) is not available in a run from a template";
        default:
            return fmt::format("python's -{} acts when the interpreter starts, and a run from a template "
                               "is a fork of an interpreter started before it",
                               o.letter);
    }
}

PythonCommand plan_template_command(const std::vector<std::string>& argv) {
    PythonCommand c = parse_python_command(argv);
    if (!c.malformed.empty())
        throw JailError("python", c.malformed, 0, "python refuses this command line too; see python -h", 2);
    for (const auto& o : c.options)
        if (std::string why = template_option_refusal(o); !why.empty())
            throw UsageError("--via: " + why, "run it without --via");
    return c;
}

ResolvedCommand resolve_command(const std::vector<std::string>& argv,
                                const std::function<FileKind(const std::string&)>& probe,
                                const std::vector<std::string>& pythons) {
    ResolvedCommand r;
    const std::string& name = argv.at(0);
    std::string have = pythons.empty() ? "no Python at all"
                                       : fmt::format("{}", fmt::join(pythons, ", "));
    if (is_python_name(name)) {
        r.is_python = true;
        r.exec_path = "/usr/bin/" + name;
        if (probe(r.exec_path) != FileKind::Executable)
            throw JailError("command", fmt::format("{} is not in the jail's rootfs (it has: {})",
                                                   name, have),
                            0, "run `python3`, or build a rootfs from that interpreter", 127);
        r.script_index = find_python_script(argv);
        return r;
    }
    if (name.empty())
        throw JailError("command", "the command is an empty string", 0, {}, 127);
    if (name.find('/') != std::string::npos) {
        if (name[0] != '/') {
            r.exec_path = name;  // relative to the jail's working directory: found at exec
            return r;
        }
        FileKind kind = probe(name);
        if (kind == FileKind::NotExecutable)
            throw JailError("command", fmt::format("{} cannot be executed: it is not an "
                                                   "executable file",
                                                   name),
                            0, {}, 126);
        if (kind == FileKind::Missing)
            throw JailError("command", fmt::format("{} is not in the jail", name), 0,
                            "the host's files are not visible in the jail; bind it with --ro-bind",
                            127);
        r.exec_path = name;
        return r;
    }
    std::string_view path = kJailPath;
    while (!path.empty()) {
        auto colon = path.find(':');
        std::string dir(path.substr(0, colon));
        path = colon == std::string_view::npos ? std::string_view{} : path.substr(colon + 1);
        std::string candidate = dir + "/" + name;
        if (probe(candidate) == FileKind::Executable) {
            r.exec_path = candidate;
            return r;
        }
    }
    std::string hint = "the jail sees only its rootfs, not the host's programs";
    if (std::string own = own_command_like(name); !own.empty())
        hint += fmt::format("; did you mean '{}'?", own);
    throw JailError("command",
                    fmt::format("{}: command not found in the jail (PATH={}; the rootfs has: {})",
                                name, kJailPath, have),
                    0, hint, 127);
}

}  // namespace pyjail
