#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli.hpp"
#include "edit_distance.hpp"
#include "error.hpp"
#include "options.hpp"
#include "profile.hpp"
#include "profiles_command.hpp"

using namespace pyjail;

namespace {
std::string error_of(std::string_view text) {
    try {
        Settings s = default_settings();
        apply_profile(s, parse_profile(text, "p.toml"));
    } catch (const JailError& e) {
        return e.one_line();
    }
    return "no error";
}
}  // namespace

TEST_CASE("profile: values of every shape") {
    auto p = parse_profile(
        "# comment\n"
        "net = \"loopback\"   # trailing comment\n"
        "wall-time = 2.5\n"
        "tmpfs-size = '1G'\n"
        "ro-bind = [\"a:/mnt/a\",\n  'b:/mnt/b', # item comment\n]\n"
        "env = []\n",
        "p.toml");
    REQUIRE(p.entries.size() == 5);
    CHECK(p.entries[0].key == "net");
    CHECK(p.entries[0].values == std::vector<std::string>{"loopback"});
    CHECK(p.entries[1].values == std::vector<std::string>{"2.5"});
    CHECK(p.entries[2].values == std::vector<std::string>{"1G"});
    CHECK(p.entries[3].is_list);
    CHECK(p.entries[3].values == std::vector<std::string>{"a:/mnt/a", "b:/mnt/b"});
    CHECK(p.entries[3].line == 5);
    CHECK(p.entries[4].values.empty());
}

TEST_CASE("profile: string escapes") {
    auto p = parse_profile("env = [\"A=x\\\"y\\\\z\"]\n", "p.toml");
    CHECK(p.entries[0].values[0] == "A=x\"y\\z");
}

TEST_CASE("profile: errors name the file, the line and the key") {
    CHECK(error_of("net = \"none\"\nwal-time = 3\n") ==
          "p.toml:2: unknown key 'wal-time' (did you mean 'wall-time'?)");
    CHECK(error_of("frobnicate = 1\n") ==
          "p.toml:1: unknown key 'frobnicate' (see `pyjail --help` for the keys)");
    CHECK(error_of("explain = true\n") ==
          "p.toml:1: unknown key 'explain' ('explain' is a command-line option only)");
    CHECK(error_of("net = none\n") ==
          "p.toml:1: key 'net': value none is not a quoted string, number or true/false "
          "(strings need quotes: net = \"none\")");
    CHECK(error_of("net = \"none\n") == "p.toml:1: key 'net': string is not closed with \"");
    CHECK(error_of("\n\nnet = [\"none\"]\n") == "p.toml:3: key 'net' takes one value, not a list");
    CHECK(error_of("ro-bind = \"/x\"\n") ==
          "p.toml:1: key 'ro-bind' takes a list, e.g. ro-bind = [\"/x\"]");
    CHECK(error_of("net = \"none\"\nnet = \"loopback\"\n") == "p.toml:2: key 'net' is set twice");
    CHECK(error_of("[jail]\n") ==
          "p.toml:1: tables ([section]) are not part of the profile format; write `key = value` "
          "lines");
    CHECK(error_of("net \"none\"\n") == "p.toml:1: expected '=' after key 'net'");
    CHECK(error_of("ro-bind = [\"a\"\nnet = \"x\"\n") ==
          "p.toml:2: key 'ro-bind': expected ',' or ']' in array");
    CHECK(error_of("net = \"none\" extra\n") == "p.toml:1: key 'net': unexpected text after the value");
    CHECK(error_of("net =\n") == "p.toml:1: key 'net' has no value");
}

TEST_CASE("profile replaces defaults; the command line replaces scalars and appends to lists") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("net = \"loopback\"\nro-bind = [\"/a\"]\n", "p.toml"));
    CHECK(setting(s, "net").value == "loopback");
    CHECK(setting(s, "net").source == Source::Profile);
    CHECK(setting(s, "net").origin == "p.toml:1");

    CliArgs cli = parse_cli({"--net", "none", "--ro-bind", "/b", "--ro-bind=/c", "--", "python3"});
    apply_cli(s, cli);
    CHECK(setting(s, "net").value == "none");
    CHECK(setting(s, "net").source == Source::CommandLine);
    REQUIRE(s.at("ro-bind").size() == 3);
    CHECK(s.at("ro-bind")[0].value == "/a");
    CHECK(s.at("ro-bind")[2].value == "/c");
    CHECK(cli.command == std::vector<std::string>{"python3"});
}

