#include <doctest/doctest.h>

#include <cerrno>

#include "cli.hpp"
#include "environment.hpp"
#include "error.hpp"
#include "policy.hpp"
#include "profile.hpp"

using namespace pyjail;

namespace {
Policy policy_from_profile(std::string_view profile, std::vector<std::string> command = {"python3"}) {
    Settings s = default_settings();
    apply_profile(s, parse_profile(profile, "p.toml"));
    return make_policy(s, std::move(command), "/home/u/proj");
}
std::string policy_error_of(std::string_view profile) {
    try {
        policy_from_profile(profile);
    } catch (const JailError& e) {
        return e.one_line();
    }
    return "no error";
}
}  // namespace

TEST_CASE("sizes and seconds") {
    CHECK(parse_size("64M", "x") == 64ULL << 20);
    CHECK(parse_size("1G", "x") == 1ULL << 30);
    CHECK(parse_size("512k", "x") == 512ULL << 10);
    CHECK(parse_size("4096", "x") == 4096);
    CHECK_THROWS_WITH_AS(parse_size("64Q", "--tmpfs-size"), "--tmpfs-size: '64Q' is not a size",
                         UsageError);
    CHECK_THROWS_AS(parse_size("0", "x"), UsageError);
    CHECK_THROWS_AS(parse_size("-1M", "x"), UsageError);
    CHECK_THROWS_AS(parse_size("99999999999999G", "x"), UsageError);
    CHECK(format_size(8ULL << 30) == "8G");
    CHECK(format_size(512ULL << 20) == "512M");
    CHECK(format_size(1536ULL << 20) == "1536M");
    CHECK(format_size(4096) == "4K");
    CHECK(format_size(1000) == "1000");
    CHECK(format_size(0) == "0");
    CHECK(parse_seconds("2.5", "x") == doctest::Approx(2.5));
    CHECK(parse_seconds("0", "x") == 0);
    CHECK_THROWS_AS(parse_seconds("-1", "x"), UsageError);
    CHECK_THROWS_AS(parse_seconds("1s", "x"), UsageError);
    CHECK_THROWS_AS(parse_seconds("nan", "x"), UsageError);
    CHECK_THROWS_AS(parse_seconds("inf", "x"), UsageError);
}

TEST_CASE("paths") {
    CHECK(normalize_path("/a//b/./c/") == "/a/b/c");
    CHECK(normalize_path("/") == "/");
    CHECK(absolute_path("data", "/home/u") == "/home/u/data");
    CHECK(absolute_path(".", "/home/u") == "/home/u");
    CHECK(absolute_path("/x/", "/home/u") == "/x");
}

TEST_CASE("binds: SRC[:DST], validated before anything runs") {
    auto b = parse_bind("data:/mnt/data", false, "--ro-bind", "/home/u");
    CHECK(b.source == "/home/u/data");
    CHECK(b.target == "/mnt/data");
    CHECK_FALSE(b.writable);
    CHECK(parse_bind("/srv/x", true, "--bind", "/").target == "/srv/x");
    CHECK(parse_bind(".:/work/", false, "o", "/home/u").target == "/work");

    auto err = [](const std::string& text) {
        try {
            parse_bind(text, false, "--ro-bind", "/home/u");
        } catch (const JailError& e) {
            return e.one_line();
        }
        return std::string("no error");
    };
    CHECK(err("data") == "--ro-bind: 'data' is relative, so where it goes in the jail is unclear "
                         "(name the target: data:/work/data (the jail's working directory), or e.g. "
                         "data:/mnt/data)");
    CHECK(err("in/data.csv/").find("in/data.csv/:/work/data.csv (") != std::string::npos);
    CHECK(err("..").find("(name the target: ..:/mnt/data)") != std::string::npos);
    CHECK(err("/x:rel") == "--ro-bind: target 'rel' is not an absolute path (targets are paths "
                           "inside the jail, e.g. /mnt/data)");
    CHECK(err("/x:/mnt/../etc") ==
          "--ro-bind: target '/mnt/../etc' contains '..' (write the target without '..')");
    CHECK(err("/x:/") == "--ro-bind: target '/' is reserved for the jail (choose a target "
                         "outside /, /proc and /dev, e.g. /mnt/data)");
    CHECK(err("/x:/proc/sys").find("reserved") != std::string::npos);
    CHECK(err("/x:/dev").find("reserved") != std::string::npos);
    CHECK(err("/x:/device") == "no error");
    CHECK(err(":/x").find("no source path") != std::string::npos);
}

