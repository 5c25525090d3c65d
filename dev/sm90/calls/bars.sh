#!/usr/bin/env bash
# The bars call on a final commit (on the GPU machine, carry .deps): `bash dev/sm90/calls/bars.sh <commit>`.
# ~560 s: build; the sm90 bench as `auto` runs it (bf16, FP8 W8A16, NVFP4, FP8 W8A8; Mistral-Small-4
# and DeepSeek-V3; T = 1 ... 36308); the compiler's resource report for every sm90 GEMM the bench
# compiled; the W8A8 stress with the planner's choice; then the sm90 GPU tests as a user gets them
# (the auto pass) until the call's time is spent. Results under $OUT/r.tgz, written as it goes.
C=${1:?commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench; builds $C
bench w16 MOEFORGE_BENCH_WEIGHTS="bf16 fp8 nvfp4"
bench a8 MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8
st stress MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8"
left=$(( 500 - $(el) ))
[ $left -gt 30 ] && tst t MOEFORGE_TEST_PASSES=default MOEFORGE_GPU_FILTER='Sm90*:Robust*-RobustLongPrefill.*' \
  MOEFORGE_TEST_SECONDS=$left
