#!/usr/bin/env bash
# Sanitizer suite: the CPU test binary built twice more, in build-asan
# (-fsanitize=address,undefined) and build-tsan (-fsanitize=thread), RelWithDebInfo at -O1
# (sanitizer builds at -O2 cost more build time than they save run time on 2 cores), and
# run under each; any sanitizer report fails the suite (halt_on_error=1: the first report
# ends the run with a non-zero status). tests/cpu/test_concurrency.cpp is the TSan target
# (one layer from many threads, the kernel cache, backend choice / self-test memo, the
# breadcrumb ring); every other CPU test runs too.
#
# Excluded, both builds: All/RuntimeCompileTarget.EveryKernel/* and
# PortableKernels.CompileForEveryTarget. They NVRTC-compile every kernel for every target
# (minutes of pure NVRTC time, uninstrumented code: nothing for a sanitizer to see) and
# already run in the plain CPU suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
t_start=$(date +%s)
exclude="All/RuntimeCompileTarget.EveryKernel/*:PortableKernels.CompileForEveryTarget"
cache=$(mktemp -d /tmp/moeforge-san-cache.XXXXXX)
trap 'rm -rf "$cache"' EXIT
export MOEFORGE_CACHE_DIR=$cache
export PATH=/usr/local/cuda/bin:$PATH
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
failed=0
for kind in asan tsan; do
  build=$root/build-$kind
  sanitize=$([ $kind = asan ] && echo address,undefined || echo thread)
  t0=$(date +%s)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" -DMOEFORGE_SANITIZE=$sanitize \
        -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" >/dev/null
  # --as-needed: CUDA::nvrtc drags the driver stub (stubs/libcuda.so) onto the link line;
  # the sanitizer link specs turn --no-as-needed on, so without this the binaries would
  # need libcuda.so.1 at load time and fail on a machine without a driver (CI).
  ninja -C "$build" -j "$(nproc)" moeforge_cpu_tests >/dev/null
  t1=$(date +%s)
  log=$build/sanitizer-tests.log
  if (cd "$build" && ./tests/moeforge_cpu_tests --gtest_filter="-$exclude" > "$log" 2>&1); then
    echo "sanitizers: $kind ($sanitize) ok: $(grep -E '^\[  PASSED  \]' "$log" | tail -1) (build $((t1 - t0))s, run $(( $(date +%s) - t1 ))s)"
  else
    failed=1
    echo "sanitizers: $kind ($sanitize) FAILED (log $log):"
    grep -E "ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error|SUMMARY:|^\[  FAILED  \]" "$log" | head -20
    tail -n 40 "$log"
  fi
done
echo "sanitizers: $([ $failed = 0 ] && echo passed || echo FAILED), $(( $(date +%s) - t_start ))s in all"
exit $failed
