// numpy's global generator reseeded in place in each run (template/numpy_reseed.hpp): the
// check that the memory found is numpy's state, and the state a reseed leaves.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "numpy_reseed.hpp"

using namespace pyjail::template_;

namespace {

Mt19937State state_with(std::uint32_t first, int pos) {
    Mt19937State s{};
    for (std::size_t i = 0; i < kMtWords; ++i) s.key[i] = first + static_cast<std::uint32_t>(i) * 2654435761U;
    s.pos = pos;
    return s;
}

}  // namespace

TEST_CASE("numpy's state is recognised only as numpy reports it") {
    const Mt19937State s = state_with(7, 624);
    std::vector<std::uint32_t> key(s.key, s.key + kMtWords);
    CHECK(mt19937_state_is(s, key.data(), key.size(), 624));
    CHECK_FALSE(mt19937_state_is(s, key.data(), key.size(), 623));     // another position
    CHECK_FALSE(mt19937_state_is(s, key.data(), key.size() - 1, 624)); // a shorter key
    key[kMtWords - 1] ^= 1;                                             // the last word differs
    CHECK_FALSE(mt19937_state_is(s, key.data(), key.size(), 624));
}

TEST_CASE("a reseed leaves numpy's unseeded state: the top bit first, the entropy after, a new block next") {
    Mt19937State s = state_with(3, 17);
    std::vector<std::uint32_t> entropy(kMtWords - 1);
    for (std::size_t i = 0; i < entropy.size(); ++i) entropy[i] = static_cast<std::uint32_t>(i * 40503U + 11U);
    seed_mt19937(s, entropy.data());
    CHECK(s.key[0] == 0x80000000U);
    for (std::size_t i = 1; i < kMtWords; ++i) REQUIRE(s.key[i] == entropy[i - 1]);
    CHECK(s.pos == 624);
}

TEST_CASE("nothing kept, nothing reseeded") {
    keep_numpy_state(nullptr);
    CHECK_FALSE(reseed_numpy_state());
}

TEST_CASE("a kept state gets a key from the kernel: two reseeds differ") {
    Mt19937State s = state_with(5, 100);
    keep_numpy_state(&s);
    REQUIRE(reseed_numpy_state());
    const Mt19937State first = s;
    REQUIRE(reseed_numpy_state());
    keep_numpy_state(nullptr);
    CHECK(s.key[0] == 0x80000000U);
    CHECK(s.pos == 624);
    CHECK_FALSE(mt19937_state_is(first, s.key, kMtWords, 624));
}
