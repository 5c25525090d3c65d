#!/usr/bin/env bash
# The Python package: build the wheel from source (the C++ core compiles again inside it,
# with the pinned nanobind / scikit-build-core), install it into a fresh venv with pinned
# numpy / pytest / ml_dtypes, and run tests/python (the GPU tests skip without a GPU).
# Own directory: build-python/ (the wheel's CMake build lives in build-python/<wheel tag>).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$root/build-python
venv=$work/ci-venv
wheels=$work/wheels
export PATH=/usr/local/cuda/bin:$PATH
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
python=${PYTHON:-python3}

# Debian's python3 splits venv and the headers into their own packages.
need=()
"$python" -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
"$python" -c "import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" \
  2>/dev/null || need+=(python3-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "20-python: installing ${need[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

mkdir -p "$work"
rm -rf "$venv" "$wheels"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core==1.1.2 nanobind==3.1.0
t0=$(date +%s)
if ! "$venv/bin/pip" wheel --no-build-isolation --no-deps -w "$wheels" "$root" > "$work/wheel.log" 2>&1; then
  grep -E "error|Error" "$work/wheel.log" | head -40
  tail -n 30 "$work/wheel.log"
  echo "20-python: wheel build failed (log: $work/wheel.log)"
  exit 1
fi
echo "20-python: wheel built in $(( $(date +%s) - t0 ))s: $(cd "$wheels" && ls moeforge-*.whl)"
"$venv/bin/pip" install -q --disable-pip-version-check "$wheels"/moeforge-*.whl numpy==2.4.6 pytest==9.2.0 ml_dtypes==0.6.0

# From outside the source tree, so the installed package is what gets imported.
cd "$work"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rfE "$root/tests/python" > "$work/pytest.log" 2>&1
rc=$?
set -e
tail -n 40 "$work/pytest.log"
if [ $rc -eq 5 ]; then echo "20-python: pytest collected no tests"; exit 1; fi
exit $rc
