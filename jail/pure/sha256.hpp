// SHA-256 (FIPS 180-4), for the audit log's hash of the program text. Pure and small: pyjail is
// linked statically and needs no crypto library for one digest per run.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pyjail {

class Sha256 {
public:
    Sha256();
    void update(const void* data, std::size_t size);
    void update(std::string_view s) { update(s.data(), s.size()); }
    // The digest in lower-case hex. The object is spent afterwards.
    std::string hex();

private:
    void block(const std::uint8_t* p);
    std::array<std::uint32_t, 8> h_;
    std::array<std::uint8_t, 64> buf_{};
    std::size_t used_ = 0;
    std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

// One line of a sha256sum manifest ("<64 hex digits>  NAME", or " *NAME" for binary mode): the
// digest and the name; nothing for a malformed line or one of sha256sum's escaped names
// (starting with a backslash), which a rootfs manifest never holds.
struct ManifestLine {
    std::string hex;
    std::string name;
};
std::optional<ManifestLine> parse_manifest_line(std::string_view line);

}  // namespace pyjail
