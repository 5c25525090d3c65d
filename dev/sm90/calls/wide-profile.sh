#!/usr/bin/env bash
# Where the wide GEMMs' time goes at compute-bound T (issue 5's T = 8192 / 36308 bars): ncu's
# kernel table of one forward (run_all.sh's profile stage: time, tensor-pipe active, DRAM, L2
# hit and throughput, L1 / shared-memory throughput, issue, SM imbalance and clock a kernel) for
# W8A8 and bf16 at T = 8192 and 36308, Mistral-Small-4, the sm90 backend; cuBLAS's ceiling GEMMs
# profiled the same way (their tensor share and clock beside ours); then the W8A8 GEMMs' per-
# instruction stall table and every ncu section (`ncu-details-T36308.csv.gz`) at T = 36308.
# On the GPU machine (carry .deps): `bash dev/sm90/calls/wide-profile.sh <commit>`, ~300 s.
# Results under $OUT/r.tgz; then, as time allows, the W8A8 and bf16 bench (below).
C=${1:?commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, prof, bench; builds $C
prof w8a8 "8192 36308" fp8 fp8 MOEFORGE_PROFILE_CEILINGS=1
prof bf16 "8192 36308" bf16 bf16
prof w8a8-source 36308 fp8 fp8 MOEFORGE_PROFILE_SOURCE=1 MOEFORGE_PROFILE_KERNEL=moe_sm90_fp8_gemm
grep -A14 "== profile source" /tmp/o/w8a8-source.log | cut -c1-170 | head -40
# What the call's time leaves (WIDE_BENCH_UNTIL, 330 s by default: the bench of one set takes
# ~90 s): the bars bench (bars.sh's) of W8A8, then bf16, on the same machine.
[ $(el) -lt ${WIDE_BENCH_UNTIL:-330} ] && bench a8 MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8
[ $(el) -lt ${WIDE_BENCH_UNTIL:-330} ] && bench w16 MOEFORGE_BENCH_WEIGHTS=bf16
true
