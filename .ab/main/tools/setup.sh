#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine that has the CUDA toolkit: installs the
# pinned packages (tools/deps.txt) that are missing, configures and builds.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOEFORGE_BUILD_DIR:-$root/build}

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: the CUDA toolkit (headers and NVRTC) is required; install cuda-toolkit-13-0 first" >&2
  exit 1
fi
export PATH=/usr/local/cuda/bin:$PATH

missing=()
while read -r pkg; do
  case "$pkg" in ''|\#*) continue ;; esac
  name=${pkg%%=*}
  have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  if [ "$name" = "$pkg" ]; then [ -n "$have" ] || missing+=("$pkg")   # unpinned: any version
  else [ "$have" = "${pkg#*=}" ] || missing+=("$pkg"); fi
done < "$root/tools/deps.txt"
for tool in cmake g++ python3; do command -v $tool >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --allow-downgrades "${missing[@]}" >/dev/null
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${MOEFORGE_BUILD_TYPE:-RelWithDebInfo} ${MOEFORGE_CMAKE_ARGS:-} >/dev/null
ninja -C "$build" ${MOEFORGE_NINJA_ARGS:-}
