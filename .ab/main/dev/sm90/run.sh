#!/usr/bin/env bash
# dev/sm90/run.sh: build, inspect, check and time the sm90 ladder on an H200, one command:
#     MOEFORGE_COMMIT=$(git rev-parse --short HEAD) bash dev/sm90/run.sh
# Steps: compile every version for sm_90a (ptxas -v into build logs; in parallel unless
# BUILD_JOBS=1); print each GEMM kernel's registers / spills / stack (every instantiation);
# count HGMMA, LDL/STL and MUFU per GEMM kernel in the SASS; run each version (correctness on
# its shapes, then timing next to cuBLAS); merge the JSON records; print the summary table
# last. Exit status: non-zero on any build failure, correctness failure, watchdog stall,
# missing HGMMA or local-memory use.
#
# $OUT (default dev/sm90/out) receives exactly two files:
#   sm90-dev.json            the merged record (every version's rows)
#   sm90-dev-logs.tar.gz     build and run logs, per-version records, SASS of each binary
# Everything is printed to stdout as well (the summary table last).
#
# Environment: MOEFORGE_COMMIT (commit recorded; else git in this checkout; else "unknown"),
# SEED (one seed for all versions: same segments, same data), PER_RUN_TIMEOUT (s, default
# 55, per binary; 03 runs three activations and gets 3x), BUILD_JOBS (1 = sequential build),
# ONLY_VERSIONS (e.g. "02 03").
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA/bin/nvcc")
CUOBJDUMP=$(command -v cuobjdump || { [ -x "$CUDA/bin/cuobjdump" ] && echo "$CUDA/bin/cuobjdump"; } || true)
OUTDIR=${OUT:-$HERE/out}
mkdir -p "$OUTDIR"
BUILD=$(mktemp -d /tmp/sm90-dev.XXXXXX)
LOGS="$BUILD/sm90-dev-logs"  # everything but the merged record; tarred into $OUTDIR at the end
mkdir -p "$LOGS"
COMMIT=${MOEFORGE_COMMIT:-$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)}
PER_RUN_TIMEOUT=${PER_RUN_TIMEOUT:-55}
SEED=${SEED:-$(date +%s)}
BUILD_JOBS=${BUILD_JOBS:-0}
FLAGS=(-gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v -I"$HERE/../../src/kernels")  # sm90/ptx/ lives there
LIBS=(-L"$CUDA/lib64" -L"$CUDA/lib64/stubs" -lcuda -lcublas)
# id:source:kernel name (as in the mangled entry _ZN3v0<id>6<name>...):timeout multiplier
# 02 and 03 graduated to src/kernels/sm90/grouped_gemm.cuh (their code: git show 3d2daf0:dev/sm90/...).
ALL_VERSIONS=("01:01_tma_wgmma.cu:gemm01:1")
VERSIONS=()
for v in "${ALL_VERSIONS[@]}"; do
  [ -z "${ONLY_VERSIONS:-}" ] || [[ " $ONLY_VERSIONS " == *" ${v%%:*} "* ]] && VERSIONS+=("$v")
done
status=0
t0=$(date +%s)

echo "== dev/sm90 ladder at commit $COMMIT, seed $SEED; nvcc: $("$NVCC" --version | tail -1)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  2>/dev/null | sed 's/^/   gpu: /'

# ---- build
declare -A PID BUILT RC KSUM
build_one() { "$NVCC" "${FLAGS[@]}" -o "$BUILD/$1" "$HERE/$2" "${LIBS[@]}" >"$LOGS/build-$1.log" 2>&1; }
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn mult <<<"$v"
  if [ "$BUILD_JOBS" = 1 ]; then
    build_one "$id" "$src"
    echo $? >"$BUILD/$id.rc"
  else
    (build_one "$id" "$src"; echo $? >"$BUILD/$id.rc") &
    PID[$id]=$!
  fi
