#include <doctest/doctest.h>

#include "throttle.hpp"

using namespace pyjail;

TEST_CASE("a token bucket: a burst at once, then its rate") {
    TokenBucket b(2000, 200, 1000.0);  // 2 a millisecond
    int taken = 0;
    while (b.take(1000.0)) ++taken;
    CHECK(taken == 200);
    CHECK(b.ms_until(1000.0) == doctest::Approx(0.5));
    CHECK(b.ms_until(1000.0, 20) == doctest::Approx(10));
    CHECK_FALSE(b.take(1000.25));
    CHECK(b.take(1000.5));
    CHECK_FALSE(b.take(1000.5));
    // Ten seconds idle refill the burst, not more.
    CHECK(b.ms_until(11000.0, 200) == 0);
    taken = 0;
    while (b.take(11000.0)) ++taken;
    CHECK(taken == 200);
    // Over a second at a steady demand: the rate (plus nothing saved up).
    taken = 0;
    for (double t = 11000.0; t < 12000.0; t += 0.1)
        if (b.take(t)) ++taken;
    CHECK(taken >= 1995);
    CHECK(taken <= 2000);
}

TEST_CASE("a token bucket ignores a clock that goes backwards") {
    TokenBucket b(1000, 1, 500.0);
    CHECK(b.take(500.0));
    CHECK_FALSE(b.take(100.0));
    CHECK(b.ms_until(100.0) == doctest::Approx(1));
    CHECK(b.take(501.0));
}
