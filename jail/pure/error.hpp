// Errors that stop a run. Every one names the step that failed, carries the errno captured
// where the call failed (0 when there was none), and a hint when we know the fix, so the user
// gets one line that says what, why and how to fix it.
#pragma once

#include <stdexcept>
#include <string>

namespace pyjail {

class JailError : public std::runtime_error {
public:
    JailError(std::string step, std::string message, int err = 0, std::string hint = {},
              int exit_code = 125);

    const std::string& step() const noexcept { return step_; }
    const std::string& message() const noexcept { return message_; }
    int err() const noexcept { return err_; }
    const std::string& hint() const noexcept { return hint_; }
    // 125 for jail errors; 126/127 when the command cannot be executed / is not found.
    int exit_code() const noexcept { return exit_code_; }

    // "STEP: MESSAGE: strerror(errno) (HINT)" without the trailing newline.
    std::string one_line() const;

private:
    std::string step_;
    std::string message_;
    int err_;
    std::string hint_;
    int exit_code_;
};

// Errors in what the user asked for (options, profiles, binds). The message already names
// where the bad value came from: the option, or the profile's file and line.
class UsageError : public JailError {
public:
    explicit UsageError(std::string message, std::string hint = {})
        : JailError("usage", std::move(message), 0, std::move(hint)) {}
};

}  // namespace pyjail