done
wait
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn mult <<<"$v"
  if [ "$(cat "$BUILD/$id.rc" 2>/dev/null)" = 0 ]; then BUILT[$id]=1; else BUILT[$id]=0; status=1; fi
  log="$LOGS/build-$id.log"
  if [ "${BUILT[$id]}" = 0 ]; then
    echo "!! build $id FAILED:"; tail -20 "$log"; continue
  fi
  nwarn=$(grep -ci "warning" "$log")
  [ "$nwarn" != 0 ] && { echo "!! build $id: $nwarn warning(s):"; grep -i -A2 "warning" "$log" | head -20; }
  # ptxas report of every GEMM kernel entry (one per template instantiation)
  pfx="_ZN3v0${id#0}6${fn}"
  ptx=$(awk -v p="'$pfx" '/Compiling entry function/{inf = index($0, p) > 0; split($0, a, "'"'"'"); name = a[2]}
      inf && /bytes stack frame/{sub(/^ +/, ""); sf = $0}
      inf && /Used [0-9]+ registers/{match($0, /Used [0-9]+ registers/); print name ": " substr($0, RSTART, RLENGTH) "; " sf; inf = 0}' "$log")
  echo "-- build $id: ptxas"
  echo "$ptx" | sed 's/^/   /'
  KSUM[$id]=$(echo "$ptx" | sed -E 's/^[^:]*: //' | sort | uniq -c | sed -E 's/^ +//; s/^1 //; s/^([0-9]+) /\1 x /' | paste -sd '|' -)
  if [ -n "$CUOBJDUMP" ]; then
    "$CUOBJDUMP" --dump-sass "$BUILD/$id" >"$LOGS/sass-$id.txt" 2>"$BUILD/$id.sass.err"
  fi
  if [ -n "$CUOBJDUMP" ] && grep -q "Function :" "$LOGS/sass-$id.txt" 2>/dev/null; then
    # per GEMM kernel function: HGMMA, local memory, MUFU, TMA stores
    counts=$(awk -v k="$pfx" '/Function :/{if (inf) print name, h+0, l+0, m+0, s+0; inf = index($0, k) > 0; name = $3; h = l = m = s = 0}
        inf && /HGMMA/{h++} inf && /[^A-Z](LDL|STL)[ .]/{l++} inf && /MUFU/{m++} inf && /UTMASTG/{s++}
        END{if (inf) print name, h+0, l+0, m+0, s+0}' "$LOGS/sass-$id.txt")
    alll=$(grep -cE "[^A-Z](LDL|STL)[ .]" "$LOGS/sass-$id.txt")
    if [ -z "$counts" ]; then echo "!! $id: no ${fn} function found in the SASS"; status=1; fi
    while read -r name hg loc mufu stg; do
      [ -n "$name" ] || continue
      echo "   SASS ${name}: HGMMA $hg, LDL/STL $loc, MUFU $mufu, UTMASTG $stg"
      [ "$hg" = 0 ] && { echo "!! $id: no HGMMA in ${name}: not the wgmma path"; status=1; }
      [ "$loc" != 0 ] && { echo "!! $id: local memory (LDL/STL) in ${name}"; status=1; }
    done <<<"$counts"
    echo "   whole binary: LDL/STL $alll"
    grep -m1 -o "HGMMA[.0-9A-Zx]*" "$LOGS/sass-$id.txt" | sed 's/^/   first: /'
    KSUM[$id]="${KSUM[$id]} | SASS (HGMMA LDL/STL MUFU UTMASTG per kernel): $(echo "$counts" | awk '{print $2, $3, $4, $5}' | paste -sd ',' -)"
  else
    KSUM[$id]="${KSUM[$id]} | SASS n/a"
    echo "   SASS not inspected (cuobjdump missing or failed: $(head -c 200 "$BUILD/$id.sass.err" 2>/dev/null))"
  fi
done
echo "   build+inspect: $(( $(date +%s) - t0 )) s"

# ---- run
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn mult <<<"$v"
  [ "${BUILT[$id]}" = 1 ] || { RC[$id]="not built"; continue; }
  echo
  lim=$(( PER_RUN_TIMEOUT * mult ))
  timeout -k 5 "$lim" "$BUILD/$id" --commit "$COMMIT" --seed "$SEED" --json "$LOGS/sm90-dev-$id.json" \
    >"$LOGS/run-$id.log" 2>&1
  rc=$?
  RC[$id]=$rc
  # everything but the final tables (printed again in the summary)
  awk '/^version /{skip = 1} /^== /{skip = 0} !skip' "$LOGS/run-$id.log"
  { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && echo "!! $id: killed after ${lim}s (hang the watchdog did not catch)"
  [ "$rc" != 0 ] && status=1
done

# ---- merge records into one "bench" record
if command -v python3 >/dev/null; then
  python3 - "$LOGS" "$OUTDIR" "$COMMIT" <<'EOF' || { echo "(json merge failed)"; status=1; }
import json, sys, os, glob
logs, out, commit = sys.argv[1], sys.argv[2], sys.argv[3]
recs = []
for p in sorted(glob.glob(os.path.join(logs, "sm90-dev-0*.json"))):
    try:
        recs.append(json.load(open(p)))
    except Exception as e:
        print("  bad record", p, e)
if recs:
    m = {k: recs[0][k] for k in ("kind", "date", "device", "ceilings")}
    m["commit"] = commit
    m["what"] = ("dev/sm90 ladder: bf16 grouped GEMM, contiguous layout, sm_90a "
                 "(03: GEMM1 with the gated activation fused, one record per activation)")
    m["ceilings_per_version"] = {r["version"]: r["ceilings"] for r in recs}
    m["kernels"] = {r["version"]: r["kernel"] for r in recs}
    m["rows"] = [row for r in recs for row in r["rows"]]
    m["passed"] = sum(r["passed"] for r in recs)
    m["failed"] = sum(r["failed"] for r in recs)
    json.dump(m, open(os.path.join(out, "sm90-dev.json"), "w"), indent=1)
    print("record:", os.path.join(out, "sm90-dev.json"))
EOF
fi

# ---- summary table (last)
{
echo
echo "== summary (commit $COMMIT, $(( $(date +%s) - t0 )) s)"
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn mult <<<"$v"
  echo "$id ${fn}: ${KSUM[$id]:-?} | exit ${RC[$id]:-?}"
done
hdr=0
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn mult <<<"$v"
  [ -f "$LOGS/run-$id.log" ] || continue
  if [ $hdr = 0 ]; then sed -n '/^version /p' "$LOGS/run-$id.log" | head -1; hdr=1; fi
  # rows of every table in the log (03 prints one per activation), without the headers
  awk '/^version /{t = 1; next} /^ceilings:/{t = 0} t && NF' "$LOGS/run-$id.log"
done
echo "(TFLOP/s over useful rows, GEMM flops only; floor = max(flops / cuBLAS 8192^3 rate, bytes / read rate);"
echo " x_floor = us / floor; %cuB8k = share of the cuBLAS 8192^3 rate; cuBdense = cuBLAS at the dense M_total x N x K shape)"
[ $status = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
} | tee "$LOGS/summary.txt"
tar -C "$BUILD" -czf "$OUTDIR/sm90-dev-logs.tar.gz" sm90-dev-logs && echo "logs: $OUTDIR/sm90-dev-logs.tar.gz"
rm -rf "$BUILD"
exit $status
