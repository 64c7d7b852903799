// A UTC date and time of day from seconds since the epoch, by arithmetic. The C library's
// gmtime_r loads the local time zone (/etc/localtime) on its first call, a file opened and
// read on the way to every run that stamps a notice or an audit line, for nothing gmtime uses.
#pragma once

#include <cstdint>

namespace pyjail {

struct UtcTime {
    std::int64_t year = 1970;
    unsigned month = 1, day = 1;  // 1-12, 1-31
    unsigned hour = 0, minute = 0, second = 0;
};

// The proleptic Gregorian calendar, whose 400-year cycle of 146097 days starts on March 1st
// (so that February, with its leap day, ends a year): the era, the day of the era, the year
// of the era, the day of that year, then the month and day from the day of a March year.
constexpr UtcTime utc_time(std::int64_t t) {
    std::int64_t days = t / 86400;
    std::int64_t secs = t % 86400;
    if (secs < 0) {
        secs += 86400;
        days -= 1;
    }
    const std::int64_t z = days + 719468;  // days from 0000-03-01 to 1970-01-01
    const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const std::int64_t doe = z - era * 146097;                                   // [0, 146096]
    const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
    const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);            // [0, 365]
    const std::int64_t mp = (5 * doy + 2) / 153;                                 // March = 0
    UtcTime u;
    u.day = static_cast<unsigned>(doy - (153 * mp + 2) / 5 + 1);
    u.month = static_cast<unsigned>(mp < 10 ? mp + 3 : mp - 9);
    u.year = yoe + era * 400 + (u.month <= 2 ? 1 : 0);
    u.hour = static_cast<unsigned>(secs / 3600);
    u.minute = static_cast<unsigned>(secs % 3600 / 60);
    u.second = static_cast<unsigned>(secs % 60);
    return u;
}

}  // namespace pyjail
