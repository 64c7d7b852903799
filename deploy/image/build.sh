#!/usr/bin/env bash
# Builds the pyjail-server container image from this checkout, without pulling a base image
# (FROM scratch): its root file system is itself a pyjail rootfs (`pyjail rootfs build`: Python
# and the service's packages, resolved and installed by pip in a jail), with pyjail installed
# into /usr/local (the static binary, the jails' rootfs, profiles, filters) and the Python
# package beside the service's packages. The service runs as uid 1000, not root.
#
#   deploy/image/build.sh [--data] [--build-dir DIR] [--tag IMAGE]
#
#   --data        also install the `data` rootfs (numpy, pandas, ...; cmake --build build
#                 --target rootfs-data first): some 600 MB more
#   --build-dir   the cmake build directory (default: build)
#   --tag         the image's name (default: localhost/pyjail-server:latest)
#
# Needs podman (or buildah: BUILDER=buildah) and a built pyjail (cmake --build build).
set -euo pipefail
cd "$(dirname "$0")/../.."
root_dir=$PWD
build=build
tag=localhost/pyjail-server:latest
data=0
while (($#)); do
    case $1 in
        --data) data=1 ;;
        --build-dir) build=$2; shift ;;
        --tag) tag=$2; shift ;;
        *) echo "deploy/image/build.sh: unknown argument $1 (see the comment at its top)" >&2
           exit 2 ;;
    esac
    shift
done
pyjail=$build/pyjail
[[ -x $pyjail ]] || { echo "deploy/image/build.sh: no $pyjail: build pyjail first" \
                           "(cmake --build $build)" >&2; exit 1; }
builder=${BUILDER:-podman}

ctx=$(mktemp -d /tmp/pyjail-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
chmod 755 "$ctx"
root=$ctx/root

echo "==> the image's root: Python and the service's packages (pip runs in a jail)"
mkdir -p "$build/image-wheels"
"$pyjail" rootfs build --out "$root" --requirements deploy/image/requirements.txt \
    --wheel-cache "$build/image-wheels" --quiet

echo "==> pyjail into /usr/local"
DESTDIR="$ctx/stage" cmake --install "$build" --prefix /usr/local >/dev/null
if ((!data)); then
    rm -rf "$ctx/stage/usr/local/lib/pyjail/rootfs.d/data"
fi
# The man pages, completions and debug files serve no one in the image.
rm -rf "$ctx/stage/usr/local/share/man" "$ctx/stage/usr/local/share/bash-completion"
cp -a "$ctx/stage/usr/local/." "$root/usr/local/"

echo "==> the Python package beside the service's packages"
site=$(ls -d "$root"/usr/local/lib/python3.*/dist-packages | head -1)
rm -rf "$site/pyjail"
cp -a python/pyjail "$site/pyjail"
find "$site/pyjail" -name __pycache__ -prune -exec rm -rf {} +

echo "==> the service's user, and what it writes"
cat >>"$root/etc/passwd" <<'PASSWD'
pyjail:x:1000:1000:pyjail-server:/tmp:/usr/sbin/nologin
PASSWD
cat >>"$root/etc/group" <<'GROUP'
pyjail:x:1000:
GROUP
mkdir -p "$root/tmp" "$ctx/writable/tmp" "$ctx/writable/run/pyjail"
chmod 1777 "$root/tmp" "$ctx/writable/tmp"
chmod 700 "$ctx/writable/run/pyjail"

cat >"$ctx/Containerfile" <<'CONTAINERFILE'
FROM scratch
COPY root/ /
# Where the service writes (its tokens' copy, its templates' sockets): its own, also as the
# first content of a volume mounted there (podman copies it up, with its owner).
COPY --chown=1000:1000 writable/ /
USER 1000:1000
ENV PATH=/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 TMPDIR=/tmp
EXPOSE 8080
ENTRYPOINT ["/usr/bin/python3", "-m", "pyjail.server"]
CMD ["--listen", "0.0.0.0:8080", "--tokens", "/run/pyjail/tokens"]
CONTAINERFILE

echo "==> building $tag with $builder"
if [[ $builder == buildah ]]; then
    buildah bud --pull=never -t "$tag" -f "$ctx/Containerfile" "$ctx"
else
    podman build --pull=never -t "$tag" -f "$ctx/Containerfile" "$ctx"
fi
echo "$tag"
