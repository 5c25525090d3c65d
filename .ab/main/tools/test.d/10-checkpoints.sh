#!/usr/bin/env bash
# Checkpoint loading suite: generates small checkpoints in every supported layout (and hostile
# variants) with an independent Python writer (safetensors + numpy, pinned, in a venv under the
# build dir), then runs the Checkpoint* C++ tests against them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MOEFORGE_BUILD_DIR:-$root/build}
venv=$build/checkpoint-fixtures-venv
pins="safetensors==0.8.0 numpy==2.4.6"

if [ ! -x "$build/tests/moeforge_cpu_tests" ]; then
  echo "10-checkpoints: $build/tests/moeforge_cpu_tests is missing (run tools/setup.sh first)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import safetensors, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check $pins
fi
fixtures=$(mktemp -d "${TMPDIR:-/tmp}/moeforge-fixtures-XXXXXX")
trap 'rm -rf "$fixtures"' EXIT
"$venv/bin/python" "$root/tests/fixtures/make_fixtures.py" "$fixtures"
log=$fixtures/gtest.log
status=0
MOEFORGE_FIXTURES_DIR=$fixtures "$build/tests/moeforge_cpu_tests" --gtest_filter='Checkpoint*' >"$log" 2>&1 || status=$?
grep -E '^\[  (FAILED|SKIPPED) ' "$log" || true
grep -B3 -A12 'Failure' "$log" | head -80 || true
tail -n 3 "$log"
if [ "$status" -eq 0 ] && grep -q '^\[  SKIPPED \]' "$log"; then
  echo "10-checkpoints: tests were skipped although MOEFORGE_FIXTURES_DIR was set" >&2
  status=1
fi
exit "$status"
