// The audit log (--audit-log FILE): one JSON line per run, appended, for agent platforms and
// cron jobs that must account for every program they ran -- also the runs that failed.
//
// Pure: which line a run gets (this file); the file is opened and written by the supervisor
// (audit_target.cpp). Safe under concurrent runs because every line is appended with one
// write() to a descriptor opened O_APPEND, and a line is never longer than kMaxAuditLine, so
// no run's line can be interleaved with another's or grow without bound. The jail never holds
// the descriptor: it is opened after the jail is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "report.hpp"

namespace pyjail {

// The longest line written, newline included. The command line and an error message are
// what can be long; they are cut (and the line says so) to fit.
constexpr std::size_t kMaxAuditLine = 16384;

struct AuditIdentity {
    std::time_t time = 0;        // when the run ended
    std::uint32_t uid = 0;       // the invoking user
    std::string user;            // its name, "" when /etc/passwd has none
    std::optional<std::string> program_sha256;  // of the script or the -c text
};

// The run's line, "\n" included, at most kMaxAuditLine bytes.
std::string audit_line(const AuditIdentity& who, const RunFacts& facts);

// The program text a python command line carries itself: the argument of -c (`-c CODE`,
// `-cCODE`, `-Ic CODE`), or nothing (a script, -m, stdin, not Python).
std::optional<std::string> inline_program(const std::vector<std::string>& argv);

// "2026-12-01T13:27:20Z"
std::string utc_timestamp(std::time_t t);

}  // namespace pyjail
