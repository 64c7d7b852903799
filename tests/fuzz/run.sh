#!/usr/bin/env bash
# Fuzzes the parsers of untrusted text (see README.md here) for a bounded time each: builds
# the libFuzzer targets with clang, ASan and UBSan in their own build directory, then runs
# each one over its corpus. A crash stops the run (exit status 1) and leaves its input in the
# build directory as crash-TARGET-*.
#
#   tests/fuzz/run.sh                                      # every target, 20 s each
#   PYJAIL_FUZZ_SECONDS=3600 tests/fuzz/run.sh cli         # one target, an hour
#   PYJAIL_FUZZ_BUILD_DIR=DIR                              # default: build-fuzz
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${PYJAIL_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${PYJAIL_FUZZ_SECONDS:-20}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(profile seccomp_set cli run_request dbus egress)

# Warnings are the normal build's gate (g++ -Werror); clang also objects to libseccomp's C
# macros, which is no finding here.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DPYJAIL_FUZZ=ON \
    -DPYJAIL_BUILD_ROOTFS=OFF -DPYJAIL_WERROR=OFF >/dev/null
cmake --build "$build" --target pyjail-fuzz

# What the fuzzer finds goes to a scratch directory: the repository's corpus is only read.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
    echo "==> fuzzing $target for $seconds s"
    mkdir "$scratch/$target"
    "$build/pyjail-fuzz-$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/crash-$target-" \
        "$scratch/$target" "tests/fuzz/corpus/$target"
done
