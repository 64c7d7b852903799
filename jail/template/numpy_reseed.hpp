// numpy's global generator, made each run's own without touching the template's pages.
//
// Why: a run is a fork of the template and starts with the template's numpy.random state;
// unless it is reseeded, every run draws the same numbers. numpy's seed() does it in Python
// and numpy, which in a fresh fork touches (and so copies) about 170 of the template's pages:
// half a millisecond of every run's way to its first line. Here the template finds the state once
// (the MT19937 behind numpy.random's legacy RandomState, through the capsule numpy publishes
// for C code) and checks that the memory there is the state numpy itself reports; each run
// then writes a new key from the kernel's entropy into it, as numpy's seed() with no seed
// does: a page or two copied.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pyjail::template_ {

inline constexpr std::size_t kMtWords = 624;

// numpy's mt19937_state (numpy/random/src/mt19937/mt19937.h): the key, then the position.
struct Mt19937State {
    std::uint32_t key[kMtWords];
    int pos;
};

// Pure: whether `state` holds `key` (`words` of them) and `pos`, numpy's own report of its
// state. True only if the layout above is this numpy's.
bool mt19937_state_is(const Mt19937State& state, const std::uint32_t* key, std::size_t words, long pos);

// Pure: the state numpy's seed() without a seed makes from fresh entropy (kMtWords - 1
// words): key[0] with only its top bit set (never the all-zero state), the rest the entropy,
// and the next draw starts a new block.
void seed_mt19937(Mt19937State& state, const std::uint32_t* entropy);

// In the template, once: the state each run reseeds (module.cpp checks it is numpy's first).
void keep_numpy_state(Mt19937State* state);

// In a run's program, before its first line: true once the kept state has a key of the run's
// own; false if none is kept or the kernel's entropy could not be had (the caller then
// reseeds through numpy).
bool reseed_numpy_state();

}  // namespace pyjail::template_
