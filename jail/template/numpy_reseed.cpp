#include "numpy_reseed.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace pyjail::template_ {

bool mt19937_state_is(const Mt19937State& state, const std::uint32_t* key, std::size_t words, long pos) {
    return words == kMtWords && std::memcmp(state.key, key, sizeof state.key) == 0 && state.pos == pos;
}

void seed_mt19937(Mt19937State& state, const std::uint32_t* entropy) {
    state.key[0] = 0x80000000U;
    std::memcpy(state.key + 1, entropy, (kMtWords - 1) * sizeof(std::uint32_t));
    state.pos = static_cast<int>(kMtWords);
}

namespace {

Mt19937State* g_state = nullptr;

}  // namespace

void keep_numpy_state(Mt19937State* state) { g_state = state; }

bool reseed_numpy_state() {
    if (g_state == nullptr) return false;
    std::uint32_t entropy[kMtWords - 1];
    auto* at = reinterpret_cast<unsigned char*>(entropy);
    std::size_t got = 0;
    while (got < sizeof entropy) {
        ssize_t n = ::getrandom(at + got, sizeof entropy - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;  // e.g. a filter without getrandom: numpy's seed() reads /dev/urandom
        got += static_cast<std::size_t>(n);
    }
    seed_mt19937(*g_state, entropy);
    return true;
}

}  // namespace pyjail::template_
