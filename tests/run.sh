#!/usr/bin/env bash
# The whole test suite: installs what it needs (on Debian; through sudo when not root),
# builds with warnings as errors, runs the unit tests, installs pyjail into throw-away staging
# prefixes and runs the integration tests against that installed copy -- as root and as an
# unprivileged user -- and the cgroup v2 limit tests in qemu VMs (tests/vm: one with a shell as
# init, one with systemd); runs pyjail in a rootless podman container; fuzzes the parsers for
# 20 s each when they changed since their last long fuzz (tests/fuzz/run.sh --if-changed).
#
#   tests/run.sh            # everything
#   PYJAIL_MUST_WORK=1      # a test that would be skipped for lack of a host feature fails
#
# What waits on the network (the test venv's packages from PyPI, the VM's kernel) starts in the
# background before the build. The tests then run in four lanes at once (most of their time
# is spent waiting on jails, VMs and timeouts, not on the CPUs), each with its own log, printed
# whole when the lane ends:
#   host:    tests/integration, tests/man, tests/test_must_work.py, tests/test_layout.py (which
#            folder may include which), tests/test_function_length.py (no function in jail/
#            over 80 lines), tests/test_quickstart.py (the quick start's build jobs), then
#            the attack suites again through a template -- the tests that
#            look for leftovers on this host
#   vm:      tests/vm (mostly qemu's CPU, nothing on the host's /tmp or process table)
#   package: tests/python (the Python package)
#   python:  tests/rootfs (the rootfs builder)
# The other lanes keep their temporary files in directories named like the integration tests'
# (which their leftover checks pass over), and run pyjail from a staged copy of their own, so
# the host lane's checks see none of theirs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${PYJAIL_BUILD_DIR:-$root/build}
t0=$SECONDS

say() { printf '==> %s (at %d s)\n' "$*" $((SECONDS - t0)); }

debs=(cmake ninja-build g++ pkg-config libseccomp-dev libcap-dev libcli11-dev libfmt-dev
      doctest-dev python3 python3-pytest python3-numpy util-linux
      qemu-system-x86 busybox-static nlohmann-json3-dev bash-completion groff-base
      python3-venv python3-pip man-db bubblewrap clang libclang-rt-14-dev python3-dev
      systemd dbus dbus-daemon dbus-user-session python3-dbus python3-gi
      podman runc uidmap acl)
"$root/tools/apt-install-missing.sh" "${debs[@]}"

scratch=$(mktemp -d /tmp/pyjail-it-run.XXXXXX)
chmod 755 "$scratch"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$scratch"
}
trap cleanup EXIT

# The Python package's tests run against the real LangChain and smolagents from PyPI, in a
# venv made once per requirements file: fetched while pyjail builds.
venv=${PYJAIL_TEST_VENV:-/tmp/pyjail-test-venv}
make_venv() {
    if [[ ! -x $venv/bin/python ]] || ! cmp -s tests/python/requirements.txt "$venv/requirements.txt"; then
        echo "installing the Python package's test dependencies into $venv"
        rm -rf "$venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt
        cp tests/python/requirements.txt "$venv/requirements.txt"
    fi
    # The same requirements' wheels, from which tests/python/test_readme_adapters.py installs
    # the package offline into a fresh venv made as the README says (pip takes them from its
    # cache: no second download).
    if [[ ! -f $venv/wheelhouse/complete ]]; then
        rm -rf "$venv/wheelhouse"
        "$venv/bin/pip" download -q --disable-pip-version-check -d "$venv/wheelhouse" \
            -r tests/python/requirements.txt
        touch "$venv/wheelhouse/complete"
    fi
}
make_venv >"$scratch/venv.log" 2>&1 &
venv_pid=$!
pids+=("$venv_pid")

# The VM boots Debian's kernel, downloaded (not installed) into a cache.
if [[ -z ${PYJAIL_VM_KERNEL:-} ]]; then
    tests/vm/fetch-kernel.sh >"$scratch/kernel" 2>"$scratch/kernel.log" &
    kernel_pid=$!
    pids+=("$kernel_pid")
fi

# With the data rootfs, for tests/integration/test_data_rootfs.py: its wheels are downloaded
# from PyPI once, into $build/data-wheels, and taken from there afterwards. First what the data
# rootfs needs (pyjail, its filters, the default rootfs), then the rest in the same build as
# the data rootfs, so that its download and the jails that install it overlap the compiling of
# what pyjail itself does not need (the unit tests).
say "building ($build) and the data rootfs"
cmake -S "$root" -B "$build" -G Ninja -DPYJAIL_WERROR=ON >/dev/null
cmake --build "$build" --target pyjail seccomp_filters rootfs
cmake --build "$build" --target rootfs-data all

say "unit tests"
(cd "$build" && ctest --output-on-failure)
say "fuzzing the parsers, if they changed (tests/fuzz/README.md)"
tests/fuzz/run.sh --if-changed

