#!/usr/bin/env bash
# From a fresh Debian 12 machine to a jailed Python program: installs the build dependencies
# (with sudo when not root), builds pyjail and its Python rootfs, and runs examples/hello.py
# under --profile strict.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(cmake ninja-build g++ pkg-config libseccomp-dev libcap-dev libcli11-dev libfmt-dev
      doctest-dev nlohmann-json3-dev python3 python3-dev)
tools/apt-install-missing.sh "${debs[@]}"

echo "==> building pyjail and its rootfs"
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
