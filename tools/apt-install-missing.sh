#!/usr/bin/env bash
# Installs those of the Debian packages named as arguments that are not installed yet, with
# apt-get (through sudo when not run as root). tools/quickstart.sh and tests/run.sh use it.
#
#   tools/apt-install-missing.sh cmake ninja-build ...
set -euo pipefail

missing=()
for d in "$@"; do dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'ok installed' || missing+=("$d"); done
((${#missing[@]})) || exit 0
sudo=; [[ $(id -u) -eq 0 ]] || sudo=sudo
echo "==> installing ${missing[*]}"
# Another apt (unattended-upgrades on a fresh machine) may hold the dpkg lock: wait for it,
# for a bounded time, instead of failing at once.
lock=(-o DPkg::Lock::Timeout=300)
$sudo apt-get "${lock[@]}" update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
