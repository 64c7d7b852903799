// libFuzzer entry point of pyjail::fuzz::egress (targets.hpp); see tests/fuzz/README.md.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    pyjail::fuzz::egress(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
