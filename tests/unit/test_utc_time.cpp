// utc_time (jail/pure/utc_time.hpp): the date and time of day gmtime_r gives, by arithmetic
// alone (no time zone file read), across leap days, centuries and before the epoch.
#include <doctest/doctest.h>

#include <ctime>

#include "audit.hpp"
#include "notice.hpp"
#include "utc_time.hpp"

using namespace pyjail;

namespace {

void check_against_gmtime(std::int64_t t) {
    std::time_t tt = static_cast<std::time_t>(t);
    std::tm tm{};
    REQUIRE(::gmtime_r(&tt, &tm) != nullptr);
    const UtcTime u = utc_time(t);
    INFO("t = " << t);
    CHECK(u.year == tm.tm_year + 1900);
    CHECK(u.month == static_cast<unsigned>(tm.tm_mon + 1));
    CHECK(u.day == static_cast<unsigned>(tm.tm_mday));
    CHECK(u.hour == static_cast<unsigned>(tm.tm_hour));
    CHECK(u.minute == static_cast<unsigned>(tm.tm_min));
    CHECK(u.second == static_cast<unsigned>(tm.tm_sec));
}

}  // namespace

TEST_CASE("utc_time: the epoch, leap days and the turn of centuries") {
    static_assert(utc_time(0).year == 1970 && utc_time(0).month == 1 && utc_time(0).day == 1);
    for (std::int64_t t : {0LL, 1LL, 86399LL, 86400LL, -1LL, -86400LL, -86401LL,
                           951782400LL,     // 2000-02-29, a leap day of a century divisible by 400
                           951868800LL,     // 2000-03-01
                           4107542400LL,    // 2100-03-01: 2100 has no leap day
                           4107456000LL,    // 2100-02-28
                           1764595640LL,    // 2025-12-01
                           253402300799LL,  // 9999-12-31T23:59:59
                           -2208988800LL,   // 1900-01-01
                           -62135596800LL}) // 0001-01-01
        check_against_gmtime(t);
}

TEST_CASE("utc_time: every day for 600 years, and odd seconds across them") {
    for (std::int64_t t = -2208988800LL; t < 16725225600LL; t += 86400 * 7 + 3607) check_against_gmtime(t);
    for (std::int64_t day = 10000; day < 10000 + 4 * 366; ++day) check_against_gmtime(day * 86400 + 43210);
}

TEST_CASE("utc_day and utc_timestamp format it") {
    CHECK(utc_day(1764595640) == "2025-12-01");
    CHECK(utc_timestamp(951868799) == "2000-02-29T23:59:59Z");
    CHECK(utc_timestamp(0) == "1970-01-01T00:00:00Z");
}
