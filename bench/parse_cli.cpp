// What parsing the command line costs every run: parse_cli on a typical command line,
// repeated, in microseconds per parse (median of rounds). Built on request only:
//   cmake --build build --target pyjail-bench-parse-cli && build/pyjail-bench-parse-cli
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
    const int per_round = argc > 1 ? std::stoi(argv[1]) : 2000;
    const std::vector<std::string> args = {"--profile", "standard", "--wall-time", "10",
                                           "--memory", "512M", "--env", "A=1", "--quiet",
                                           "--", "python3", "-c", "print(1)"};
    std::vector<double> rounds;
    std::size_t sink = 0;
    for (int r = 0; r < 31; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < per_round; ++i) {
            pyjail::CliArgs cli = pyjail::parse_cli(args);
            sink += cli.given.size() + cli.command.size();
        }
        auto t1 = std::chrono::steady_clock::now();
        rounds.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per_round);
    }
    std::sort(rounds.begin(), rounds.end());
    std::printf("parse_cli: %.2f us per command line (median of %zu rounds; min %.2f)\n",
                rounds[rounds.size() / 2], rounds.size(), rounds.front());
    return sink == 0;
}
