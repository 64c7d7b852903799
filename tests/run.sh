#!/usr/bin/env bash
# The whole test suite: installs what it needs (on Debian; through sudo when not root),
# builds with warnings as errors, runs the unit tests, installs pyjail into a throw-away
# staging prefix and runs the integration tests against that installed copy -- as root and
# as an unprivileged user -- and the cgroup v2 limit tests in qemu VMs (tests/vm: one with a
# shell as init, one with systemd); runs pyjail in a rootless podman container; fuzzes the
# parsers for 20 s each (PYJAIL_FUZZ_SECONDS).
#
#   tests/run.sh            # everything
#   PYJAIL_MUST_WORK=1      # a test that would be skipped for lack of a host feature fails
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${PYJAIL_BUILD_DIR:-$root/build}

say() { printf '==> %s\n' "$*"; }

debs=(cmake ninja-build g++ pkg-config libseccomp-dev libcap-dev libcli11-dev libfmt-dev
      doctest-dev python3 python3-pytest python3-numpy util-linux
      qemu-system-x86 busybox-static nlohmann-json3-dev bash-completion groff-base
      python3-venv python3-pip man-db bubblewrap clang libclang-rt-14-dev python3-dev
      systemd dbus dbus-daemon dbus-user-session python3-dbus python3-gi
      podman runc uidmap)
"$root/tools/apt-install-missing.sh" "${debs[@]}"

say "building ($build)"
cmake -S "$root" -B "$build" -G Ninja -DPYJAIL_WERROR=ON >/dev/null
cmake --build "$build"
# The data rootfs, for tests/integration/test_data_rootfs.py: its wheels are downloaded from
# PyPI once, into $build/data-wheels, and taken from there afterwards.
say "building the data rootfs"
cmake --build "$build" --target rootfs-data

say "unit tests"
(cd "$build" && ctest --output-on-failure)
say "fuzzing the parsers (tests/fuzz/README.md)"
tests/fuzz/run.sh

# The integration tests run pyjail as an unprivileged user too, who cannot reach into this
# checkout (it may live under a private home): test an installed copy in a staging prefix.
stage=$("$root/tools/stage-install.sh" "$build" stage)
trap 'rm -rf "$stage"' EXIT
say "installed into $stage"
export PYJAIL_BIN="$stage/usr/local/bin/pyjail"

# The VM boots Debian's kernel, downloaded (not installed) into a cache.
if [[ -z ${PYJAIL_VM_KERNEL:-} ]]; then
    PYJAIL_VM_KERNEL=$(tests/vm/fetch-kernel.sh) || {
        echo "tests/run.sh: cannot fetch a kernel for the VM tests" >&2; exit 1; }
    export PYJAIL_VM_KERNEL
fi

say "integration tests, and the cgroup v2 limits in a VM"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration tests/rootfs tests/vm tests/man \
    tests/test_must_work.py "$@"
say "the attack tests again, every run they can make forked from a template (pyjail serve)"
PYJAIL_THROUGH_TEMPLATE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
    tests/integration/test_jail_namespaces.py tests/integration/test_jail_processes.py \
    tests/integration/test_jail_network.py tests/integration/test_jail_time_signals.py \
    tests/integration/test_jail_environment.py tests/integration/test_jail_filesystem.py "$@"

# The Python package, against the real LangChain and smolagents from PyPI, in a venv.
venv=${PYJAIL_TEST_VENV:-/tmp/pyjail-test-venv}
if [[ ! -x $venv/bin/python ]] || ! cmp -s tests/python/requirements.txt "$venv/requirements.txt"; then
    say "installing the Python package's test dependencies into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt
    cp tests/python/requirements.txt "$venv/requirements.txt"
fi
say "Python package tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python "$@"