TEST_CASE("cli: the command starts at -- or at the first word that is not an option") {
    CHECK(parse_cli({"--", "python3", "-c", "pass"}).command ==
          std::vector<std::string>{"python3", "-c", "pass"});
    CHECK(parse_cli({"--net", "none", "python3", "-c", "pass"}).command ==
          std::vector<std::string>{"python3", "-c", "pass"});
    CHECK(parse_cli({"--wall-time", "3", "--", "python3", "--", "x"}).command ==
          std::vector<std::string>{"python3", "--", "x"});
    CHECK(parse_cli({"--explain"}).given.at("explain") == std::vector<std::string>{"true"});
    CHECK(parse_cli({"--version"}).exit_now == 0);
    CHECK(parse_cli({"--help"}).output.find("--wall-time") != std::string::npos);
}

TEST_CASE("cli: errors") {
    auto err = [](std::vector<std::string> args) {
        try {
            parse_cli(args);
        } catch (const JailError& e) {
            return e.one_line();
        }
        return std::string("no error");
    };
    CHECK(err({"--frob", "--", "python3"}) == "unknown option --frob (see pyjail --help)");
    CHECK(err({"--net"}).find("--net") != std::string::npos);
}

TEST_CASE("every profile key is an option, and suggestions only name profile keys") {
    for (const auto& o : option_table()) {
        CHECK(!o.help.empty());
        // A flag is a profile key only as a boolean that is off unless set (true/false in a
        // profile): allow-sensitive-bind.
        if (o.kind == OptKind::Flag && o.profile_key) CHECK(o.default_value == "false");
        if (o.kind == OptKind::Flag && o.name != "allow-sensitive-bind") CHECK_FALSE(o.profile_key);
    }
    CHECK(suggest_option("tmpfs_size") == "tmpfs-size");
    CHECK(suggest_option("xyzzy").empty());
    // A profile cannot set --profile; the command line can, so a typo of it is suggested there.
    CHECK(suggest_option("proflie").empty());
    CHECK(suggest_option("proflie", true) == "profile");
    CHECK(suggest_option("explian", true) == "explain");
    try {
        parse_cli({"--proflie", "strict", "--", "python3"});
        FAIL("no error");
    } catch (const UsageError& e) {
        CHECK(e.one_line() == "unknown option --proflie (did you mean --profile?)");
    }
}

