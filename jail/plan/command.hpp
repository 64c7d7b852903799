// What to execute inside the jail. `python`, `python3` and `python3.X` always mean the rootfs's
// interpreter, whatever the host's PATH says; other names are looked up in the jail's PATH.
// For Python, finds the script argument so the jail can make that file visible and run it by
// its in-jail path. Pure: the rootfs is consulted through a callback.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

bool is_python_name(std::string_view name);

// A python command line (`python [options] FILE|-c CODE|-m MODULE|-|nothing [ARGS]`), read
// by CPython's own grammar, once, here: the jail finds the script in it, the audit log the
// code, and a run from a template receives it parsed (run_request.hpp) rather than reading
// the words again.
enum class PythonKind : std::uint32_t { File = 0, Code = 1, Module = 2, Stdin = 3 };

struct PythonOption {
    char letter;        // 'u', 'X', 'W', ...; '-' for a long option (its name in `value`)
    std::string value;  // -W's and -X's argument (-X's is NAME or NAME=VALUE)
    bool operator==(const PythonOption&) const = default;
};

struct PythonCommand {
    std::vector<PythonOption> options;  // in the order given
    PythonKind kind = PythonKind::Stdin;
    std::string target;                 // the script, the code, or the module; "" for stdin
    std::vector<std::string> args;      // what follows the target: sys.argv[1:]
    std::optional<std::size_t> target_index;  // argv's index of the script (File)
    // Not empty: python itself refuses this command line, for this reason (its own words).
    std::string malformed;
};

// argv[0] is the interpreter.
PythonCommand parse_python_command(const std::vector<std::string>& argv);

// Index of the script in a python command line (argv[0] is the interpreter), or nullopt for
// `-c`, `-m`, `-` (stdin), no script (interactive), or -h/--version-like runs.
std::optional<std::size_t> find_python_script(const std::vector<std::string>& argv);

// A run from a template is a fork of an interpreter that started long before it: an option
// that acts only at the interpreter's start (-O, -S, -X importtime, ...) cannot apply. Why
// `o` cannot, or "" when the run honours it (pyjail_template.py: -u -B -q -E -s -I -P, -W,
// -X dev, -X faulthandler). The client refuses the run with this reason before it sends
// anything; the template refuses a request holding such an option.
std::string template_option_refusal(const PythonOption& o);

// The command a run from a template is sent (run_request.hpp), out of the in-jail argv.
// Throws UsageError naming the first option the run cannot honour, or JailError (exit
// status 2, as python's) for a command line python itself refuses.
PythonCommand plan_template_command(const std::vector<std::string>& argv);

struct ResolvedCommand {
    std::string exec_path;  // absolute path inside the jail
    bool is_python = false;
    std::optional<std::size_t> script_index;
};

enum class FileKind { Missing, NotExecutable, Executable };

// `probe(path)` says what an absolute in-jail path names.
// `pythons` lists the interpreter names the rootfs has (for the not-found message).
// Throws JailError with exit code 127 when the command is not in the jail.
ResolvedCommand resolve_command(const std::vector<std::string>& argv,
                                const std::function<FileKind(const std::string&)>& probe,
                                const std::vector<std::string>& pythons);

}  // namespace pyjail
