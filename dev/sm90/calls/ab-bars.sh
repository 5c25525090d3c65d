#!/usr/bin/env bash
# A change's A/B at the small calls and the bars of its tree, in one call, for sessions with
# device time for only one (on the GPU machine, carry .deps and .ab; .ab/main = the baseline's
# `git archive`): `bash dev/sm90/calls/ab-bars.sh <commit> <baseline commit>`, ~590 s.
# 1. the sm90 bench of both trees, Mistral-Small-4, AB_TOKENS (1,2,8,32), each weights:activations
#    pair of AB_SETS (bf16, W8A8, NVFP4); 2. the bars of <commit> (bars.sh's two benches: every
#    format, both models, T = 1 ... 36308, with the resource report); 3. its stress with the
#    decode GEMMs forced (bf16); 4. its sm90 GPU tests with the decode GEMMs forced until the
#    call's time is spent. A change to the decode GEMMs leaves the wide ones as the baseline's,
#    so the bars' large T are the baseline's too. Results under $OUT/r.tgz, written as it goes.
C=${1:?commit}; B=${2:?a baseline commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench, small_bench; builds $C
for pair in ${AB_SETS:-bf16: fp8:fp8 nvfp4:}; do
  w=${pair%%:*} a=${pair#*:}
  small_bench ab-$w-$a $w "$a" ${AB_TOKENS:-1,2,8,32} MOEFORGE_BASELINE_SRC=$PWD/.ab/main MOEFORGE_BASELINE_COMMIT=$B
done
bench w16 MOEFORGE_BENCH_WEIGHTS="bf16 fp8 nvfp4"
bench a8 MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8
st stress MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_ARGS="--weights bf16 --max-tokens 512"
left=$(( 575 - $(el) ))
[ $left -gt 30 ] && tst t MOEFORGE_TEST_PASSES=sm90-decode MOEFORGE_GPU_FILTER_SM90='Sm90Layer.*:*Sm90LayerMatrix*:*Sm90Gather*' \
  MOEFORGE_TEST_SECONDS=$left
echo "== done at $(el)s"
