#!/usr/bin/env bash
# Quick start, command 2: set up and build (as tools/setup.sh), then run the whole
# test suite: the C++ CPU suite through CTest, then every extra suite in
# tools/test.d/*.sh (sanitizer builds, fuzzing, Python package), in name order.
# GPU tests live in tests/gpu/run_all.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
(cd "${MOEFORGE_BUILD_DIR:-$root/build}" && ctest --output-on-failure -j "$(nproc)" "$@")
for suite in "$root"/tools/test.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "== $(basename "$suite")"
  bash "$suite"
done
