#!/usr/bin/env bash
# The bars of a commit and a small-call A/B against another tree, in one call (on the GPU
# machine, carry .deps and .ab): `bash dev/sm90/calls/bars-ab.sh <commit> <other commit>`, the other
# tree in .ab/<other commit> (git archive), ~480 s. The sm90 bench as `auto` runs it (bf16, FP8
# W8A16, NVFP4, FP8 W8A8; Mistral-Small-4 and DeepSeek-V3; T = 1 ... 36308) with the resource
# report; then Mistral-Small-4 bf16 and W8A8 at T = 1, 2, 3 of both trees (the other tree's records
# tagged "-base"); then the W8A8 stress if the call has time left. Results under $OUT/r.tgz.
C=${1:?commit}; B=${2:?the other tree's commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench; builds $C
bench w16 MOEFORGE_BENCH_WEIGHTS="bf16 fp8 nvfp4"
bench a8 MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8
for pair in fp8:fp8 bf16:bf16; do
  n=ab-${pair%%:*}-${pair#*:}
  MOEFORGE_BASELINE_SRC=$PWD/.ab/$B MOEFORGE_BASELINE_COMMIT=$B OUT=/tmp/o/$n MOEFORGE_BENCH_BACKENDS=sm90 \
    MOEFORGE_BENCH_MODELS=mistral-small-4 MOEFORGE_BENCH_WEIGHTS=${pair%%:*} MOEFORGE_BENCH_ACTIVATIONS=${pair#*:} \
    MOEFORGE_BENCH_TOKENS=1,2,3 bash tests/gpu/run_all.sh $C bench > /tmp/o/$n.log 2>&1
  echo "== $n at $(el)s"; sed -n '/== summary/,$p' /tmp/o/$n.log | grep -E "^-- bench|^ +[0-9]+ " | cut -c1-100; T
done
[ $(el) -lt 520 ] && st stress MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8"
echo "== done at $(el)s"
