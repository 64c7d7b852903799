#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "child_step.hpp"

using namespace pyjail;

TEST_CASE("every child step has one name, and the man page lists it as a value of error.step") {
    std::ifstream in(PYJAIL_SOURCE_DIR "/man/pyjail.1");
    REQUIRE(in);
    std::stringstream man;
    man << in.rdbuf();
    std::set<std::string_view> seen;
    for (const auto& s : kChildSteps) {
        CAPTURE(s.name);
        CHECK(child_step_name(s.step) == s.name);
        CHECK(seen.insert(s.name).second);
        // As the man page spells it: bold, with roff's escaped hyphens.
        std::string roff = "\\fB";
        for (char c : s.name) roff += c == '-' ? std::string("\\-") : std::string(1, c);
        CHECK(man.str().find(roff + "\\fR") != std::string::npos);
    }
    CHECK(child_step_name(static_cast<ChildStep>(9999)) == "unknown");
}
