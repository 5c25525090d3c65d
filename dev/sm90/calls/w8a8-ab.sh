#!/usr/bin/env bash
# A/B of a W8A8 kernel patch from dev/sm90/patches/ against main, in one call (on the GPU machine,
# carry .deps and .ab), e.g. w8a8-wide-fence.patch or w8a8-six-stages.patch:
#   here: git checkout -b ab main && git am dev/sm90/patches/<patch>
#         rm -rf .ab && mkdir -p .ab/main && git archive main | tar x -C .ab/main
#   then: bash dev/sm90/calls/w8a8-ab.sh <the branch's commit> <main's commit>   (~340 s)
# The patched tree's W8A8 tests with the wide GEMMs forced, its W8A8 stress (the planner's choice,
# then the decode GEMMs forced at every token tile), and the W8A8 bench of both trees at
# T = 512 (the decode GEMMs: the call's noise floor), 2048, 8192 and 36308, both models.
C=${1:?commit} BASE=${2:?baseline commit}
. "$(dirname "$0")/common.sh"  # /tmp/o, el, T, st; builds $C
OUT=/tmp/o/t MOEFORGE_TEST_PASSES=sm90-wide MOEFORGE_GPU_FILTER_SM90='Sm90Layer.Fp8ActivationsW8A8:Sm90Layer.OutputsDependOnlyOnTheirInput:Sm90Layer.Deterministic' \
  MOEFORGE_TEST_SECONDS=120 bash tests/gpu/run_all.sh $C tests > /tmp/o/t.log 2>&1
echo "== tests at $(el)s: $(grep -E '^gpu tests' /tmp/o/t.log | tail -1)"; T
st a8-planner MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8"
st a8-decode MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8 --max-tokens 2048"
MOEFORGE_BASELINE_SRC=$PWD/.ab/main MOEFORGE_BASELINE_COMMIT=$BASE OUT=/tmp/o/ab MOEFORGE_BENCH_BACKENDS=sm90 \
  MOEFORGE_BENCH_MODELS="mistral-small-4 deepseek-v3" MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8 \
  MOEFORGE_BENCH_TOKENS=512,2048,8192,36308 bash tests/gpu/run_all.sh $C bench > /tmp/o/ab.log 2>&1
echo "== ab at $(el)s"; sed -n '/== summary/,$p' /tmp/o/ab.log | grep -E "^ +[0-9]+ " ; T
