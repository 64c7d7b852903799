#include "command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>

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

std::optional<std::size_t> find_python_script(const std::vector<std::string>& argv) {
    // CPython's own option grammar: short options may be grouped (-uB); -c and -m end the
    // option list and take the rest (or the next word) as their argument; -W and -X take an
    // argument; `-` reads the program from stdin; `--` ends the options.
    for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a == "-") return std::nullopt;
        if (a == "--") return i + 1 < argv.size() ? std::optional(i + 1) : std::nullopt;
        if (a.size() < 2 || a[0] != '-') return i;
        if (a[1] == '-') {
            if (a == "--check-hash-based-pycs") ++i;
            else if (a == "--help" || a == "--version" || a == "--help-env" ||
                     a == "--help-xoptions" || a == "--help-all")
                return std::nullopt;
            continue;
        }
        for (std::size_t j = 1; j < a.size(); ++j) {
            char c = a[j];
            if (c == 'c' || c == 'm') return std::nullopt;
            if (c == 'h' || c == '?' || c == 'V') return std::nullopt;
            if (c == 'W' || c == 'X') {
                if (j + 1 == a.size()) ++i;  // argument is the next word
                break;
            }
        }
    }
    return std::nullopt;
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
    throw JailError("command",
                    fmt::format("{}: command not found in the jail (PATH={}; the rootfs has: {})",
                                name, kJailPath, have),
                    0, "the jail sees only its rootfs, not the host's programs", 127);
}

}  // namespace pyjail
