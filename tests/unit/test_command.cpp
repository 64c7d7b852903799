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

TEST_CASE("a python command line parsed once: kind, target, arguments, options") {
    PythonCommand f = parse_python_command({"python", "-uB", "-X", "dev", "-Wignore", "s.py", "-c", "x"});
    CHECK(f.kind == PythonKind::File);
    CHECK(f.target == "s.py");
    CHECK(f.target_index == 5);
    CHECK(f.args == Args{"-c", "x"});
    CHECK(f.options == std::vector<PythonOption>{{'u', ""}, {'B', ""}, {'X', "dev"}, {'W', "ignore"}});
    PythonCommand c = parse_python_command({"python", "-Ic", "print(1)", "a"});
    CHECK(c.kind == PythonKind::Code);
    CHECK(c.target == "print(1)");
    CHECK(c.args == Args{"a"});
    CHECK(c.options == std::vector<PythonOption>{{'I', ""}});
    CHECK(parse_python_command({"python", "-cpass"}).target == "pass");
    PythonCommand m = parse_python_command({"python", "-m", "json.tool", "-x"});
    CHECK(m.kind == PythonKind::Module);
    CHECK(m.target == "json.tool");
    CHECK(m.args == Args{"-x"});
    PythonCommand in = parse_python_command({"python", "-", "a"});
    CHECK(in.kind == PythonKind::Stdin);
    CHECK(in.target.empty());
    CHECK(in.args == Args{"a"});
    CHECK(parse_python_command({"python"}).kind == PythonKind::Stdin);
    PythonCommand dashed = parse_python_command({"python", "--", "-x.py", "a"});
    CHECK(dashed.kind == PythonKind::File);
    CHECK(dashed.target == "-x.py");
    CHECK(parse_python_command({"python", "--check-hash-based-pycs", "never", "x.py"}).options ==
          std::vector<PythonOption>{{'-', "check-hash-based-pycs=never"}});
    // What python itself refuses, in its words.
    CHECK(parse_python_command({"python", "-c"}).malformed == "Argument expected for the -c option");
    CHECK(parse_python_command({"python", "-X"}).malformed == "Argument expected for the -X option");
    CHECK(parse_python_command({"python", "-Z", "x.py"}).malformed == "Unknown option: -Z");
    CHECK(parse_python_command({"python", "--nope"}).malformed == "unknown option --nope");
    CHECK(parse_python_command({"python", "-uc"}).malformed == "Argument expected for the -c option");
}

TEST_CASE("a run from a template takes the options it can honour, and names the first it cannot") {
    for (const Args& ok : {Args{"python", "-X", "dev", "s.py"}, Args{"python", "-u", "-B", "-q", "-I", "-E", "-s", "-P", "s.py"},
                           Args{"python", "-W", "error", "-Xfaulthandler", "-c", "pass"}, Args{"python", "-Xdev=1", "-m", "x"},
                           Args{"python", "-"}}) {
        INFO(ok[1]);
        CHECK_NOTHROW(plan_template_command(ok));
    }
    auto refusal = [](const Args& argv) {
        try {
            plan_template_command(argv);
        } catch (const JailError& e) {
            return e.one_line() + " [" + std::to_string(e.exit_code()) + "]";
        }
        return std::string();
    };
    CHECK(refusal({"python", "-O", "s.py"}) ==
          "--via: python's -O acts when the interpreter starts, and a run from a template is a fork of an "
          "interpreter started before it (run it without --via) [125]");
    CHECK(refusal({"python", "-u", "-X", "importtime", "s.py"}) ==
          "--via: python's -X importtime acts when the interpreter starts, and a run from a template is a fork "
          "of an interpreter started before it (run it without --via) [125]");
    for (const Args& no : {Args{"python", "-S", "s.py"}, Args{"python", "-uOO", "s.py"}, Args{"python", "-R", "s.py"},
                           Args{"python", "-i", "s.py"}, Args{"python", "-V"}, Args{"python", "--help"},
                           Args{"python", "-X", "utf8", "-c", "pass"}, Args{"python", "-b", "s.py"},
                           Args{"python", "--check-hash-based-pycs", "always", "s.py"}}) {
        INFO(no[1]);
        CHECK(refusal(no).find("[125]") != std::string::npos);
    }
    CHECK(refusal({"python", "-c"}) ==
          "python: Argument expected for the -c option (python refuses this command line too; see python -h) [2]");
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
    // A typo of pyjail's own subcommands (which only its first word names) says so.
    CHECK(err({"doctr"}) == "command: doctr: command not found in the jail (PATH=/usr/local/bin:/usr/"
                            "bin:/bin; the rootfs has: python3, python3.11) (the jail sees only its "
                            "rootfs, not the host's programs; did you mean 'pyjail doctor'?)");
    CHECK(err({"help"}).ends_with("; did you mean 'pyjail --help'?)"));
    CHECK(err({"Serve"}).ends_with("; did you mean 'pyjail serve'?)"));
    CHECK(err({"rootsf"}).ends_with("; did you mean 'pyjail rootfs'?)"));
    CHECK(err({"doctor"}).ends_with("; did you mean 'pyjail doctor'?)"));  // e.g. after an option
    CHECK(err({"he"}).find("did you mean") == std::string::npos);  // two edits of two letters
    CHECK(err({"xyzzy"}).find("did you mean") == std::string::npos);
    try {
        resolve_command({"/etc/passwd"}, in_rootfs, {});
        FAIL("no error");
    } catch (const JailError& e) {
        CHECK(e.exit_code() == 126);
        CHECK(e.one_line() == "command: /etc/passwd cannot be executed: it is not an executable file");
    }
}
