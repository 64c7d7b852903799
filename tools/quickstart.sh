#!/usr/bin/env bash
# From a fresh Debian 12 machine to a jailed Python program: installs the build dependencies
# (with sudo when not root), builds pyjail and its Python rootfs, and runs examples/hello.py
# under --profile strict.
#
#   tools/quickstart.sh
#   CMAKE_BUILD_PARALLEL_LEVEL=N tools/quickstart.sh   # at most N build jobs at once
#
# The build runs as many jobs at once as ninja's default (a few more than the CPUs); on a small or
# shared machine CMAKE_BUILD_PARALLEL_LEVEL=N bounds it to N (cmake --build passes it on as -j N).
set -euo pipefail
cd "$(dirname "$0")/.."

# Checked before anything is installed: cmake's own refusal comes after apt, as its whole usage.
jobs=${CMAKE_BUILD_PARALLEL_LEVEL-}
if [[ -n $jobs && ! $jobs =~ ^[1-9][0-9]*$ ]]; then
    echo "quickstart: CMAKE_BUILD_PARALLEL_LEVEL=$jobs is not a number of build jobs (give a whole number of at least 1, e.g. CMAKE_BUILD_PARALLEL_LEVEL=2, or unset it for ninja's default)" >&2
    exit 2
fi

debs=(cmake ninja-build g++ pkg-config libseccomp-dev libcap-dev libcli11-dev libfmt-dev
      doctest-dev nlohmann-json3-dev python3 python3-dev)
tools/apt-install-missing.sh "${debs[@]}"

if [[ -n $jobs ]]; then
    echo "==> building pyjail and its rootfs (at most $jobs jobs at once: CMAKE_BUILD_PARALLEL_LEVEL)"
else
    echo "==> building pyjail and its rootfs (CMAKE_BUILD_PARALLEL_LEVEL=N bounds the build to N jobs)"
fi
cmake -S . -B build -G Ninja >/dev/null
# Only what the sample needs: the unit tests and the rest come with tests/run.sh.
cmake --build build --target pyjail seccomp_filters rootfs

pyjail=build/pyjail
if [[ $(id -u) -eq 0 ]] &&
   ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$PWD/build/rootfs/usr"; then
    # Run by root, the jail is nobody on the host, and nobody cannot reach this checkout (it
    # is under /root, say): run an installed copy from a world-readable directory instead.
    stage=$(tools/stage-install.sh build quickstart)
    echo "==> nobody (the jail's host user when root runs pyjail) cannot read $PWD;"
    echo "    installed a copy into $stage to run from there (sudo cmake --install build"
    echo "    installs pyjail for good)"
    pyjail="$stage/usr/local/bin/pyjail"
fi

echo "==> $pyjail --profile strict -- python examples/hello.py"
status=0
"$pyjail" --profile strict -- python examples/hello.py || status=$?
# What a newcomer types next (README, "Next steps"): pyjail on PATH, and the Python package.
cat <<EOF
==> next: install pyjail (sudo cmake --install build) or use $pyjail as it is, then
      pyjail -- python your_script.py          # pyjail --help, man pyjail
    the Python package: pip install ./python   # finds pyjail on PATH, or set
      PYJAIL_BIN=$(realpath "$pyjail")
EOF
exit "$status"
