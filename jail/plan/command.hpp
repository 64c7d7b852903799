// What to execute inside the jail. `python`, `python3` and `python3.X` always mean the rootfs's
// interpreter, whatever the host's PATH says; other names are looked up in the jail's PATH.
// For Python, finds the script argument so the jail can make that file visible and run it by
// its in-jail path. Pure: the rootfs is consulted through a callback.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pyjail {

bool is_python_name(std::string_view name);

// Index of the script in a python command line (argv[0] is the interpreter), or nullopt for
// `-c`, `-m`, `-` (stdin), no script (interactive), or -h/--version-like runs.
std::optional<std::size_t> find_python_script(const std::vector<std::string>& argv);

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
