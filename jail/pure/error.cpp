#include "error.hpp"

#include <cstring>

namespace pyjail {

JailError::JailError(std::string step, std::string message, int err, std::string hint,
                     int exit_code)
    : std::runtime_error(message), step_(std::move(step)), message_(std::move(message)),
      err_(err), hint_(std::move(hint)), exit_code_(exit_code) {}

std::string JailError::one_line() const {
    std::string line;
    if (step_ != "usage") line = step_ + ": ";
    line += message_;
    if (err_ != 0) {
        line += ": ";
        line += std::strerror(err_);
    }
    if (!hint_.empty()) line += " (" + hint_ + ")";
    return line;
}

}  // namespace pyjail
