// Ctrl-C at a terminal, against a program that ignores SIGINT (untrusted code does that in one
// line, and a plain Ctrl-C then does nothing): the third interrupt within two seconds asks the
// jail to end, as SIGTERM does (then --kill-grace). Pure: the supervisor feeds it the times.
#pragma once

namespace pyjail::supervisor {

class InterruptEscalation {
public:
    static constexpr int kCount = 3;          // interrupts ...
    static constexpr double kWindowMs = 2000; // ... within this long

    // One SIGINT at `now_ms`: Escalate when it is the kCount-th within the window, Warn when
    // one more would be, else Relay (passed on as it is).
    enum class Step { Relay, Warn, Escalate };
    Step on_interrupt(double now_ms) {
        times_[next_ % kCount] = now_ms;
        ++next_;
        auto within = [&](unsigned back) {  // the interrupt `back` before this one
            return next_ > back && now_ms - times_[(next_ - 1 - back) % kCount] <= kWindowMs;
        };
        if (within(kCount - 1)) return Step::Escalate;
        if (within(kCount - 2)) return Step::Warn;
        return Step::Relay;
    }

private:
    double times_[kCount] = {};
    unsigned next_ = 0;
};

}  // namespace pyjail::supervisor
