#!/usr/bin/env bash
# Unpacks the pinned Debian packages (tools/deps.txt) into .deps/root, for a
# machine that cannot install packages (the GPU machine): carry .deps there and
# configure with -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr (tests/gpu/run_all.sh does).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/debs" "$root/.deps/root"
cd "$root/.deps/debs"
grep -v '^#' "$root/tools/deps.txt" | grep -v '^$' | grep -v ninja-build | xargs apt-get download -qq
for f in *.deb; do dpkg -x "$f" "$root/.deps/root"; done
rm -rf "$root/.deps/debs"
du -sh "$root/.deps"
