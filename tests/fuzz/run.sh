#!/usr/bin/env bash
# Fuzzes the parsers of untrusted text (see README.md here) for a bounded time each: builds
# the libFuzzer targets with clang, ASan and UBSan in their own build directory, then runs
# each one over its corpus. A crash stops the run (exit status 1) and leaves its input in the
# build directory as crash-TARGET-*.
#
#
# The sources the targets compile (found through the compiler's own dependency lists) are
# hashed into tests/fuzz/fuzzed.sha256 after every target has been fuzzed for at least the
# default time; commit that file with the parser change. --if-changed (what tests/run.sh
# uses) fuzzes only when those sources differ from the last long fuzz: the unit tests replay
# every corpus input in every build anyway (tests/unit/test_fuzz_corpus.cpp).
#
#   tests/fuzz/run.sh                                      # every target, 20 s each
#   tests/fuzz/run.sh --if-changed                         # the same, if a parser changed
#   PYJAIL_FUZZ_SECONDS=3600 tests/fuzz/run.sh cli         # one target, an hour
#   PYJAIL_FUZZ_BUILD_DIR=DIR                              # default: build-fuzz
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${PYJAIL_FUZZ_BUILD_DIR:-$root/build-fuzz}
default_seconds=20
seconds=${PYJAIL_FUZZ_SECONDS:-$default_seconds}
all_targets=(profile seccomp_set cli run_request dbus egress)
stamp=tests/fuzz/fuzzed.sha256
if_changed=0
if [[ ${1:-} == --if-changed ]]; then if_changed=1; shift; fi
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

# Every file of this checkout that the fuzz targets compile: the harness, the headers it
# includes and, for each header, its .cpp, until nothing new turns up; plus the shipped seccomp
# sets the targets read.
fuzzed_sources() {
    local files prev= jail_includes=() d
    for d in jail/*/; do jail_includes+=("-I${d%/}"); done
    files=$(ls tests/fuzz/*.cpp tests/fuzz/*.hpp)
    while [[ $files != "$prev" ]]; do
        prev=$files
        # shellcheck disable=SC2046 # one word per file
        files=$({ echo "$files"
                  g++ -std=c++20 -MM "${jail_includes[@]}" -Itests/fuzz $(grep '\.cpp$' <<<"$files") |
                      tr ' \\' '\n\n' | grep -E '^(jail|tests/fuzz)/' |
                      while read -r f; do
                          echo "$f"
                          if [[ $f == *.hpp && -f ${f%.hpp}.cpp ]]; then echo "${f%.hpp}.cpp"; fi
                      done; } | sort -u)
    done
    { echo "$files"; ls profiles/seccomp/*.toml; } | sort -u
}
sources_hash() { fuzzed_sources | xargs sha256sum | sha256sum | cut -d' ' -f1; }

if ((if_changed)); then
    now=$(sources_hash)
    if [[ -f $stamp && $(cat "$stamp") == "$now" ]]; then
        echo "fuzz: the parsers are those of the last long fuzz ($stamp); the unit tests replayed the corpus"
        exit 0
    fi
    echo "fuzz: the parsers changed since the last long fuzz ($stamp): fuzzing them"
fi

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

# Every target fuzzed for the full time: the stamp says these sources were.
if ((${#targets[@]} == ${#all_targets[@]} && seconds >= default_seconds)); then
    sources_hash >"$stamp"
    git diff --quiet -- "$stamp" 2>/dev/null ||
        echo "fuzz: $stamp updated: commit it with the parser change"
fi
