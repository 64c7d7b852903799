// Small helpers several unit tests share: a policy made as the command line makes it, and why
// a run request's bytes are refused.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "policy.hpp"
#include "profile.hpp"
#include "run_request.hpp"

namespace pyjail::test {

// The policy of an empty profile (strict's defaults) with these command-line options.
inline Policy policy_with(const std::vector<std::pair<std::string, std::string>>& options,
                          const std::string& cwd = "/home/u") {
    Settings s = default_settings();
    apply_profile(s, parse_profile("", "p.toml"));
    for (const auto& [name, value] : options) s[name].push_back({value, Source::CommandLine, "--" + name});
    return make_policy(s, {"python3", "x.py"}, cwd);
}

// Why decode_request refuses `bytes`; "" when it takes them.
inline std::string refusal(const std::string& bytes) {
    try {
        decode_request(bytes);
    } catch (const BadRequest& e) {
        return e.what();
    }
    return "";
}

}  // namespace pyjail::test
