#!/usr/bin/env bash
# Quick start, command 2: set up and build (as tools/setup.sh), then run the whole
# CPU test suite through CTest. GPU tests live in tests/gpu/run_all.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
cd "${MOEFORGE_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "$(nproc)" "$@"
