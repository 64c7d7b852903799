#include "throttle.hpp"

#include <algorithm>

namespace pyjail {

TokenBucket::TokenBucket(double rate_per_s, double burst, double now_ms)
    : per_ms_(rate_per_s / 1e3), burst_(burst), tokens_(burst), last_ms_(now_ms) {}

double TokenBucket::tokens_at(double now_ms) const {
    // A clock that went backwards (it is monotonic, but the caller may pass stale times)
    // adds nothing.
    double elapsed = std::max(0.0, now_ms - last_ms_);
    return std::min(burst_, tokens_ + elapsed * per_ms_);
}

bool TokenBucket::take(double now_ms) {
    tokens_ = tokens_at(now_ms);
    last_ms_ = std::max(last_ms_, now_ms);
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
}

double TokenBucket::ms_until(double now_ms, double n) const {
    double t = tokens_at(now_ms);
    return t >= n ? 0 : (n - t) / per_ms_;
}

}  // namespace pyjail
