#!/usr/bin/env bash
# On a GPU machine (offline): build the Python package from source, install it into a
# temporary venv that sees the system's packages (torch, numpy, pytest, nanobind,
# scikit-build-core), run tests/python (CPU and GPU tests) and write the record
# $OUT/python-gpu-tests.json (kind "gpu-tests").
#
#   MOEFORGE_COMMIT=$(git rev-parse HEAD) bash tests/python/gpu/run.sh
#
# The pinned Debian -dev packages come from .deps/ when present (tools/fetch_deps.sh),
# as in tests/gpu/run_all.sh. The CMake build directory (build-python/) is kept
# between runs, so a second run only relinks what changed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
export MOEFORGE_CACHE_DIR=${MOEFORGE_CACHE_DIR:-/tmp/moeforge-cache}
export PATH=/usr/local/cuda/bin:$PATH
prefix=$root/.deps/root/usr
cmake_args=${CMAKE_ARGS:-}
if [ -d "$prefix" ]; then
  cmake_args="$cmake_args -DCMAKE_PREFIX_PATH=$prefix -DOPENSSL_ROOT_DIR=$prefix"
  export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python=${PYTHON:-python3}
tmp=$(mktemp -d /tmp/moeforge-py.XXXX)
log=$tmp/build.log

t0=$(date +%s)
# Install into a --target directory with the interpreter that holds torch. (A
# venv with --system-site-packages made from a venv's python sees the *base*
# interpreter's site-packages, not torch's venv: on the H200 image that lost
# scikit-build-core and torch.)
py=$python
install=("$python" -m pip install --no-build-isolation --no-deps --no-index -v --target "$tmp/site" "$root")
export PYTHONPATH=$tmp/site${PYTHONPATH:+:$PYTHONPATH}
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "${install[@]}" >> "$log" 2>&1
rc=$?
echo "== build+install rc=$rc in $(( $(date +%s) - t0 ))s"
if [ $rc -ne 0 ]; then
  grep -E "error|Error|CMake Error" "$log" | head -40
  tail -n 30 "$log"
  cp "$log" "$out/python-build.log"
  printf '{"kind": "gpu-tests", "suite": "python", "commit": "%s", "passed": 0, "failed": 1, "cases": [{"case": "build", "outcome": "failed"}]}\n' \
    "${MOEFORGE_COMMIT:-unknown}" > "$out/python-gpu-tests.json"
  exit 1
fi

t0=$(date +%s)
cd "$tmp"   # import the installed package, never the source tree
MOEFORGE_PY_TESTS_JSON="$out/python-gpu-tests.json" \
  "$py" -m pytest -q -p no:cacheprovider -rfEs "$root/tests/python" 2>&1 | tee "$tmp/pytest.log" | tail -n 60
rc=${PIPESTATUS[0]}
echo "== pytest rc=$rc in $(( $(date +%s) - t0 ))s"
# The README's five-line example, as a user runs it: its output goes in the closing note.
echo "== python/README.md example"
sed -n '/^```python$/,/^```$/p' "$root/python/README.md" | sed -n '2,/^```$/p' | sed '$d' > "$tmp/example.py"
"$py" "$tmp/example.py" 2>&1 | tee "$out/python-example.txt"
rm -rf "$tmp"
[ "$rc" -eq 5 ] && exit 1   # no test ran
exit "$rc"
