#!/usr/bin/env bash
# One call on a GPU machine: build, run the GPU test suite, run doctor and the
# benchmarks, write every record under $OUT (copied back to bench/results/),
# print a short table last.
#
#   bash tests/gpu/run_all.sh <commit> [stages]     stages: any of build,doctor,runs,tests,sass,bench,profile,
#                                                   stress,sanitizer (default: all but profile, stress, sanitizer)
#
# The GPU machine cannot install packages: the pinned Debian -dev packages travel
# unpacked in .deps/ (tools/fetch_deps.sh) and are found through CMAKE_PREFIX_PATH.
set -uo pipefail
commit=${1:?usage: run_all.sh <commit> [stages]}
stages=${2:-build,doctor,runs,tests,sass,bench}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
logs=$(mktemp -d /tmp/moeforge-logs.XXXX)   # logs travel back as one archive: $OUT takes at most 8 files
# (one $OUT/logs.tgz per invocation: several invocations in one call need OUT=$OUT/<subdir> each)
mkdir -p "$out"
export MOEFORGE_COMMIT=$commit
export MOEFORGE_CACHE_DIR=${MOEFORGE_CACHE_DIR:-/tmp/moeforge-cache}
prefix=$root/.deps/root/usr
export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
build=$root/build-gpu
summary=()
has() { [[ ",$stages," == *",$1,"* ]]; }
# Hopper (compute capability 9.0: the sm90 backend's sm_90a)
is_sm90() { [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)" = "9.0" ]; }
note() { summary+=("$1"); echo "== $1"; }

if has build; then
  t0=$(date +%s)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
        -DOPENSSL_ROOT_DIR="$prefix" > "$logs/build.log" 2>&1 &&
  ninja -C "$build" >> "$logs/build.log" 2>&1
  rc=$?
  tail -n 30 "$logs/build.log"
  note "build rc=$rc in $(( $(date +%s) - t0 ))s"
  [ $rc -eq 0 ] || { printf '%s\n' "${summary[@]}"; tar czf "$out/logs.tgz" -C "$logs" .; exit 1; }
fi
cli=$build/moeforge
# A/B in one call: MOEFORGE_BASELINE_SRC=<a source tree> (e.g. `git archive` of main into a carried,
# git-excluded folder) and MOEFORGE_BASELINE_COMMIT=<its commit>: the bench and profile stages
# run the same matrix with that tree's CLI too (records tagged "-base"), so a kernel change is
# judged against its predecessor on the same machine in the same run. Several trees (a ladder:
# main, main + change 1, main + changes 1 and 2, ...) are space-separated lists in both
# variables, in the same order; the i-th (from 2) is tagged "-base<i>".
base_clis=()  # the CLIs of the baselines that built, by index: 1 (-base), 2 (-base2), ...
if [ -n "${MOEFORGE_BASELINE_SRC:-}" ]; then
  read -ra base_srcs <<< "$MOEFORGE_BASELINE_SRC"
  read -ra base_commits <<< "${MOEFORGE_BASELINE_COMMIT:?name the baseline commit}"
  [ ${#base_srcs[@]} = ${#base_commits[@]} ] || { echo "MOEFORGE_BASELINE_SRC and _COMMIT: one commit a tree" >&2; exit 1; }
  for i in "${!base_srcs[@]}"; do
    # A build folder per source tree: a warm machine keeps the last call's, whose CMake cache
    # names its source and refuses another.
    n=$((i + 1)) dir=$root/build-base-$(basename "${base_srcs[$i]}")
    cmake -S "${base_srcs[$i]}" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DCMAKE_PREFIX_PATH="$prefix" -DOPENSSL_ROOT_DIR="$prefix" > "$logs/build-base$n.log" 2>&1 &&
      ninja -C "$dir" moeforge >> "$logs/build-base$n.log" 2>&1
    rc=$?
    note "baseline build $n (${base_commits[$i]}) rc=$rc"
    [ $rc -eq 0 ] && base_clis[$n]=$dir/moeforge
  done
fi
# Sets run_cli, its file suffix and environment for `main` (this tree) or baseline n.
select_cli() {
  run_cli=$cli sfx="" run_env=()
  if [ "$1" != main ]; then
    sfx=-base$([ "$1" = 1 ] || echo "$1")
    run_cli=${base_clis[$1]}
    run_env=(MOEFORGE_COMMIT=${base_commits[$(($1 - 1))]} MOEFORGE_CACHE_DIR=$MOEFORGE_CACHE_DIR$sfx)
  fi
}

if has doctor; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | head -2
  "$cli" doctor --json > "$out/doctor.json" 2> "$logs/doctor.err"; note "doctor rc=$?"
  "$cli" doctor 2>&1 | head -60
fi

if has runs; then  # the README's main job, on the GPU, checked against the CPU reference
  for a in "mistral-small-4 --tokens 64" "deepseek-v3 --tokens 64" "gpt-oss-120b --tokens 7 --weights mxfp4" \
           "mistral-small-4 --tokens 333 --weights nvfp4" "qwen3-30b-a3b --tokens 2048 --weights fp8"; do
    echo "== moeforge run --model $a --check"
    "$cli" run --model $a --check 2>&1 | tee -a "$logs/runs.txt" | tail -n 7
    note "run $a: rc=${PIPESTATUS[0]}"
  done
fi

if has tests; then
  # Pass 1: the whole suite as a user gets it (auto / explicit backends, the tuned planner).
  # Passes 2 and 3 (sm_90a only): the sm90 matrix and the robustness suite on the sm90 backend
  # with one of its GEMM pairs forced for every batch size: the wide ones
  # (MOEFORGE_SM90_CROSSOVER=0), then the decode ones (MOEFORGE_SM90_CROSSOVER=1e9).
  for pass in ${MOEFORGE_TEST_PASSES:-default sm90-wide sm90-decode}; do
    if [ $pass = default ]; then
      env_args=() filter=${MOEFORGE_GPU_FILTER:-} json="$out/gpu-tests.json"
    else
      is_sm90 || continue
      crossover=0
      [ $pass = sm90-decode ] && crossover=1e9
      env_args=(MOEFORGE_TEST_BACKEND=sm90 MOEFORGE_SM90_CROSSOVER=$crossover)
      filter=${MOEFORGE_GPU_FILTER_SM90:-'*Sm90*:*Robust*'} json="$out/gpu-tests-$pass.json"
    fi
    t0=$(date +%s)
    # MOEFORGE_TEST_SECONDS: stop the pass after that long; its record keeps every finished case
    # ("complete": false) and the logs still come back.
    # MOEFORGE_TEST_SHARDS=N (4 by default): N processes, each a gtest shard (GTEST_TOTAL_SHARDS /
    # GTEST_SHARD_INDEX) sharing the kernel cache, their records merged into one. A fresh machine
    # spends most of a pass compiling kernels one at a time; N processes compile N at once on its
    # cores (session 22: the default pass complete in 209 s with 4, where one process had run 16
    # tests in 170 s). 1: one process, as before.
    shards=${MOEFORGE_TEST_SHARDS:-4} rc=0 pids=()
    for ((s = 0; s < shards; s++)); do
      shard_env=(); sfx_s=""
      [ $shards -gt 1 ] && shard_env=(GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$s) sfx_s=".shard$s"
      env "${env_args[@]}" "${shard_env[@]}" ${MOEFORGE_TEST_SECONDS:+timeout $MOEFORGE_TEST_SECONDS} \
          "$build/tests/moeforge_gpu_tests" --json "$json$sfx_s" ${filter:+--gtest_filter=$filter} \
          > "$logs/gpu-tests-$pass$sfx_s.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait $p; r=$?; [ $r -gt $rc ] && rc=$r; done
    # The counts: the merged record's (shards), or gtest's last line (one process).
    if [ $shards -gt 1 ]; then
      counts=$(python3 "$root/tools/merge_test_records.py" "$json" "$json".shard*) && rm -f "$json".shard*
      cat "$logs/gpu-tests-$pass".shard*.log > "$logs/gpu-tests-$pass.log"
    else
      counts=$(grep -E '^\[  PASSED  \]' "$logs/gpu-tests-$pass.log" | tail -1)
    fi
    grep -E "^\[  (FAILED|PASSED) |^\[==========\]|FAILED  \]" "$logs/gpu-tests-$pass.log" | tail -n 40
    note "gpu tests ($pass) rc=$rc in $(( $(date +%s) - t0 ))s: $counts, $(grep -cE '^\[  FAILED  \] [A-Za-z]' "$logs/gpu-tests-$pass.log") failed lines"
  done
fi

if has bench; then
  # Backends: the portable one, and on sm_90a the sm90 one three times: with its tuned
  # planner, and with its wide or its decode GEMMs forced at every T ("sm90-wide",
  # "sm90-decode"), which measures the crossover.
  backends=${MOEFORGE_BENCH_BACKENDS:-portable}
  if [ -z "${MOEFORGE_BENCH_BACKENDS:-}" ] && is_sm90; then
    backends="portable sm90 sm90-wide sm90-decode"
  fi
  for model in ${MOEFORGE_BENCH_MODELS:-mistral-small-4}; do
    for backend in $backends; do
      for w in ${MOEFORGE_BENCH_WEIGHTS:-bf16}; do
        acts=${MOEFORGE_BENCH_ACTIVATIONS:-bf16}
        tag=$model-$backend-$w$([ "$acts" = bf16 ] || echo "-a$acts")
        # MOEFORGE_BENCH_L2_FLUSH=write: the memset flush of the records before session 7 (tagged).
        flush=${MOEFORGE_BENCH_L2_FLUSH:-read}
        [ "$flush" = read ] || tag+="-flush$flush"
        [ -z "${MOEFORGE_SM90_DECODE_BT:-}" ] || tag+="-bt$MOEFORGE_SM90_DECODE_BT"  # a forced decode token tile
        [ -z "${MOEFORGE_SM90_STREAM_K:-}" ] || tag+="-sk$MOEFORGE_SM90_STREAM_K"  # stream-K forced on / off
        # MOEFORGE_BENCH_LAUNCH=stream: each run enqueues the forward's launches (the records before
        # session 11; tagged); the default replays it from a CUDA graph.
        launch=${MOEFORGE_BENCH_LAUNCH:-graph}
        [ "$launch" = graph ] || tag+="-$launch"
        # Programmatic dependent launch is on by default (since session 12; the records say "pdl").
        [ "${MOEFORGE_PDL:-1}" = 1 ] || tag+="-nopdl"
        env_args=()
        [ "$backend" = sm90-wide ] && env_args=(MOEFORGE_SM90_CROSSOVER=0)
        [ "$backend" = sm90-decode ] && env_args=(MOEFORGE_SM90_CROSSOVER=1e9)
        for which in main "${!base_clis[@]}"; do
          select_cli $which
          run_tag=$tag$sfx
          launch_args=(--launch "$launch")  # a baseline older than --launch enqueues directly
          "$run_cli" bench --help 2>/dev/null | grep -q -- --launch || launch_args=()
          env "${env_args[@]}" "${run_env[@]}" "$run_cli" bench --model "$model" --backend "${backend%-*}" \
              --weights "$w" --activations "$acts" --l2-flush "$flush" "${launch_args[@]}" --tokens ${MOEFORGE_BENCH_TOKENS:-1,8,32,128,512,2048,8192,36308} \
              --json "$out/bench-$run_tag.json" \
              2> "$logs/bench-$run_tag.err" | tee "$logs/bench-$run_tag.txt"
          note "bench $run_tag rc=${PIPESTATUS[0]}"
        done
      done
    done
  done
fi

if has sass; then  # the compiler's resource report for the sm90 GEMMs the runs, tests and bench above compiled
  for j in $(grep -lE '"moe_sm90_(gemm|fp8_gemm|decode)"' "$MOEFORGE_CACHE_DIR"/sm_90a/*.json 2>/dev/null); do
    c=${j%.json}.cubin
    [ -f "$c" ] || continue
    defs=$(python3 -c 'import json, sys; print(" ".join(f"{k}={v}" for k, v in json.load(open(sys.argv[1]))["defines"]))' "$j" 2>/dev/null)
    res=$(cuobjdump -res-usage "$c" 2>&1 | grep -oE 'REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+' | head -1)
    sass=$(cuobjdump -sass "$c" 2>/dev/null)
    entry=$(grep -oE '"moe_sm90_[a-z0-9_]+"' "$j" | head -1 | tr -d '"')
    counts="HGMMA=$(grep -cE 'HGMMA' <<<"$sass") QGMMA=$(grep -cE 'QGMMA' <<<"$sass")"
    counts+=" LDL/STL=$(grep -cE '\b(LDL|STL)\b' <<<"$sass")"
    note "$entry $defs: $res $counts $(grep -oE '[HQ]GMMA\.[0-9x]+\.[A-Z0-9.]+' <<<"$sass" | sort -u | tr '\n' ' ')"
  done
fi

if has profile; then  # ncu, one forward per T of the main job: where the time goes, kernel by kernel
  # Clocks as the bench runs them (MOEFORGE_PROFILE_CLOCKS=none; "base" is ncu's default lock,
  # used by the records before session 6), so the kernel times add up to the bench's time.
  metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active,launch__grid_size,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg
  # With MOEFORGE_BASELINE_SRC, the baseline's CLI is profiled the same way after this tree's.
  for which in main "${!base_clis[@]}"; do
    select_cli $which
    for T in ${MOEFORGE_PROFILE_TOKENS:-128 36308}; do
      csv="$logs/profile-T$T$sfx.csv"
      env "${run_env[@]}" ncu --csv --print-units base --clock-control ${MOEFORGE_PROFILE_CLOCKS:-none} \
          --metrics "$metrics" -k regex:moe_ "$run_cli" run --model ${MOEFORGE_PROFILE_MODEL:-mistral-small-4} \
          --tokens "$T" --backend ${MOEFORGE_PROFILE_BACKEND:-auto} --weights ${MOEFORGE_PROFILE_WEIGHTS:-bf16} \
          --activations ${MOEFORGE_PROFILE_ACTIVATIONS:-bf16} > "$csv" 2> "$logs/profile-T$T$sfx.err"
      note "profile$sfx T=$T rc=$?"
      python3 "$root/tools/ncu_kernel_table.py" "$csv" "$T$sfx"
    done
  done 2>&1 | tee "$logs/profile.txt"
  # MOEFORGE_PROFILE_CEILINGS=1: the bench's ceilings (cuBLAS's bf16 and FP8 GEMMs, the read
  # kernel) profiled the same way, medians per kernel: their tensor-pipe share and clock beside
  # the layer's kernels' (9ae0ba6: the W8A8 GEMMs ran at ~1.5 GHz, the memory-bound kernels ~1.9).
  if [ "${MOEFORGE_PROFILE_CEILINGS:-0}" = 1 ]; then
    csv="$logs/profile-ceilings.csv"
    ncu --csv --print-units base --clock-control ${MOEFORGE_PROFILE_CLOCKS:-none} --metrics "$metrics" \
        -k 'regex:^(?!moe_)' "$cli" bench --model mistral-small-4 --tokens 1 --runs 1 --backend sm90 \
        > "$csv" 2> "$logs/profile-ceilings.err"
    note "profile ceilings rc=$?"
    python3 "$root/tools/ncu_kernel_table.py" "$csv" ceilings --by-name 2>&1 | tee -a "$logs/profile.txt"
  fi
  # Why a kernel is slow, not just how slow: ncu sections (e.g. "WarpStateStats SchedulerStats"
  # for stall reasons and issue slots) on MOEFORGE_PROFILE_KERNEL (default moe_sm90_decode):
  # its first 2 launches (GEMM 1 and 2 of the first forward; an explicit backend runs no
  # self-test) at the first MOEFORGE_PROFILE_TOKENS value.
  if [ -n "${MOEFORGE_PROFILE_SECTIONS:-}" ]; then
    T=${MOEFORGE_PROFILE_TOKENS:-128}; T=${T%% *}
    sec_args=(); for sname in $MOEFORGE_PROFILE_SECTIONS; do sec_args+=(--section "$sname"); done
    ncu "${sec_args[@]}" -c 2 -k regex:"${MOEFORGE_PROFILE_KERNEL:-moe_sm90_decode}" "$cli" run \
        --model ${MOEFORGE_PROFILE_MODEL:-mistral-small-4} --tokens "$T" --backend ${MOEFORGE_PROFILE_BACKEND:-sm90} \
        --weights ${MOEFORGE_PROFILE_WEIGHTS:-bf16} --activations ${MOEFORGE_PROFILE_ACTIVATIONS:-bf16} \
        > "$logs/profile-sections-T$T.txt" 2>&1
    note "profile sections T=$T rc=$?"
    grep -E "^  [a-z_]+.*\(|Warp Cycles|Stall|Issue|Eligible|Active Warps" "$logs/profile-sections-T$T.txt" | tail -n 40
  fi
  # On which instruction the warps wait: MOEFORGE_PROFILE_SOURCE=1 samples the same kernels
  # (ncu --set full) and writes the per-instruction table (SASS, every stall reason) as
  # $OUT/ncu-source-T<T>.csv.gz, summarized by tools/ncu_source_top.py.
  if [ "${MOEFORGE_PROFILE_SOURCE:-0}" = 1 ]; then
    T=${MOEFORGE_PROFILE_TOKENS:-128}; T=${T%% *}
    rep=$logs/source-T$T
    ncu -f -o "$rep" --set full --import-source no -c 2 -k regex:"${MOEFORGE_PROFILE_KERNEL:-moe_sm90_decode}" \
        "$cli" run --model ${MOEFORGE_PROFILE_MODEL:-mistral-small-4} --tokens "$T" \
        --backend ${MOEFORGE_PROFILE_BACKEND:-sm90} --weights ${MOEFORGE_PROFILE_WEIGHTS:-bf16} \
        --activations ${MOEFORGE_PROFILE_ACTIVATIONS:-bf16} > "$rep.log" 2>&1 &&
      ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>> "$rep.log"
    note "profile source T=$T rc=$?"
    # Every section's numbers of the same two launches (shared-memory and L2 traffic, stall
    # reasons, occupancy), read offline.
    [ -f "$rep.ncu-rep" ] && ncu -i "$rep.ncu-rep" --page details --csv 2>> "$rep.log" | gzip > "$out/ncu-details-T$T.csv.gz"
    if [ -s "$rep.csv" ]; then
      gzip -c "$rep.csv" > "$out/ncu-source-T$T.csv.gz"
      for k in 0 1; do python3 "$root/tools/ncu_source_top.py" "$rep.csv" --kernel $k --top 12; done 2>&1 | tee "$logs/source-top-T$T.txt"
    fi
  fi
fi

if has stress; then
  # MOEFORGE_STRESS_ARGS: more flags (e.g. "--weights fp8 --activations fp8"); MOEFORGE_STRESS_THREADS /
  # _STREAMS (default 8 / 8; 1 / 1 runs the batches in sequence: a mismatch then is stale data, not a race).
  "$cli" stress --model mistral-small-4 ${MOEFORGE_STRESS_ARGS:-} --threads ${MOEFORGE_STRESS_THREADS:-8} \
      --streams ${MOEFORGE_STRESS_STREAMS:-8} \
      --minutes ${MOEFORGE_STRESS_MINUTES:-1} \
      --pool ${MOEFORGE_STRESS_POOL:-24} --json "$out/stress-mistral-small-4.json" 2> "$logs/stress.err" | tee "$logs/stress.txt"
  note "stress rc=${PIPESTATUS[0]}: $(head -1 "$logs/stress.txt")"
fi

if has sanitizer; then  # compute-sanitizer over a reduced GPU suite: one JSON record, logs into logs.tgz
  # Small cases only (racecheck on the GEMM is slow): two presets at T <= 64 on the portable
  # and the sm90 backends, decode-sized graph replays, precomputed ids. Each tool is bounded (MOEFORGE_SANITIZER_SECONDS, default
  # 110 s: the device runs at most 10 minutes per command, so run this stage on its own:
  # run_all.sh <commit> build,sanitizer). A run cut short is recorded as "complete": false.
  san_filter=${MOEFORGE_SANITIZER_FILTER:-'All/PortableLayerMatrix.MatchesReference/mistral_small_4_*_T7:All/PortableLayerMatrix.MatchesReference/deepseek_v3_bf16_T64:PortableLayer.PrecomputedIdsEqualRoutedForward:Decode/RobustGraph.*/T1_*:RobustHostile.ZeroAndOneTokenWithPrecomputedIds:All/Sm90LayerMatrix.MatchesReference/mistral_small_4_bf16_T7:All/Sm90LayerMatrix.MatchesReference/deepseek_v3_bf16_T64'}
  san_json="" san_total=0 san_incomplete=0
  for tool in ${MOEFORGE_SANITIZER_TOOLS:-memcheck racecheck initcheck synccheck}; do
    t0=$(date +%s)
    timeout -s INT "${MOEFORGE_SANITIZER_SECONDS:-110}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
        --print-limit 200 --log-file "$logs/sanitizer-$tool.log" \
        "$build/tests/moeforge_gpu_tests" --gtest_filter="$san_filter" > "$logs/sanitizer-$tool.out" 2>&1
    rc=$?
    # memcheck/initcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: N hazards
    # displayed (E errors, W warnings)" (warnings are counted too).
    errs=$(grep -hoE 'ERROR SUMMARY: [0-9]+' "$logs/sanitizer-$tool.log" 2>/dev/null | awk '{s+=$3} END{print s+0}')
    haz=$(grep -hoE '\(([0-9]+) errors, ([0-9]+) warnings\)' "$logs/sanitizer-$tool.log" 2>/dev/null |
          grep -oE '[0-9]+' | awk '{s+=$1} END{print s+0}')
    errs=$((errs + haz))
    complete=true; grep -qE 'SUMMARY' "$logs/sanitizer-$tool.log" 2>/dev/null || complete=false
    [ $rc -eq 124 ] || [ $rc -eq 130 ] && complete=false
    [ "$complete" = true ] || san_incomplete=$((san_incomplete + 1))
    passed_tests=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/sanitizer-$tool.out" | awk '{print $4}' | tail -1)
    san_total=$((san_total + errs))
    san_json+="${san_json:+,}\"$tool\": {\"errors\": $errs, \"rc\": $rc, \"seconds\": $(( $(date +%s) - t0 )), \"complete\": $complete, \"tests_passed\": ${passed_tests:-0}}"
    note "sanitizer $tool: $errs errors, rc=$rc, complete=$complete in $(( $(date +%s) - t0 ))s"
  done
  gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  printf '{\n  "kind": "sanitizer",\n  "commit": "%s",\n  "date": "%s",\n  "device": {"name": "%s", "driver": "%s"},\n  "filter": "%s",\n  "tools": {%s},\n  "errors": %d,\n  "incomplete_tools": %d\n}\n' \
    "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${gpu_name%%,*}" "${gpu_name#*, }" "$san_filter" "$san_json" \
    "$san_total" "$san_incomplete" > "$out/sanitizer.json"
fi

echo; echo "== summary (commit $commit)"; printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
# Each table under its file's name: an A/B's baseline ("-base") sorts before this tree's.
for f in "$logs"/bench-*.txt "$logs"/profile.txt; do [ -f "$f" ] && { echo "-- ${f##*/}"; cat "$f"; }; done
tar czf "$out/logs.tgz" -C "$logs" .
