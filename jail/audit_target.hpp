// The audit log's file (audit.hpp has the lines): run by the supervisor, never by the jail.
#pragma once

#include <optional>
#include <string>

#include "audit.hpp"

namespace pyjail {

// Throws JailError (step "audit log") when `path` cannot be appended to; leaves it closed.
void check_audit_log(const std::string& path);

// Appends `line` with one write(). A failure is said on stderr; returns whether it worked.
bool append_audit_line(const std::string& path, const std::string& line);

// Who runs pyjail, now.
AuditIdentity audit_identity(const std::optional<std::string>& program_sha256);

// The hash of a whole file through its descriptor (not moving its offset), or nothing.
std::optional<std::string> sha256_of_fd(int fd);

}  // namespace pyjail