# The integration tests run pyjail as an unprivileged user too, who cannot reach into this
# checkout (it may live under a private home): test an installed copy in a staging prefix.
stage=$("$root/tools/stage-install.sh" "$build" stage)
stage_python=$("$root/tools/stage-install.sh" "$build" stage-python)
trap 'cleanup; rm -rf "$stage" "$stage_python"' EXIT
say "installed into $stage and $stage_python"
export PYJAIL_BIN="$stage/usr/local/bin/pyjail"
# test_install.py also installs this build with --prefix into a directory of its own.
export PYJAIL_BUILD_DIR="$build"

if [[ -z ${PYJAIL_VM_KERNEL:-} ]]; then
    wait "$kernel_pid" || { cat "$scratch/kernel.log" >&2
                            echo "tests/run.sh: cannot fetch a kernel for the VM tests" >&2; exit 1; }
    PYJAIL_VM_KERNEL=$(cat "$scratch/kernel")
    export PYJAIL_VM_KERNEL
fi

# --durations: the slowest tests of each run are in the log, for balancing the lanes.
pytest=(/usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=10)

lane_host() {
    local status=0
    "${pytest[@]}" tests/integration tests/man tests/test_must_work.py tests/test_layout.py \
        tests/test_function_length.py tests/test_quickstart.py "$@" || status=$?
    echo "==> the attack tests again, every run they can make forked from a template (pyjail serve)"
    PYJAIL_THROUGH_TEMPLATE=1 "${pytest[@]}" \
        tests/integration/test_jail_namespaces.py tests/integration/test_jail_processes.py \
        tests/integration/test_jail_network.py tests/integration/test_jail_time_signals.py \
        tests/integration/test_jail_environment.py tests/integration/test_jail_filesystem.py \
        tests/integration/test_egress.py tests/integration/test_jail_profiles.py "$@" ||
        status=$?
    return "$status"
}
lane_vm() {
    mkdir "$scratch/vm-tmp"
    # The VM tests read the staged binary (ldd, copies into the guest): the copy the package
    # and rootfs lanes use too, so that the host lane's leftover checks never see their processes.
    TMPDIR="$scratch/vm-tmp" PYJAIL_BIN="$stage_python/usr/local/bin/pyjail" \
        "${pytest[@]}" tests/vm "$@"
}
lane_package() {
    # Niced: the VMs emulate their CPUs (TCG), and their limit tests measure CPU shares and
    # deadlines; this lane takes what the others leave while they run, and all once they end.
    package_tests package nice -n 10 tests/python "$@"
}
# The Python package's tests (LANE NAME [nice -n N] PYTEST-ARGS...), in the test venv, with a temporary
# directory of the lane's own, named so that the integration tests' leftover checks pass over it.
package_tests() {
    local tmp="$scratch/package-tmp-$1"
    shift
    mkdir -m 1777 "$tmp"
    local niced=()
    if [[ $1 == nice ]]; then niced=(nice -n "$3"); shift 3; fi
    TMPDIR="$tmp" PYJAIL_BIN="$stage_python/usr/local/bin/pyjail" \
        PYJAIL_TEST_WHEELHOUSE="$venv/wheelhouse" \
        "${niced[@]}" "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=10 "$@"
}
lane_python() {
    mkdir -m 1777 "$scratch/python-tmp"
    TMPDIR="$scratch/python-tmp" PYJAIL_BIN="$stage_python/usr/local/bin/pyjail" \
        "${pytest[@]}" tests/rootfs "$@"
}

# Long done by now: it started before the build.
wait "$venv_pid" || { cat "$scratch/venv.log" >&2
                      echo "tests/run.sh: cannot install the test venv $venv" >&2; exit 1; }
cat "$scratch/venv.log"

say "tests, in four lanes: host (integration), vm, package (the Python package), python (the rootfs builder)"
lanes=(host vm package python)
declare -A lane_pid
for lane in "${lanes[@]}"; do
    "lane_$lane" "$@" >"$scratch/$lane.log" 2>&1 &
    lane_pid[$lane]=$!
    pids+=("$!")
done
failed=()
for lane in "${lanes[@]}"; do
    status=0
    wait "${lane_pid[$lane]}" || status=$?
    say "lane $lane ended (exit $status)"
    cat "$scratch/$lane.log"
    ((status == 0)) || failed+=("$lane")
done

# One closing line for the whole suite, summed over every pytest run's own summary.
python3 - "$scratch"/{host,vm,package,python}.log <<'EOF'
import re, sys
counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        if re.search(r"\b(passed|failed|error|errors|skipped)\b.* in [0-9.]+s", line):
            for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", line):
                counts["error" if word.startswith("error") else word] += int(n)
print(f"suite: {counts['passed']} passed, {counts['failed'] + counts['error']} failed, "
      f"{counts['skipped']} skipped")
EOF
say "done"
if ((${#failed[@]})); then
    echo "tests/run.sh: failed in the lane(s): ${failed[*]}" >&2
    exit 1
fi
