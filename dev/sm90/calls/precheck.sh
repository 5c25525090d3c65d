#!/usr/bin/env bash
# Here, before any GPU call: build the tree that will travel, and compile every kernel for
# sm_90a with NVRTC, as the GPU machine will (C++17, the runtime's options). nvcc (tools/sass.sh)
# accepts code NVRTC rejects: session 20 lost a call to a lambda capturing a structured binding.
# ~70 s on this machine's 2 cores. Exit status non-zero: do not call.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d build ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=$PWD/.deps/root/usr \
  -DOPENSSL_ROOT_DIR=$PWD/.deps/root/usr > /dev/null
ninja -C build > /dev/null
build/tests/moeforge_cpu_tests --gtest_brief=1 \
  --gtest_filter='All/RuntimeCompileTarget.EveryKernel/sm_90a:*Sm90*:*sm90*'
