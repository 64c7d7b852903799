#!/usr/bin/env bash
# CPython's own test suite (Debian: libpython3.11-testsuite), the modules that need no network
# or other resources, run outside and inside the jail under --profile strict; prints the
# tests whose outcome differs. Not part of tests/run.sh: it takes several minutes.
#
#   tests/compat/cpython-testsuite.sh [PYJAIL] [regrtest args...]
set -euo pipefail
pyjail=${1:-$(dirname "$0")/../../build/pyjail}
shift || true
py=/usr/bin/python3
ver=$($py -c 'import sys; print("%d.%d" % sys.version_info[:2])')
testdir=/usr/lib/python$ver/test
[[ -d $testdir ]] || { echo "no $testdir: apt-get install libpython$ver-testsuite" >&2; exit 1; }
out=$(mktemp -d /tmp/pyjail-compat.XXXXXX)
chmod 755 "$out"
args=(-m test -u none -j2 --timeout 300 "$@")

if [[ -n ${HOST_LOG:-} ]]; then     # reuse an earlier run outside the jail
    cp "$HOST_LOG" "$out/host.log"
else
    echo "==> outside the jail"
    (cd "$out" && $py "${args[@]}" > "$out/host.log" 2>&1) || true
fi
echo "==> inside the jail (--profile strict)"
# strict, with limits sized for a test suite rather than for one script. The host's whole
# standard library is bound over the rootfs's trimmed one (which lacks the test packages),
# so that the differences come from the jail, not from the rootfs.
stdlib=$(dirname "$testdir")
"$pyjail" --profile strict --tmpfs-size 2G --wall-time 3600 --cpu-time 0 --memory 4G --pids 1024 \
    --ro-bind "$stdlib:$stdlib" -- python3 "${args[@]}" > "$out/jail.log" 2>&1 || true

summary() {  # the test modules in each outcome section of regrtest's summary
    awk '/^[0-9]+ tests? (failed|skipped|altered the execution environment|omitted|run no tests|failed again)/ {sec=$0; next}
         /^$/ {sec=""} sec != "" {for (i = 1; i <= NF; i++) print sec ": " $i}' "$1" | sort
}
summary "$out/host.log" > "$out/host.sum"
summary "$out/jail.log" > "$out/jail.sum"
echo "==> results (logs in $out)"
grep -E '^(Total duration|Tests? result|[0-9]+ tests? OK)' "$out/host.log" | sed 's/^/host: /'
grep -E '^(Total duration|Tests? result|[0-9]+ tests? OK)' "$out/jail.log" | sed 's/^/jail: /'
echo "==> differences (< host only, > jail only)"
diff "$out/host.sum" "$out/jail.sum" || true
