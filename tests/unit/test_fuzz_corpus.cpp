// Every input of the fuzz corpora (tests/fuzz/corpus/TARGET/), replayed through the fuzz
// targets' own functions: an input that once crashed a parser stays a regression test here,
// in the normal build, without clang or libFuzzer.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "shipped_sets.hpp"
#include "targets.hpp"

namespace {

std::size_t replay(const char* target, void (*run)(std::string_view)) {
    std::filesystem::path dir = std::filesystem::path(PYJAIL_SOURCE_DIR) / "tests/fuzz/corpus" / target;
    std::size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (!entry.is_regular_file()) continue;
        std::string input = slurp(entry.path().string());
        INFO(entry.path().string());
        CHECK_NOTHROW(run(input));
        ++n;
    }
    return n;
}

}  // namespace

TEST_CASE("the fuzz corpora replay without a crash") {
    CHECK(replay("profile", pyjail::fuzz::profile) >= 5);
    CHECK(replay("seccomp_set", pyjail::fuzz::seccomp_set) >= 3);
    CHECK(replay("cli", pyjail::fuzz::cli) >= 5);
    CHECK(replay("run_request", pyjail::fuzz::run_request) >= 3);
    CHECK(replay("dbus", pyjail::fuzz::dbus) >= 3);
    CHECK(replay("egress", pyjail::fuzz::egress) >= 3);
}