TEST_CASE("a bind out of the host user's reach: who asked for it, who cannot reach or enter it, the fix") {
    const JailHostUser nobody{"uid 65534 (nobody)", false};
    BindSpec named = parse_bind("/srv/d:/data", false, "--ro-bind", "/");
    named.named_on_command_line = true;
    CHECK(bind_source_error(named, EACCES, nobody, "/", "strict").one_line() ==
          "bind: --ro-bind: uid 65534 (nobody), the jail's host user, cannot reach /srv/d: Permission denied "
          "(make it readable by that user and every directory above it searchable (chmod o+x), or "
          "--host-user USER who can)");
    // A directory it may not search opens (O_PATH), but nothing in it can be used.
    CHECK(bind_source_error(named, EACCES, nobody, "/", "strict", BindRefusal::Enter).one_line() ==
          "bind: --ro-bind: uid 65534 (nobody), the jail's host user, cannot enter /srv/d: Permission denied "
          "(let that user in (chmod o+rx, or a group or ACL of its), or --host-user USER who can enter it)");
    const BindSpec cwd = parse_bind(".:/work", false, "standard.toml:3: key 'ro-bind'", "/tmp/tmp.x");
    CHECK(bind_source_error(cwd, EACCES, nobody, "/tmp/tmp.x", "standard", BindRefusal::Enter).one_line() ==
          "bind: --profile standard binds the current directory /tmp/tmp.x, which uid 65534 (nobody), the "
          "jail's host user, cannot enter: Permission denied (run from a directory it can enter, chmod o+rx "
          "this one, use --profile strict, or --host-user USER)");
    CHECK(bind_source_error(cwd, ENOENT, nobody, "/tmp/tmp.x", "standard", BindRefusal::Enter).one_line() ==
          "bind: standard.toml:3: key 'ro-bind': cannot use /tmp/tmp.x: No such file or directory (the "
          "source of a bind must exist on the host)");
}

TEST_CASE("sizes too small to be meant are refused, with the unit they likely lacked") {
    auto cli_error = [](std::vector<std::string> args) {
        Settings s = default_settings();
        apply_cli(s, parse_cli(args));
        try {
            make_policy(s, {"python3"}, "/");
        } catch (const JailError& e) {
            CHECK(e.exit_code() == 125);
            return e.one_line();
        }
        return std::string("no error");
    };
    CHECK(cli_error({"--memory", "10", "python3"}) ==
          "--memory: 10 bytes is too small to start Python (at least 2M; did you mean 10M?)");
    CHECK(cli_error({"--memory", "1K", "python3"}) == "--memory: 1K is too small to start Python (at least 2M)");
    CHECK(cli_error({"--memory", "1M", "python3"}) == "--memory: 1M is too small to start Python (at least 2M)");
    CHECK(cli_error({"--memory", "2000000B", "python3"}) ==
          "--memory: 2000000B is too small to start Python (at least 2M)");
    CHECK(cli_error({"--memory", "2M", "python3"}) == "no error");
    CHECK(cli_error({"--memory", "67108864", "python3"}) == "no error");  // bytes, as the package writes them
    CHECK(cli_error({"--tmpfs-size", "10", "python3"}) ==
          "--tmpfs-size: 10 bytes is less than one page, the least a tmpfs holds (at least 4K; did you "
          "mean 10M?)");
    CHECK(cli_error({"--tmpfs-size", "4K", "python3"}) == "no error");
    // A profile's key goes through the same check, named by its file and line.
    CHECK(policy_error_of("memory = \"512\"\n") ==
          "p.toml:1: key 'memory': 512 bytes is too small to start Python (at least 2M; did you mean 512M?)");
    CHECK(policy_error_of("tmpfs-size = \"1K\"\n") ==
          "p.toml:1: key 'tmpfs-size': 1K is less than one page, the least a tmpfs holds (at least 4K)");
}

