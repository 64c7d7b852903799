// The audit log's file (audit.hpp has the lines): run by the supervisor, never by the jail.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "audit.hpp"
#include "writable_place.hpp"

namespace pyjail {

// Throws JailError (step "audit log") when `path` cannot be appended to; leaves it closed.
void check_audit_log(const std::string& path);

// Appends `line` with one write(), after refusing a log that one of `places` (where the jail
// could write) reaches. Throws JailError (step "audit log").
void append_audit_line(const std::string& path, const std::string& line,
                       const std::vector<WritablePlace>& places);

// Who runs pyjail, now.
AuditIdentity audit_identity(const std::optional<std::string>& program_sha256);

// The hash of a whole file through its descriptor (not moving its offset), or nothing.
std::optional<std::string> sha256_of_fd(int fd);

}  // namespace pyjail
