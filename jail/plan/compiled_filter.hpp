// Seccomp filters compiled ahead of time.
//
// Compiling a set with libseccomp costs more than everything else pyjail does before clone
// (about 1.5 ms for the shipped `python` set), and the result only depends on the set's text,
// the groups file, the network mode and the versions of pyjail and libseccomp. So the build
// compiles every shipped set for every network mode into a file beside the profiles, and a
// run that finds a file whose recorded inputs equal its own, byte for byte, uses it.
//
// The file records its inputs whole, not a digest of them, so a hit can only ever load the
// filter of exactly this set; any difference (an edited set, another version) is a miss, and
// the run compiles as before. Compiled files are installed with the profiles and are as
// trusted as they are: whoever can change one could change the set it came from. pyjail never
// writes them at run time (a cache the jailed user could write would let a jail weaken the
// next jail's filter).
#pragma once

#include <linux/filter.h>

#include <optional>
#include <string>
#include <vector>

#include "policy.hpp"
#include "seccomp.hpp"

namespace pyjail {

// Everything a compiled filter depends on.
struct FilterInputs {
    std::string set_text;
    std::string groups_text;
    NetMode net = NetMode::None;  // the run's --net: its filter's (filter_net_mode) decides
};

struct CompiledFilter {
    std::vector<std::string> allow;  // the parsed set, as parse_seccomp_set gave it
    std::vector<std::string> deny;
    std::vector<sock_filter> program;
};

// "none", "loopback" or "allow", as the profile key says it.
const char* net_mode_name(NetMode net);

// The file name for these inputs: a hash of them, so any copy of a shipped set also hits.
std::string compiled_filter_file_name(const FilterInputs& in);

// The file's bytes: a header naming the versions, the inputs, then the outputs.
std::string encode_compiled_filter(const FilterInputs& in, const CompiledFilter& out);

// The outputs, if `file` was made from exactly these inputs by this pyjail and libseccomp;
// nothing for any other file (stale, foreign, truncated or malformed).
std::optional<CompiledFilter> decode_compiled_filter(const std::string& file, const FilterInputs& in);

}  // namespace pyjail