TEST_CASE("who chose a setting, for messages") {
    CHECK(chosen_by({"64M", Source::Profile, "/usr/share/pyjail/profiles/strict.toml:13"}) == "the strict profile's");
    CHECK(chosen_by({"64M", Source::Profile, "my.toml:2"}) == "the my profile's");
    CHECK(chosen_by({"64M", Source::CommandLine, "--fsize"}).empty());
    CHECK(chosen_by({"", Source::Default, "default"}) == "the default");
}

TEST_CASE("policy: values are typed and errors name their origin") {
    Policy p = policy_from_profile("net = \"loopback\"\nwall-time = 1.5\ntmpfs-size = \"8M\"\n"
                           "env = [\"A=1\", \"B=x=y\"]\nworkdir = \"out\"\n");
    CHECK(p.net == NetMode::Loopback);
    CHECK(p.wall_time == doctest::Approx(1.5));
    CHECK(p.tmpfs_size == 8ULL << 20);
    REQUIRE(p.env.size() == 2);
    CHECK(p.env[1] == std::pair<std::string, std::string>{"B", "x=y"});
    CHECK(p.workdir == "/home/u/proj/out");

    CHECK(policy_error_of("net = \"host\"\n") ==
          "p.toml:1: key 'net': 'host' is not a network mode (use none, loopback or allow)");
    CHECK(policy_error_of("wall-time = \"soon\"\n") ==
          "p.toml:1: key 'wall-time': 'soon' is not a number of seconds (write e.g. 30 or 2.5; "
          "0 means no limit)");
    CHECK(policy_error_of("env = [\"NOVALUE\"]\n") ==
          "p.toml:1: key 'env': 'NOVALUE' is not KEY=VALUE (the host's environment is never "
          "passed: give the value (--env NOVALUE=VALUE), or pass the host's with --env-pass NOVALUE)");
    CHECK(policy_error_of("env = [\"=x\"]\n") ==
          "p.toml:1: key 'env': '=x' is not KEY=VALUE (the host's environment is never "
          "passed; give the value)");
    CHECK(policy_error_of("hostname = \"a b\"\n").find("not a valid host name") != std::string::npos);
    CHECK(policy_error_of("host-user = \"0\"\n").find("must never be host root") != std::string::npos);
    CHECK(policy_error_of("host-user = \"root\"\n").find("must never be host root") != std::string::npos);
    CHECK(policy_error_of("host-user = \"65534:0\"\n").find("must never be host root") != std::string::npos);
    // Any uid_t but -1: ids of pyjail's own range (10 digits) too.
    CHECK(policy_error_of("host-user = \"4294967295:1\"\n").find("is not UID:GID") != std::string::npos);
    CHECK(policy_error_of("host-user = \"18790481920:1\"\n").find("is not UID:GID") != std::string::npos);
    CHECK(parse_id("1879114239") == 1879114239u);
    CHECK(parse_id("4294967294") == 4294967294u);
    CHECK_FALSE(parse_id("4294967295"));
    CHECK_FALSE(parse_id("-1"));
    CHECK_FALSE(parse_id(""));
    CHECK(policy_error_of("ro-bind = [\"/a:/x\", \"/b:/x\"]\n") ==
          "p.toml:1: key 'ro-bind' and p.toml:1: key 'ro-bind' both bind to /x");
    CHECK(policy_error_of("workdir = \"/w\"\nbind = [\"/a:/work\"]\n").find("binds over it") !=
          std::string::npos);
}

TEST_CASE("policy: a command is required unless explaining") {
    Settings s = default_settings();
    CHECK_THROWS_WITH_AS(make_policy(s, {}, "/"), "no command given", UsageError);
    s["explain"] = {{"true", Source::CommandLine, "--explain"}};
    CHECK_NOTHROW(make_policy(s, {}, "/"));
}

