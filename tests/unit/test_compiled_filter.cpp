#include <doctest/doctest.h>

#include "compiled_filter.hpp"
#include "seccomp.hpp"
#include "shipped_sets.hpp"

using namespace pyjail;

namespace {

struct Fixture {
    FilterInputs in{slurp(kSeccompDir + "python.toml"), slurp(kSeccompDir + "groups.toml"), NetMode::None};
    SeccompSet set = parse_seccomp_set(in.set_text, "python.toml", in.groups_text, "groups.toml");
    CompiledFilter out{set.allow, set.deny, compile_seccomp(set, NetMode::None)};
    std::string file = encode_compiled_filter(in, out);
};
}  // namespace

TEST_CASE("a compiled filter comes back exactly, for exactly its inputs") {
    Fixture f;
    auto back = decode_compiled_filter(f.file, f.in);
    REQUIRE(back);
    CHECK(back->allow == f.set.allow);
    CHECK(back->deny == f.set.deny);
    REQUIRE(back->program.size() == f.out.program.size());
    for (std::size_t i = 0; i < back->program.size(); ++i) {
        CHECK(back->program[i].code == f.out.program[i].code);
        CHECK(back->program[i].k == f.out.program[i].k);
    }
}

TEST_CASE("any other input misses: an edited set or groups file, another network mode") {
    Fixture f;
    FilterInputs edited = f.in;
    edited.set_text += "# a comment is an edit too\n";
    CHECK_FALSE(decode_compiled_filter(f.file, edited));
    FilterInputs groups = f.in;
    groups.groups_text.replace(groups.groups_text.find("ptrace"), 6, "ptracf");
    CHECK_FALSE(decode_compiled_filter(f.file, groups));
    FilterInputs loop = f.in;
    loop.net = NetMode::Loopback;
    CHECK_FALSE(decode_compiled_filter(f.file, loop));
    // The file name follows the inputs, so a copy of the set under another name still hits.
    CHECK(compiled_filter_file_name(f.in) != compiled_filter_file_name(edited));
    CHECK(compiled_filter_file_name(f.in) != compiled_filter_file_name(loop));
    CHECK(compiled_filter_file_name(f.in) == compiled_filter_file_name(Fixture().in));
}

TEST_CASE("--net allow loads loopback's file, never none's") {
    Fixture none;
    FilterInputs loop_in = none.in, allow_in = none.in;
    loop_in.net = NetMode::Loopback;
    allow_in.net = NetMode::Allow;
    CompiledFilter loop_out{none.set.allow, none.set.deny, compile_seccomp(none.set, NetMode::Loopback)};
    std::string loop_file = encode_compiled_filter(loop_in, loop_out);
    CHECK(compiled_filter_file_name(allow_in) == compiled_filter_file_name(loop_in));
    CHECK(decode_compiled_filter(loop_file, allow_in));
    CHECK_FALSE(decode_compiled_filter(none.file, allow_in));
    CHECK(std::string(net_mode_name(NetMode::Allow)) == "allow");
}

TEST_CASE("a stale, truncated or padded file is never loaded") {
    Fixture f;
    std::string other_version = f.file;
    other_version.replace(other_version.find("\npyjail ") + 8, 1, "9");
    CHECK_FALSE(decode_compiled_filter(other_version, f.in));
    for (std::size_t cut : {std::size_t{0}, std::size_t{10}, f.file.size() / 2, f.file.size() - 9,
                            f.file.size() - 1})
        CHECK_FALSE(decode_compiled_filter(f.file.substr(0, cut), f.in));
    CHECK_FALSE(decode_compiled_filter(f.file + "x", f.in));
    // A program of a length that is not whole instructions.
    std::string ragged = f.file;
    auto at = ragged.rfind("\nbpf ") + 5;
    auto nl = ragged.find('\n', at);
    std::size_t n = std::stoul(ragged.substr(at, nl - at));
    ragged.replace(at, nl - at, std::to_string(n - 1));
    ragged.erase(ragged.size() - 2, 1);
    CHECK_FALSE(decode_compiled_filter(ragged, f.in));
}
