#include <doctest/doctest.h>

#include <set>

#include "command.hpp"
#include "error.hpp"

using namespace pyjail;

namespace {
using Args = std::vector<std::string>;
const std::set<std::string> kRootfs = {"/usr/bin/python3", "/usr/bin/python3.11",
                                       "/usr/bin/python", "/usr/bin/env"};
FileKind in_rootfs(const std::string& p) {
    if (p == "/etc/passwd") return FileKind::NotExecutable;
    return kRootfs.count(p) != 0 ? FileKind::Executable : FileKind::Missing;
}
}  // namespace

TEST_CASE("python names") {
    CHECK(is_python_name("python"));
    CHECK(is_python_name("python3"));
    CHECK(is_python_name("python3.11"));
    CHECK_FALSE(is_python_name("python3."));
    CHECK_FALSE(is_python_name("python3.x"));
    CHECK_FALSE(is_python_name("python2"));
    CHECK_FALSE(is_python_name("/usr/bin/python3"));
}

TEST_CASE("finding the script in a python command line") {
    CHECK(find_python_script({"python", "x.py"}) == 1);
    CHECK(find_python_script({"python", "-u", "-B", "x.py", "-c", "y"}) == 3);
    CHECK(find_python_script({"python", "-uB", "x.py"}) == 2);
    CHECK(find_python_script({"python", "-W", "error", "x.py"}) == 3);
    CHECK(find_python_script({"python", "-Werror", "x.py"}) == 2);
    CHECK(find_python_script({"python", "-X", "importtime", "x.py"}) == 3);
    CHECK(find_python_script({"python", "--check-hash-based-pycs", "never", "x.py"}) == 3);
    CHECK(find_python_script({"python", "--", "-x.py"}) == 2);
    CHECK_FALSE(find_python_script({"python", "-c", "print(1)", "x.py"}));
    CHECK_FALSE(find_python_script({"python", "-Ic", "print(1)"}));
    CHECK_FALSE(find_python_script({"python", "-m", "json.tool", "x.json"}));
    CHECK_FALSE(find_python_script({"python", "-", "x.py"}));
    CHECK_FALSE(find_python_script({"python"}));
    CHECK_FALSE(find_python_script({"python", "-V"}));
    CHECK_FALSE(find_python_script({"python", "--version"}));
    CHECK_FALSE(find_python_script({"python", "--"}));
}

TEST_CASE("python always means the rootfs's interpreter") {
    auto r = resolve_command({"python3", "x.py"}, in_rootfs, {"python3", "python3.11"});
    CHECK(r.is_python);
    CHECK(r.exec_path == "/usr/bin/python3");
    CHECK(r.script_index == 1);
    CHECK(resolve_command({"python3.11", "-c", "1"}, in_rootfs, {}).exec_path == "/usr/bin/python3.11");
}

TEST_CASE("other commands are looked up in the jail's PATH") {
    CHECK(resolve_command({"env"}, in_rootfs, {}).exec_path == "/usr/bin/env");
    CHECK(resolve_command({"/usr/bin/env"}, in_rootfs, {}).exec_path == "/usr/bin/env");
    CHECK(resolve_command({"./tool"}, in_rootfs, {}).exec_path == "./tool");
}

TEST_CASE("a command that is not in the jail is refused with 127") {
    auto err = [](Args a) {
        try {
            resolve_command(a, in_rootfs, {"python3", "python3.11"});
        } catch (const JailError& e) {
            CHECK(e.exit_code() == 127);
            return e.one_line();
        }
        return std::string("no error");
    };
    CHECK(err({"python3.99"}) == "command: python3.99 is not in the jail's rootfs (it has: "
                                 "python3, python3.11) (run `python3`, or build a rootfs from "
                                 "that interpreter)");
    CHECK(err({"ls"}) == "command: ls: command not found in the jail (PATH=/usr/local/bin:/usr/"
                         "bin:/bin; the rootfs has: python3, python3.11) (the jail sees only its "
                         "rootfs, not the host's programs)");
    CHECK(err({"/bin/sh"}) == "command: /bin/sh is not in the jail (the host's files are not "
                              "visible in the jail; bind it with --ro-bind)");
    try {
        resolve_command({"/etc/passwd"}, in_rootfs, {});
        FAIL("no error");
    } catch (const JailError& e) {
        CHECK(e.exit_code() == 126);
        CHECK(e.one_line() == "command: /etc/passwd cannot be executed: it is not an executable file");
    }
}
