#!/usr/bin/env bash
# Prints the path of a Debian kernel image for the test VM, downloading the kernel package
# with `apt-get download` and unpacking only its vmlinuz into a cache -- the host's own
# kernel and /boot are never touched.
#   tests/vm/fetch-kernel.sh [CACHE_DIR]
set -euo pipefail
cache=${1:-${PYJAIL_VM_CACHE:-/tmp/pyjail-vm-cache}/kernel}
mkdir -p "$cache"
cd "$cache"

package() {  # the versioned package the linux-image-amd64 metapackage points at
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1
}
pkg=$(package)
if [[ -z $pkg ]]; then
    apt-get update -qq >&2
    pkg=$(package)
fi
[[ -n $pkg ]] || { echo "fetch-kernel: no linux-image-amd64 in the apt lists" >&2; exit 1; }

image=$(ls "$cache/$pkg"/boot/vmlinuz-* 2>/dev/null | head -1 || true)
if [[ -z $image ]]; then
    rm -f ./"$pkg"_*.deb
    apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2 || { apt-get update -qq >&2 && apt-get download -qq -o APT::Sandbox::User=root "$pkg" >&2; }
    rm -rf "$cache/$pkg.tmp" && mkdir "$cache/$pkg.tmp"
    dpkg-deb --fsys-tarfile ./"$pkg"_*.deb | tar -x -C "$cache/$pkg.tmp" --wildcards './boot/vmlinuz-*'
    rm -f ./"$pkg"_*.deb
    rm -rf "$cache/$pkg" && mv "$cache/$pkg.tmp" "$cache/$pkg"
    image=$(ls "$cache/$pkg"/boot/vmlinuz-* | head -1)
fi
echo "$image"
