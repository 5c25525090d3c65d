#!/usr/bin/env bash
# A/B of a kernel change against main in one call (on the GPU machine, carry .deps and .ab):
#   here: commit the change on a branch (or `git am dev/sm90/patches/<patch>` on one), check it out;
#         rm -rf .ab && mkdir -p .ab/main && git archive main | tar x -C .ab/main
#         bash dev/sm90/calls/precheck.sh   (every kernel through NVRTC for sm_90a, here)
#   then: bash dev/sm90/calls/ab.sh <the branch's commit> <main's commit>
# A ladder (several trees in one call): ab.sh <tip> <base> <base2> ...: baseline n's tree is
# .ab/<its commit> where that exists (else .ab/main), its records tagged "-base<n>" (run_all.sh).
# (the call copies the working tree: check the branch out before calling, main again after).
# Steps, in this order:
# - the sm90 bench of both trees for each weights:activations pair of AB_SETS ("fp8:fp8" W8A8,
#   "bf16:" bf16, ...), AB_MODELS (both by default), AB_TOKENS. Include a T that both trees run
#   the same way (e.g. 512, the decode GEMMs, for a wide-GEMM change): the call's noise floor;
# - with AB_STRESS=1, the changed tree's stress (the first pair's formats) with the planner's
#   choice, then with the decode GEMMs forced;
# - the changed tree's sm90 GPU tests with the wide GEMMs forced (AB_TESTS, a gtest filter, or
#   "none"), for AB_TEST_SECONDS; AB_TEST_PASSES=default (the planner's choice) or sm90-decode
#   for a decode-GEMM change;
# - with AB_PROFILE=<T>, the changed tree's per-instruction stall profile of AB_PROFILE_KERNEL
#   (default moe_sm90_fp8_gemm: GEMM 1 and 2 of one forward) at T, in the first pair's formats
#   (run_all.sh's MOEFORGE_PROFILE_SOURCE; the top instructions printed, the table in r.tgz).
# Defaults: the W8A8 call (fp8:fp8, T = 512, 2048, 8192, 36308, both models, stress on), ~340 s.
C=${1:?commit}; : "${2:?a baseline commit}"
base_srcs=""; for b in "${@:2}"; do base_srcs+="${base_srcs:+ }$PWD/.ab/$([ -d .ab/$b ] && echo $b || echo main)"; done
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench; builds $C
pairs=${AB_SETS:-fp8:fp8}
first=${pairs%% *}; w1=${first%%:*} a1=${first#*:}  # the first pair's formats (stress, profile)
for pair in $pairs; do
  w=${pair%%:*} a=${pair#*:}
  MOEFORGE_BASELINE_SRC="$base_srcs" MOEFORGE_BASELINE_COMMIT="${*:2}" OUT=/tmp/o/ab-$w-$a MOEFORGE_BENCH_BACKENDS=sm90 \
    MOEFORGE_BENCH_MODELS="${AB_MODELS:-mistral-small-4 deepseek-v3}" MOEFORGE_BENCH_WEIGHTS=$w MOEFORGE_BENCH_ACTIVATIONS=$a \
    MOEFORGE_BENCH_TOKENS=${AB_TOKENS:-512,2048,8192,36308} bash tests/gpu/run_all.sh $C bench > /tmp/o/ab-$w-$a.log 2>&1
  echo "== ab $w:$a at $(el)s"; sed -n '/== summary/,$p' /tmp/o/ab-$w-$a.log | grep -E "^-- bench|^ +[0-9]+ " | cut -c1-100; T
done
if [ "${AB_STRESS:-1}" = 1 ]; then
  sargs="--weights $w1${a1:+ --activations $a1}"
  st planner MOEFORGE_STRESS_ARGS="$sargs"
  st decode MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_ARGS="$sargs --max-tokens 2048"
fi
[ "${AB_TESTS:-}" = none ] || tst t MOEFORGE_TEST_PASSES=${AB_TEST_PASSES:-sm90-wide} MOEFORGE_TEST_SECONDS=${AB_TEST_SECONDS:-120} \
  MOEFORGE_GPU_FILTER_SM90=${AB_TESTS:-'Sm90Layer.Fp8ActivationsW8A8:Sm90Layer.OutputsDependOnlyOnTheirInput:Sm90Layer.Deterministic'}
if [ -n "${AB_PROFILE:-}" ]; then
  env OUT=/tmp/o/profile MOEFORGE_PROFILE_SOURCE=1 MOEFORGE_PROFILE_KERNEL=${AB_PROFILE_KERNEL:-moe_sm90_fp8_gemm} \
    MOEFORGE_PROFILE_TOKENS=$AB_PROFILE MOEFORGE_PROFILE_BACKEND=sm90 MOEFORGE_PROFILE_WEIGHTS=$w1 \
    MOEFORGE_PROFILE_ACTIVATIONS=${a1:-bf16} bash tests/gpu/run_all.sh $C profile > /tmp/o/profile.log 2>&1
  echo "== profile T=$AB_PROFILE at $(el)s"; grep -E "moe_sm90|^[ 0-9.]+%  " /tmp/o/profile.log | cut -c1-150 | head -40; T
fi
