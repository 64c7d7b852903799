// What the fuzz targets run, one function per parser of untrusted text. Each takes one input,
// lets the parser refuse it (a JailError: the one-line error a user would see), and aborts on
// anything else: another exception (which would reach main() as "internal error"), or a
// result that breaks what the rest of pyjail relies on. The same functions replay the
// corpora in the unit tests (tests/unit/test_fuzz_corpus.cpp), so a crash found by fuzzing
// stays fixed once its input is added to tests/fuzz/corpus/TARGET/.
#pragma once

#include <string_view>

namespace pyjail::fuzz {

// A profile file: parse_profile, apply_profile, make_policy.
void profile(std::string_view input);

// A seccomp set file, and, after a NUL byte if there is one, the groups file it is read
// against (else the shipped profiles/seccomp/groups.toml).
void seccomp_set(std::string_view input);

// A command line: its arguments separated by NUL bytes; parse_cli, apply_cli, make_policy.
void cli(std::string_view input);

// A run request as a template receives it (run_request.hpp): decode_request.
void run_request(std::string_view input);
// Bytes from a D-Bus peer: messages one after another, as systemd_scope's client reads them
// (message_size, parse_message, parse_job_removed, error_text).
void dbus(std::string_view input);
// What a jail sends through controlled egress (egress_plan.hpp): the first byte picks the
// parser -- 0: a DNS query (parse_query, build_answer), 1: a DNS response to the supervisor's
// query (parse_response), else the first bytes of a connection (sniff), the rest is the input.
void egress(std::string_view input);

}  // namespace pyjail::fuzz
