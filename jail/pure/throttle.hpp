// A token bucket, for the work the supervisor does on a jail's behalf at the jail's pace
// (answering the syscalls its filter refuses). Pure: the caller passes the time.
#pragma once

namespace pyjail {

class TokenBucket {
public:
    // At most `rate_per_s` takes a second on average, `burst` at once; starts full.
    TokenBucket(double rate_per_s, double burst, double now_ms);

    // Takes one token if there is one.
    bool take(double now_ms);

    // Milliseconds until `n` tokens are there (0: they are there now). `n` at most the burst.
    double ms_until(double now_ms, double n = 1) const;

private:
    double tokens_at(double now_ms) const;

    double per_ms_, burst_, tokens_, last_ms_;
};

}  // namespace pyjail