TEST_CASE("the closest word to a typo, ignoring case") {
    const std::vector<std::string> names = {"batch", "repl", "standard", "strict"};
    CHECK(closest_word("Strict", names) == "strict");
    CHECK(closest_word("STANDARD", names) == "standard");
    CHECK(closest_word("stirct", names) == "strict");
    CHECK(closest_word("bach", names) == "batch");
    CHECK(closest_word("nosuch", names).empty());
    CHECK(closest_word("x", names).empty());
    CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("the shipped profiles parse and apply") {
    for (const char* name : {"strict", "standard", "batch", "repl"}) {
        std::string path = std::string(PYJAIL_SOURCE_DIR) + "/profiles/" + name + ".toml";
        FILE* f = std::fopen(path.c_str(), "r");
        REQUIRE(f != nullptr);
        std::string text;
        char buf[4096];
        while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
        std::fclose(f);
        Settings s = default_settings();
        CHECK_NOTHROW(apply_profile(s, parse_profile(text, path)));
    }
}

TEST_CASE("cli: values, repeats and mistakes") {
    CHECK(parse_cli({"--memory=1G", "--memory", "2G", "--", "x"}).given.at("memory") ==
          std::vector<std::string>{"2G"});  // the last one wins
    CHECK(parse_cli({"--env", "A=1", "--env=B=2", "x"}).given.at("env") ==
          std::vector<std::string>{"A=1", "B=2"});
    CHECK(parse_cli({"--hostname", "--", "x"}).given.at("hostname") ==
          std::vector<std::string>{"--"});  // a value may look like anything
    CHECK(parse_cli({"-h"}).output.find("\nUsage: pyjail [OPTIONS] [--] COMMAND") != std::string::npos);
    CHECK(parse_cli({"-V"}).output == "pyjail " PYJAIL_VERSION "\n");
    CHECK(parse_cli({"x", "--help"}).command == std::vector<std::string>{"x", "--help"});
    CHECK_THROWS_WITH_AS(parse_cli({"--memory"}), "--memory needs a value (SIZE)", UsageError);
    CHECK_THROWS_WITH_AS(parse_cli({"--memry", "1G"}), "unknown option --memry", UsageError);
    CHECK_THROWS_WITH_AS(parse_cli({"--verbose=yes"}), "--verbose takes no value", UsageError);
    CHECK_THROWS_WITH_AS(parse_cli({"-x"}), "unknown option -x", UsageError);
    // `--name=` is an empty value, also before another option, and never touches the command.
    CHECK(parse_cli({"--memory=", "--net", "none", "x"}).given.at("memory") ==
          std::vector<std::string>{""});
    CHECK(parse_cli({"--env=", "--env", "A=1", "x"}).given.at("env") ==
          std::vector<std::string>{"", "A=1"});
    CHECK(parse_cli({"x", "--memory=", "--verbose="}).command ==
          std::vector<std::string>{"x", "--memory=", "--verbose="});
    CHECK_THROWS_WITH_AS(parse_cli({"--verbose="}), "--verbose takes no value", UsageError);
    CHECK_THROWS_WITH_AS(parse_cli({"--explain=true"}), "--explain takes no value", UsageError);
    CHECK(parse_cli({"--quiet", "--quiet", "x"}).given.at("quiet") == std::vector<std::string>{"true"});
    CHECK_THROWS_WITH_AS(parse_cli({"--net", "none", "--frob=1", "x"}), "unknown option --frob",
                         UsageError);
    CHECK(parse_cli({"--", "--frob"}).command == std::vector<std::string>{"--frob"});
    CHECK(parse_cli({"--explain", "--"}).command.empty());
    // --help lists every option of the table.
    std::string help = parse_cli({"--help"}).output;
    for (const auto& o : option_table())
        CHECK_MESSAGE(help.find(fmt::format("  --{} ", o.name)) != std::string::npos, o.name);
    try {
        parse_cli({"--wall-tim=3"});
    } catch (const UsageError& e) {
        CHECK(e.hint() == "did you mean --wall-time?");
    }
}

TEST_CASE("pyjail profiles: each profile's description is its opening comment's first line") {
    CHECK(profile_description("# strict: the default profile, for code you do not trust.\n# More.\nnet = \"none\"\n",
                              "strict") == "the default profile, for code you do not trust.");
    // Blank lines and rules before it are passed over; the name is taken off only as a prefix.
    CHECK(profile_description("\n   \n#\n####\n  #  mine: for my data   \n", "mine") == "for my data");
    CHECK(profile_description("# for my data\n", "mine") == "for my data");
    CHECK(profile_description("# minefield: x\n", "mine") == "minefield: x");
    // A key first: the file opens with no comment (a later comment is a key's).
    CHECK(profile_description("net = \"none\"  # no network\n# later\n", "p").empty());
    CHECK(profile_description("", "p").empty());
    CHECK(profile_description("# \r\n", "p").empty());
    // Bounded, and nothing a terminal would act on.
    CHECK(profile_description("# \x1b]0;pwned\x07 x\n", "p") == "?]0;pwned? x");
    std::string long_line = profile_description("# " + std::string(300, 'a') + "\n", "p");
    CHECK(long_line == std::string(kMaxDescription - 3, 'a') + "...");
    std::string accents;
    for (int i = 0; i < 60; ++i) accents += "\xc3\xa9";  // U+00E9, two bytes each
    std::string cut = profile_description("# " + accents + "\n", "p");
    CHECK(cut.size() <= kMaxDescription);
    CHECK(cut == accents.substr(0, 96) + "...");  // not within a character
}

TEST_CASE("pyjail profiles: the list, and its command line") {
    std::vector<ProfileListing> list = {
        {"batch", "for cron.", "/p/batch.toml", false, ""},
        {"strict", "the default.", "/p/strict.toml", true, ""},
        {"x\x1b", "", "/p/x\x1b.toml", false, "profile: /p/x.toml is writable by uid 7"},
    };
    CHECK(format_profile_list(list) == "NAME      DESCRIPTION\n"
                                       "batch     for cron.\n"
                                       "          /p/batch.toml\n"
                                       "strict    the default.\n"
                                       "          /p/strict.toml (the default)\n"
                                       "x?        cannot be used: profile: /p/x.toml is writable by uid 7\n"
                                       "          /p/x?.toml\n");
    CHECK(parse_cli({"profiles"}).subcommand == Subcommand::Profiles);
    auto help = parse_cli({"profiles", "--help"});
    CHECK(help.exit_now == 0);
    CHECK(help.output.rfind("Usage: pyjail profiles\n", 0) == 0);
    CHECK_THROWS_WITH_AS(parse_cli({"profiles", "strict"}), "profiles: unknown argument 'strict'", UsageError);
    CHECK_THROWS_WITH_AS(parse_cli({"profiles", "--json"}), "profiles: unknown argument '--json'", UsageError);
    // Only as pyjail's first word: elsewhere it is a command to run in the jail, as ever.
    CHECK(parse_cli({"--", "profiles"}).command == std::vector<std::string>{"profiles"});
    CHECK(parse_cli({"--net", "none", "profiles"}).subcommand == Subcommand::Run);
    CHECK(parse_cli({"--help"}).output.find("pyjail profiles") != std::string::npos);
}

TEST_CASE("the options --explain writes as TOML numbers") {
    std::vector<std::string> numbers;
    for (const auto& o : option_table())
        if (o.profile_key && is_number_option(o)) numbers.emplace_back(o.name);
    CHECK(numbers == std::vector<std::string>{"wall-time", "kill-grace", "cpu-time", "pids", "cpus", "nofile"});
    CHECK_FALSE(is_number_option(*find_option("memory")));  // a size: "512M"
    CHECK_FALSE(is_number_option(*find_option("allow-sensitive-bind")));  // a flag: true/false
}

namespace {
// Profiles by name, as profile_loader would find them: a missing one throws as read_profile
// does.
ProfileLoader fake_loader(const std::map<std::string, std::string>& files) {
    return [files](const std::string& name, const std::string&) {
        auto it = files.find(name);
        if (it == files.end()) throw UsageError(fmt::format("no profile named '{}'", name));
        return LoadedProfile{name + ".toml", it->second, name};
    };
}

std::string chain_error(const std::map<std::string, std::string>& files, const std::string& name) {
    try {
        profile_chain(name, fake_loader(files));
    } catch (const JailError& e) {
        return e.one_line();
    }
    return "no error";
}

const std::map<std::string, std::string> kShipped = {
    {"strict", "wall-time = 300\ncpu-time = 120\npids = 128\nfsize = \"64M\"\nro-bind = []\n"},
    {"standard", "extends = \"strict\"\nro-bind = [\".:/work\"]\nwall-time = 900\nfsize = \"\"\n"},
    {"batch", "extends = \"strict\"\nwall-time = 3600\ncpu-time = 0\n"},
};
}  // namespace

TEST_CASE("profiles: a profile without extends starts from strict, strict from the defaults") {
    auto files = kShipped;
    files["mine"] = "net = \"loopback\"\n";  // a hand-written profile naming one key
    Settings s = settings_from_chain(profile_chain("mine", fake_loader(files)));
    CHECK(setting(s, "net").value == "loopback");
    CHECK(setting(s, "wall-time").value == "300");  // strict's, not the built-in 0
    CHECK(setting(s, "pids").value == "128");
    CHECK(setting(s, "wall-time").origin == "strict.toml:1");
    CHECK(setting(s, "kill-grace").value == "5");  // strict leaves it out: the built-in default

    auto chain = profile_chain("strict", fake_loader(files));
    REQUIRE(chain.size() == 1);
    CHECK(setting(settings_from_chain(chain), "memory").value == "");  // built-in
}

TEST_CASE("profiles: extends chains, each key replacing its base's, a list as a whole") {
    auto files = kShipped;
    files["mine"] = "extends = \"standard\"\ncpus = 1\nro-bind = [\"/data\"]\n";
    auto chain = profile_chain("mine", fake_loader(files));
    REQUIRE(chain.size() == 3);
    CHECK(chain[0].path == "strict.toml");
    CHECK(chain[2].path == "mine.toml");
    Settings s = settings_from_chain(chain);
    CHECK(setting(s, "wall-time").value == "900");  // standard's
    CHECK(setting(s, "cpu-time").value == "120");   // strict's, through standard
    CHECK(setting(s, "fsize").value == "");         // standard unset it
    CHECK(setting(s, "cpus").value == "1");
    REQUIRE(s.at("ro-bind").size() == 1);
    CHECK(s.at("ro-bind")[0].value == "/data");
    Settings b = settings_from_chain(profile_chain("batch", fake_loader(files)));
    CHECK(setting(b, "cpu-time").value == "0");
    CHECK(setting(b, "pids").value == "128");
}

TEST_CASE("profiles: a missing base, a cycle and a bad extends are one-line errors") {
    auto files = kShipped;
    files["a"] = "net = \"none\"\nextends = \"nosuch\"\n";
    CHECK(chain_error(files, "a") == "a.toml:2: extends 'nosuch': no profile named 'nosuch'");
    files["a"] = "extends = \"b\"\n";
    files["b"] = "# b\nextends = \"a\"\n";
    CHECK(chain_error(files, "a") ==
          "b.toml:2: profiles extend each other in a cycle: a.toml -> b.toml -> a.toml (remove "
          "one of their `extends` lines)");
    files["a"] = "extends = \"a\"\n";
    CHECK(chain_error(files, "a") ==
          "a.toml:1: profiles extend each other in a cycle: a.toml -> a.toml (remove one of "
          "their `extends` lines)");
    files["a"] = "extends = [\"strict\"]\n";
    CHECK(chain_error(files, "a") ==
          "a.toml:1: key 'extends' takes one profile name or file (e.g. extends = \"standard\" or "
          "extends = \"base.toml\")");
    files["a"] = "extends = \"strict\"\nextends = \"batch\"\n";
    CHECK(chain_error(files, "a") == "a.toml:2: key 'extends' is set twice");  // the parser's
    // strict edited to extend a profile that has no `extends` of its own: back to strict.
    files["strict"] = "extends = \"c\"\n";
    files["c"] = "pids = 1\n";
    CHECK(chain_error(files, "strict").find("in a cycle: strict.toml -> c.toml -> strict.toml") !=
          std::string::npos);
    CHECK(chain_error(files, "nosuch") == "no profile named 'nosuch'");
}

TEST_CASE("profiles: a chain deeper than kMaxProfileDepth is refused") {
    auto files = kShipped;
    for (int i = 0; i < 12; ++i) files[fmt::format("p{}", i)] = fmt::format("extends = \"p{}\"\n", i + 1);
    CHECK(chain_error(files, "p0").find("more than 8 deep") != std::string::npos);
}

TEST_CASE("--help shows each option's value under a profile") {
    auto files = kShipped;
    Settings s = settings_from_chain(profile_chain("strict", fake_loader(files)));
    std::string help = usage_text(s, "strict");
    CHECK(help.find("[default: 300]") != std::string::npos);
    CHECK(help.find("Defaults shown are profile strict's") != std::string::npos);
    Settings st = settings_from_chain(profile_chain("standard", fake_loader(files)));
    CHECK(usage_text(st, "standard").find("[default: .:/work]") != std::string::npos);
    CHECK(help_profile({"--profile", "batch", "--help"}) == "batch");
    CHECK(help_profile({"--help", "--profile=./x.toml"}) == "./x.toml");
    CHECK(help_profile({"--help", "--", "--profile", "x"}) == std::nullopt);
}
