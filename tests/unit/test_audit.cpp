#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "audit.hpp"
#include "cli.hpp"
#include "error.hpp"
#include "policy.hpp"
#include "profile.hpp"
#include "sha256.hpp"

using namespace pyjail;

TEST_CASE("sha256: the FIPS 180-4 test vectors") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // A million 'a's, fed in pieces that straddle the 64-byte blocks.
    Sha256 h;
    std::string chunk(999, 'a');
    for (int i = 0; i < 1000; ++i) h.update(chunk);
    h.update(std::string(1000, 'a'));
    CHECK(h.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

namespace {
RunFacts ok_run() {
    RunFacts f;
    f.outcome.kind = Outcome::Kind::Exited;
    f.outcome.code = 0;
    f.profile = "strict";
    f.command = {"python3", "-c", "print(1)"};
    f.wall_s = 0.25;
    f.user_s = 0.1;
    f.system_s = 0.05;
    f.memory_peak = 9 << 20;
    return f;
}
}  // namespace

TEST_CASE("sha256 manifest lines: digest and name; anything else is malformed") {
    const std::string hex(64, 'a');
    auto text = parse_manifest_line(hex + "  ./usr/bin/python3");
    REQUIRE(text);
    CHECK(text->hex == hex);
    CHECK(text->name == "./usr/bin/python3");
    CHECK(parse_manifest_line(hex + " *./bin")->name == "./bin");
    CHECK_FALSE(parse_manifest_line(hex + "  "));                  // no name
    CHECK_FALSE(parse_manifest_line(hex + " ./x"));                // one space
    CHECK_FALSE(parse_manifest_line(std::string(64, 'A') + "  x"));  // upper-case digest
    CHECK_FALSE(parse_manifest_line("\\" + hex + "  x\\ny"));     // an escaped name
    CHECK_FALSE(parse_manifest_line(""));
}

TEST_CASE("audit line: one JSON object per line, with who ran what and how it ended") {
    AuditIdentity who{1764595640, 1000, "alice", sha256_hex("print(1)")};
    RunFacts f = ok_run();
    f.denied.add("ptrace", 2);
    std::string line = audit_line(who, f);
    REQUIRE(line.back() == '\n');
    CHECK(line.find('\n') == line.size() - 1);
    auto j = nlohmann::json::parse(line);
    CHECK(j["time"] == "2025-12-01T13:27:20Z");
    CHECK(j["uid"] == 1000);
    CHECK(j["user"] == "alice");
    CHECK(j["profile"] == "strict");
    CHECK(j["command"] == nlohmann::json::array({"python3", "-c", "print(1)"}));
    CHECK(j["command_truncated"] == false);
    CHECK(j["program_sha256"] == sha256_hex("print(1)"));
    CHECK(j["status"] == "ok");
    CHECK(j["exit_code"] == 0);
    CHECK(j["wall_time_s"] == 0.25);
    CHECK(j["memory_peak_bytes"] == 9 << 20);
    CHECK(j["denied_syscalls"] == nlohmann::json::parse(R"([{"syscall":"ptrace","count":2}])"));
    CHECK(j["denied_syscalls_total"] == 2);
    CHECK(j["error"].is_null());
}

TEST_CASE("audit line: a failed set-up is logged with its error") {
    RunFacts f;
    f.setup_error = true;
    f.exit_code = 125;
    f.error_step = "script";
    f.error_message = "cannot open x.py";
    f.profile = "batch";
    auto j = nlohmann::json::parse(audit_line({0, 0, "", std::nullopt}, f));
    CHECK(j["status"] == "setup-error");
    CHECK(j["exit_code"] == 125);
    CHECK(j["error"] == "script: cannot open x.py");
    CHECK(j["user"].is_null());
    CHECK(j["program_sha256"].is_null());
    CHECK(j["cpu_user_s"].is_null());
}

TEST_CASE("audit line: bounded, however long the command line (one write per line)") {
    RunFacts f = ok_run();
    f.command = {"python3", "-c", std::string(1 << 20, '"')};  // 2 MiB once escaped
    for (int i = 0; i < 10000; ++i) f.command.push_back(std::string(100, '\x01'));
    f.setup_error = true;
    f.error_message = std::string(100000, 'e');
    f.profile = std::string(5000, '/');
    std::string line = audit_line({0, 0, "u", std::nullopt}, f);
    CHECK(line.size() <= kMaxAuditLine);
    auto j = nlohmann::json::parse(line);
    CHECK(j["command_truncated"] == true);
    CHECK(j["command"][0] == "python3");
    CHECK(j["status"] == "setup-error");
    // Invalid UTF-8 is replaced, never an exception.
    RunFacts bad = ok_run();
    bad.command = {"python3", std::string("\xff\xfe", 2)};
    CHECK_NOTHROW(nlohmann::json::parse(audit_line({0, 0, "u", std::nullopt}, bad)));
}

TEST_CASE("audit: the program text a python command line carries") {
    using V = std::vector<std::string>;
    CHECK(inline_program(V{"python3", "-c", "print(1)"}) == "print(1)");
    CHECK(inline_program(V{"python3", "-I", "-c", "x", "arg"}) == "x");
    CHECK(inline_program(V{"python", "-Ic", "y"}) == "y");
    CHECK(inline_program(V{"python3", "-cprint(2)"}) == "print(2)");
    CHECK(inline_program(V{"python3", "-X", "dev", "-c", "z"}) == "z");
    CHECK(inline_program(V{"python3", "script.py", "-c", "no"}) == std::nullopt);
    CHECK(inline_program(V{"python3", "-m", "mod", "-c", "no"}) == std::nullopt);
    CHECK(inline_program(V{"python3", "-"}) == std::nullopt);
    CHECK(inline_program(V{"python3", "-c"}) == std::nullopt);
    CHECK(inline_program(V{"sh", "-c", "id"}) == std::nullopt);
}

TEST_CASE("policy: audit-log, made absolute against the current directory") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("audit-log = \"log/audit.jsonl\"\n", "p.toml"));
    CHECK(make_policy(s, {"python3"}, "/srv/job").audit_log == "/srv/job/log/audit.jsonl");
    CHECK(make_policy(default_settings(), {"python3"}, "/").audit_log.empty());
}