TEST_CASE("environment: built from scratch, --env last") {
    Policy p = policy_from_profile("env = [\"LANG=de_DE.UTF-8\", \"X=1\"]\n");
    auto env = jail_environment(p);
    CHECK(env == std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                          "USER=jail", "LOGNAME=jail", "LANG=de_DE.UTF-8",
                                          "PWD=/work", "X=1"});
}

TEST_CASE("sensitive binds: /, homes and their ancestors, credential directories") {
    const std::vector<std::string> homes = {"/home/u", "/srv/home/u"};
    auto why = [&](const std::string& src, std::vector<std::string> creds = {}) {
        return sensitive_bind_reason({src, std::move(creds)}, homes).value_or("");
    };
    CHECK(why("/") == "the whole host file system");
    CHECK(why("/home/u") == "your home directory");
    CHECK(why("/srv/home/u") == "your home directory");
    CHECK(why("/home") == "an ancestor of your home directory /home/u");
    CHECK(why("/srv") == "an ancestor of your home directory /srv/home/u");
    CHECK(why("/root") == "a directory of home directories");
    CHECK(why("/home/u/.ssh") == "inside .ssh, which holds credentials");
    CHECK(why("/home/u/.config/gcloud") == "inside .config, which holds credentials");
    CHECK(why("/home/u/.local/share/keyrings") == "inside .local, which holds credentials");
    // pyjail's own data in .local (a named rootfs's build): its subtree only, unless it holds
    // credentials itself; never another user's, nor a look-alike path.
    CHECK(why("/home/u/.local/share/pyjail/rootfs/mine.pyjail-pip-x1") == "");
    CHECK(why("/home/u/.local/share/pyjail/rootfs/mine.pyjail-pip-x1/relay.sock") == "");
    CHECK(why("/home/u/.local/share/pyjail/rootfs/x", {".ssh"}) == "a directory holding credentials (.ssh)");
    CHECK(why("/home/u/.local/share/pyjail-other") == "inside .local, which holds credentials");
    CHECK(why("/home/u/.local/share") == "inside .local, which holds credentials");
    CHECK(why("/home/other/.local/share/pyjail/rootfs") == "inside .local, which holds credentials");
    CHECK(why("/home/u/.local/share/pyjail") == "");
    CHECK(why("/home/u/.local/share/pyjail/rootfs/x/.ssh/y") == "inside .ssh, which holds credentials");
    CHECK(why("/home/other", {".ssh", ".aws"}) == "a directory holding credentials (.ssh, .aws)");
    // A project directory, even one under the home, is fine.
    CHECK(why("/home/u/proj") == "");
    CHECK(why("/home/u/proj/.configs") == "");
    CHECK(why("/data") == "");
    CHECK(why("/home/user2") == "");  // a sibling of the home, not an ancestor
}

TEST_CASE("a sensitive bind needs the command line AND --allow-sensitive-bind") {
    auto run = [](const std::string& profile, const std::vector<std::string>& cli) {
        Settings s = default_settings();
        apply_profile(s, parse_profile(profile, "p.toml"));
        std::vector<std::string> args = cli;
        args.insert(args.end(), {"--", "python3"});
        CliArgs parsed = parse_cli(args);
        apply_cli(s, parsed);
        Policy p = make_policy(s, parsed.command, "/home/u");
        std::vector<BindSpec> binds = p.binds;
        if (p.workdir) binds.push_back({*p.workdir, "/work", true, p.workdir_origin, p.workdir_named_on_command_line});
        std::vector<BindExposure> sources;
        for (const auto& b : binds) sources.push_back({b.source, {}});
        check_sensitive_binds(p, binds, sources, {"/home/u"});
    };
    // standard's current directory, run from the home (cron): refused, with what to do.
    CHECK_THROWS_WITH_AS(run("ro-bind = [\".:/work\"]\n", {}),
                         "p.toml:1: key 'ro-bind': /home/u is your home directory: the jail would see every "
                         "file there and reach its Unix sockets",
                         UsageError);
    try {
        run("workdir = \".\"\n", {});
        FAIL("not refused");
    } catch (const UsageError& e) {
        CHECK(e.one_line() ==
              "p.toml:1: key 'workdir': /home/u is your home directory: the jail would see every file there "
              "and reach its Unix sockets (run from a project directory, or name it with --workdir "
              "/home/u --allow-sensitive-bind)");
    }
    // The profile's opt-in does not cover the profile's own bind.
    CHECK_THROWS_AS(run("workdir = \".\"\nallow-sensitive-bind = true\n", {}), UsageError);
    // Named on the command line but not allowed: refused; named and allowed: fine.
    CHECK_THROWS_WITH_AS(run("", {"--workdir", "/home/u"}),
                         "--workdir: /home/u is your home directory: the jail would see every file there and "
                         "reach its Unix sockets",
                         UsageError);
    CHECK_NOTHROW(run("", {"--workdir", "/home/u", "--allow-sensitive-bind"}));
    CHECK_NOTHROW(run("allow-sensitive-bind = true\n", {"--ro-bind", "/:/mnt/host"}));
    CHECK_THROWS_AS(run("", {"--ro-bind", "/:/mnt/host"}), UsageError);
    // A project directory needs nothing.
    CHECK_NOTHROW(run("", {"--workdir", "/home/u/proj"}));
}

