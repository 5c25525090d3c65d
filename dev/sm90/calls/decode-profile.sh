#!/usr/bin/env bash
# Where the decode steps' time goes beyond the weight stream (issue 5's T = 8-512 bars, 1.03 /
# 1.05): ncu's kernel table of one forward (the profile stage of run_all.sh: time, DRAM %, L2 hit,
# issue %, SM imbalance per kernel) for bf16, FP8 W8A16, W8A8 and NVFP4 at T = 8, 128 and 512,
# Mistral-Small-4, the sm90 backend as `auto` runs it; then the decode GEMM's stall sections at
# T = 128 for bf16 (the sections take the first T listed). On the GPU machine (carry .deps): `bash dev/sm90/calls/decode-profile.sh <commit>`,
# ~300 s. Results under $OUT/r.tgz. Compare each GEMM's time with its weight bytes / the read
# ceiling (bench's ceilings), and the sum of the small kernels with the bench's time minus the GEMMs.
C=${1:?commit}
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # /tmp/o, el, T, prof; builds $C
prof bf16 "128 8 512" bf16 bf16 MOEFORGE_PROFILE_SECTIONS="SpeedOfLight MemoryWorkloadAnalysis WarpStateStats"
prof fp8 "8 128 512" fp8 bf16
prof w8a8 "8 128 512" fp8 fp8
prof nvfp4 "8 128 512" nvfp4 bf16
