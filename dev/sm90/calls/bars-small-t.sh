#!/usr/bin/env bash
# The bars of a commit and where its small calls' time goes, in one call (on the GPU machine, carry
# .deps): `bash dev/sm90/calls/bars-small-t.sh <commit>`, ~540 s. The sm90 bench as `auto` runs it
# (bf16, FP8 W8A16, NVFP4, FP8 W8A8; Mistral-Small-4 and DeepSeek-V3; T = 1 ... 36308) with the
# resource report; then ncu's kernel table of one forward at T = 1 and 8 (Mistral-Small-4: bf16,
# W8A8, NVFP4), where fixed costs (the small kernels, ramps, fixups) weigh most against the
# floor; then the W8A8 stress if the call has time left. Results under $OUT/r.tgz.
C=${1:?commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, st, tst, prof, bench; builds $C
bench w16 MOEFORGE_BENCH_WEIGHTS="bf16 fp8 nvfp4"
bench a8 MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8
prof small-bf16 "1 8" bf16 bf16
prof small-w8a8 "1 8" fp8 fp8
prof small-nvfp4 "1 8" nvfp4 bf16
[ $(el) -lt 500 ] && st stress MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8"
echo "== done at $(el)s"
