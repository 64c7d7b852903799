// The shipped seccomp sets, read from the source tree.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

inline std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline const std::string kSeccompDir = std::string(PYJAIL_SOURCE_DIR) + "/profiles/seccomp/";
