// `pyjail launcher`: its requests decoded (and every malformed one refused), its answers
// encoded, and its subcommand on the command line.
#include <doctest/doctest.h>

#include <string>

#include "cli.hpp"
#include "error.hpp"
#include "launcher.hpp"

using namespace pyjail;

namespace {
std::string words(std::initializer_list<std::string_view> ws) { return join_launch_words(ws); }
}  // namespace

TEST_CASE("launcher: a run request carries its id, directory and pyjail's arguments") {
    auto r = decode_launch_request(words({"PYJAIL-LAUNCH/1", "run", "7", "/home/u", "--quiet", "--", "python"}));
    REQUIRE(r);
    CHECK(r->op == LaunchRequest::Op::Run);
    CHECK(r->id == 7);
    CHECK(r->cwd == "/home/u");
    CHECK(r->args == std::vector<std::string>{"--quiet", "--", "python"});
    auto k = decode_launch_request(words({"PYJAIL-LAUNCH/1", "kill", "7"}));
    REQUIRE(k);
    CHECK((k->op == LaunchRequest::Op::Kill && k->id == 7));
}

TEST_CASE("launcher: malformed requests are refused, not guessed at") {
    for (const std::string& bad :
         {words({"PYJAIL-LAUNCH/2", "run", "1", "/", "x"}), words({"PYJAIL-LAUNCH/1", "run", "1", "/"}),
          words({"PYJAIL-LAUNCH/1", "run", "1", "relative", "x"}), words({"PYJAIL-LAUNCH/1", "run", "-1", "/", "x"}),
          words({"PYJAIL-LAUNCH/1", "run", "1x", "/", "x"}), words({"PYJAIL-LAUNCH/1", "run", "", "/", "x"}),
          words({"PYJAIL-LAUNCH/1", "kill", "1", "extra"}), words({"PYJAIL-LAUNCH/1", "stop", "1"}),
          words({"PYJAIL-LAUNCH/1", "run", "99999999999999999999", "/", "x"}), std::string(), std::string("PYJAIL")})
        CHECK_FALSE(decode_launch_request(bad));
    CHECK_FALSE(decode_launch_request(words({"PYJAIL-LAUNCH/1", "run", "1", "/", std::string(kMaxLaunchBytes, 'a')})));
}

TEST_CASE("launcher: its answers") {
    CHECK(encode_launch_started(3) == words({"PYJAIL-LAUNCH/1", "started", "3"}));
    CHECK(encode_launch_ended(3, -9) == words({"PYJAIL-LAUNCH/1", "ended", "3", "-9"}));
    CHECK(encode_launch_refused(3, "why") == words({"PYJAIL-LAUNCH/1", "refused", "3", "why"}));
}

TEST_CASE("launcher: the subcommand takes no option nor argument") {
    CHECK(parse_cli({"launcher"}).subcommand == Subcommand::Launcher);
    CHECK_THROWS_AS(parse_cli({"launcher", "--quiet"}), UsageError);
    CHECK_THROWS_AS(parse_cli({"launcher", "x"}), UsageError);
    // Anywhere but first, it is a command to run in the jail, as before.
    CHECK(parse_cli({"--quiet", "launcher"}).command == std::vector<std::string>{"launcher"});
}