TEST_CASE("policy: --net allow and its options") {
    auto policy = [](std::vector<std::string> args) {
        Settings s = default_settings();
        apply_profile(s, parse_profile("net = \"allow\"\n", "p.toml"));
        for (std::size_t i = 0; i + 1 < args.size(); i += 2) s[args[i]].push_back({args[i + 1], Source::CommandLine, "--" + args[i]});
        return make_policy(s, {"python3"}, "/");
    };
    Policy p = policy({"allow-host", "pypi.org", "allow-host", "pypi.org:8080", "net-bytes", "10M", "net-dns",
                       "127.0.0.1:5353", "net-resolve", "pypi.org:151.101.0.223"});
    CHECK(p.net == NetMode::Allow);
    REQUIRE(p.egress.hosts.size() == 1);
    CHECK(p.egress.hosts[0].ports == std::vector<std::uint16_t>{80, 443, 8080});
    CHECK(p.egress.bytes == 10u * 1024 * 1024);
    CHECK(p.egress.dns_port == 5353);
    CHECK(p.egress.pins.size() == 1);
    CHECK_THROWS_WITH_AS(policy({}), "p.toml:1: key 'net': 'allow' without --allow-host reaches nothing", UsageError);
    // Egress options without --net allow are an error, never silently dropped.
    Settings s = default_settings();
    s["allow-host"].push_back({"pypi.org", Source::CommandLine, "--allow-host"});
    CHECK_THROWS_WITH_AS(make_policy(s, {"python3"}, "/"),
                         "--allow-host needs --net allow, but default of net is 'none'", UsageError);
}

TEST_CASE("preloads: dotted module names, several to a value, each once, errors naming their origin") {
    auto preloads_of = [](std::string_view profile) {
        Settings s = default_settings();
        apply_profile(s, parse_profile(profile, "p.toml"));
        return preload_modules(s);
    };
    auto error_of = [&](std::string_view profile) -> std::string {
        try {
            preloads_of(profile);
        } catch (const JailError& e) {
            return e.one_line();
        }
        return "no error";
    };
    CHECK(preloads_of("").empty());
    CHECK(preloads_of("preload = [\"numpy,pandas\", \"numpy.random\", \"pandas\", \"_x\", \"caf\xc3\xa9\"]\n") ==
          std::vector<std::string>{"numpy", "pandas", "numpy.random", "_x", "caf\xc3\xa9"});
    CHECK(error_of("preload = [\"numpy pandas\"]\n") ==
          "p.toml:1: key 'preload': 'numpy pandas' is not a module name (give a dotted module name, e.g. "
          "numpy or numpy.random; several as --preload numpy,pandas or one --preload each)");
    for (const char* bad : {"", "numpy,", ",numpy", "1numpy", "numpy..random", ".numpy", "numpy.", "numpy/random",
                            "numpy-random", "numpy;import os"}) {
        std::string profile = std::string("preload = [\"") + bad + "\"]\n";
        CHECK_MESSAGE(error_of(profile).find("is not a module name") != std::string::npos, bad);
    }
}
