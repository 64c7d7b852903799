#!/usr/bin/env bash
# Installs a build of pyjail into a fresh world-readable directory under /tmp and prints that
# directory: pyjail is then $DIR/usr/local/bin/pyjail. The jail's host user (nobody, when root
# runs pyjail; any user in tests/run.sh's unprivileged half) can read that copy where it may not
# reach into the checkout. tools/quickstart.sh and tests/run.sh use it.
#
#   tools/stage-install.sh BUILD_DIR NAME     # -> /tmp/pyjail-NAME.XXXXXX
set -euo pipefail
stage=$(mktemp -d "/tmp/pyjail-$2.XXXXXX")
chmod 755 "$stage"
DESTDIR="$stage" cmake --install "$1" --prefix /usr/local >/dev/null
echo "$stage"
