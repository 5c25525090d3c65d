#!/usr/bin/env bash
# Small calls (T <= 16) in one call: a ladder of trees, then where stream-K pays, then the kernel
# tables. On the GPU machine (carry .deps and .ab, as ab.sh's recipe):
#   bash dev/sm90/calls/small-t.sh <tip> <base> [<base2> ...]
# Steps, each skipped once the call's time is short (~560 s in all):
# - the sm90 bench of every tree, Mistral-Small-4, bf16 and W8A8 (SMALL_SETS), T = 1, 2, 8;
# - the tip's sm90 GPU tests with the decode GEMMs forced (the T = 1 / 2 / 7 matrix, Sm90Layer.*,
#   the gather) for 100 s;
# - the tip's bench at T = 4, 8, 16 with stream-K forced on (MOEFORGE_SM90_STREAM_K=1), against
#   the rule's choice (its 4 / 5 fill threshold);
# - the tip's ncu kernel table at T = 1 and 8, bf16 (where the small kernels' time goes).
C=${1:?commit}; : "${2:?a baseline commit}"
base_srcs=""; for b in "${@:2}"; do base_srcs+="${base_srcs:+ }$PWD/.ab/$([ -d .ab/$b ] && echo $b || echo main)"; done
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench, small_bench; builds $C
for pair in ${SMALL_SETS:-fp8:fp8 bf16:bf16}; do
  small_bench ladder-${pair%%:*}-${pair#*:} ${pair%%:*} ${pair#*:} 1,2,8 \
    MOEFORGE_BASELINE_SRC="$base_srcs" MOEFORGE_BASELINE_COMMIT="${*:2}"
done
[ $(el) -lt 400 ] && tst t MOEFORGE_TEST_PASSES=sm90-decode MOEFORGE_TEST_SECONDS=100 \
  MOEFORGE_GPU_FILTER_SM90='Sm90Layer.*:*Sm90Gather*:*Sm90LayerMatrix*_T1:*Sm90LayerMatrix*_T2:*Sm90LayerMatrix*_T7'
for pair in bf16:bf16 fp8:fp8; do
  [ $(el) -lt 480 ] && small_bench sk1-${pair%%:*} ${pair%%:*} ${pair#*:} 4,8,16 MOEFORGE_SM90_STREAM_K=1
done
[ $(el) -lt 500 ] && prof small-bf16 "1 8" bf16 bf16
echo "== done at $(el)s"
