#include "environment.hpp"

namespace pyjail {

std::vector<std::string> jail_environment(const Policy& policy) {
    std::vector<std::pair<std::string, std::string>> env = {
        {"PATH", std::string(kJailPath)},
        {"HOME", "/tmp"},
        {"USER", "jail"},
        {"LOGNAME", "jail"},
        {"LANG", "C.UTF-8"},
        {"PWD", "/work"},
    };
    for (const auto& kv : policy.env) {
        bool replaced = false;
        for (auto& have : env)
            if (have.first == kv.first) {
                have.second = kv.second;
                replaced = true;
            }
        if (!replaced) env.push_back(kv);
    }
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
}

}  // namespace pyjail
