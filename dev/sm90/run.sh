#!/usr/bin/env bash
# dev/sm90/run.sh: build, inspect, check and time the sm90 ladder on an H200, one command:
#     bash dev/sm90/run.sh
# Steps: compile 01 and 02 in parallel for sm_90a (ptxas -v into build logs); print each
# GEMM kernel's registers / spills / stack; count HGMMA and LDL/STL in its SASS; run each
# version (correctness on 4 shapes, then timing next to cuBLAS); merge the JSON records into
# $OUT/sm90-dev.json; print the summary table last. Exit status: non-zero on any build
# failure, correctness failure, watchdog stall, missing HGMMA or local-memory use.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA/bin/nvcc")
CUOBJDUMP=$(command -v cuobjdump || { [ -x "$CUDA/bin/cuobjdump" ] && echo "$CUDA/bin/cuobjdump"; } || true)
OUTDIR=${OUT:-$HERE/out}
mkdir -p "$OUTDIR"
BUILD=$(mktemp -d /tmp/sm90-dev.XXXXXX)
COMMIT=$(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown)
PER_RUN_TIMEOUT=${PER_RUN_TIMEOUT:-55}
SEED=${SEED:-$(date +%s)}  # one seed for both versions: same segments, same data
FLAGS=(-gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Xptxas -v)
LIBS=(-L"$CUDA/lib64" -L"$CUDA/lib64/stubs" -lcuda -lcublas)
VERSIONS=("01:01_tma_wgmma.cu:gemm01" "02:02_ws_persistent.cu:gemm02")
status=0
t0=$(date +%s)

echo "== dev/sm90 ladder at commit $COMMIT, seed $SEED; nvcc: $("$NVCC" --version | tail -1)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
  2>/dev/null | sed 's/^/   gpu: /'

# ---- build (parallel)
declare -A PID
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn <<<"$v"
  ("$NVCC" "${FLAGS[@]}" -o "$BUILD/$id" "$HERE/$src" "${LIBS[@]}" >"$OUTDIR/build-$id.log" 2>&1) &
  PID[$id]=$!
done
declare -A BUILT REGS SPILL HG LOC
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn <<<"$v"
  if wait "${PID[$id]}"; then BUILT[$id]=1; else BUILT[$id]=0; status=1; fi
  log="$OUTDIR/build-$id.log"
  if [ "${BUILT[$id]}" = 0 ]; then
    echo "!! build $id FAILED:"; tail -20 "$log"; continue
  fi
  nwarn=$(grep -ci "warning" "$log")
  [ "$nwarn" != 0 ] && { echo "!! build $id: $nwarn warning(s):"; grep -i -A2 "warning" "$log" | head -20; }
  # ptxas report of the GEMM kernel (mangled name contains v0N + gemm0N)
  REGS[$id]=$(grep -A3 "entry function '_ZN3v0${id#0}6${fn}" "$log" | grep -o "Used [0-9]* registers" | head -1)
  SPILL[$id]=$(grep -A3 "entry function '_ZN3v0${id#0}6${fn}" "$log" | grep -o "[0-9]* bytes stack frame, [0-9]* bytes spill stores, [0-9]* bytes spill loads" | head -1)
  echo "-- build $id: ptxas ${fn}: ${REGS[$id]:-?}; ${SPILL[$id]:-?}"
  if [ -n "$CUOBJDUMP" ]; then
    "$CUOBJDUMP" --dump-sass "$BUILD/$id" >"$BUILD/$id.sass" 2>"$BUILD/$id.sass.err"
  fi
  if [ -n "$CUOBJDUMP" ] && grep -q "Function :" "$BUILD/$id.sass" 2>/dev/null; then
    # count inside the GEMM kernel's function only
    read -r hg loc <<<"$(awk -v k="$fn" '/Function :/{inf = index($0, k) > 0}
        inf && /HGMMA/{h++} inf && /[^A-Z](LDL|STL)[ .]/{l++} END{print h+0, l+0}' "$BUILD/$id.sass")"
    alll=$(grep -cE "[^A-Z](LDL|STL)[ .]" "$BUILD/$id.sass")
    HG[$id]=$hg; LOC[$id]=$loc
    echo "   SASS ${fn}: HGMMA $hg, LDL/STL $loc (whole binary: LDL/STL $alll)"
    grep -m1 -o "HGMMA[.0-9A-Zx]*" "$BUILD/$id.sass" | sed 's/^/   first: /'
    [ "$hg" = 0 ] && { echo "!! $id: no HGMMA in ${fn}: not the wgmma path"; status=1; }
    [ "$loc" != 0 ] && { echo "!! $id: local memory (LDL/STL) in ${fn}"; status=1; }
    cp "$BUILD/$id.sass" "$OUTDIR/sass-$id.txt" 2>/dev/null
  else
    HG[$id]="n/a"; LOC[$id]="n/a"
    echo "   SASS not inspected (cuobjdump missing or failed: $(head -c 200 "$BUILD/$id.sass.err" 2>/dev/null))"
  fi
done
echo "   build+inspect: $(( $(date +%s) - t0 )) s"

# ---- run
declare -A RC
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn <<<"$v"
  [ "${BUILT[$id]}" = 1 ] || { RC[$id]="not built"; continue; }
  echo
  timeout -k 5 "$PER_RUN_TIMEOUT" "$BUILD/$id" --commit "$COMMIT" --seed "$SEED" --json "$OUTDIR/sm90-dev-$id.json" \
    >"$OUTDIR/run-$id.log" 2>&1
  rc=$?
  RC[$id]=$rc
  # everything but the final table (printed again in the summary)
  sed '/^version /,$d' "$OUTDIR/run-$id.log"
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "!! $id: killed after ${PER_RUN_TIMEOUT}s (hang the watchdog did not catch)"
  [ "$rc" != 0 ] && status=1
done

# ---- merge records into one "bench" record
if command -v python3 >/dev/null; then
  python3 - "$OUTDIR" "$COMMIT" <<'EOF' || echo "(json merge failed)"
import json, sys, os, glob
out, commit = sys.argv[1], sys.argv[2]
recs = []
for p in sorted(glob.glob(os.path.join(out, "sm90-dev-0*.json"))):
    try:
        recs.append(json.load(open(p)))
    except Exception as e:
        print("  bad record", p, e)
if recs:
    m = {k: recs[0][k] for k in ("kind", "date", "device", "ceilings")}
    m["commit"] = commit
    m["what"] = "dev/sm90 ladder: bf16 grouped GEMM, contiguous layout, sm_90a"
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
echo
echo "== summary (commit $COMMIT, $(( $(date +%s) - t0 )) s)"
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn <<<"$v"
  echo "$id ${fn}: ${REGS[$id]:-?} | ${SPILL[$id]:-?} | SASS HGMMA ${HG[$id]:-?} LDL/STL ${LOC[$id]:-?} | exit ${RC[$id]:-?}"
done
hdr=0
for v in "${VERSIONS[@]}"; do
  IFS=: read -r id src fn <<<"$v"
  [ -f "$OUTDIR/run-$id.log" ] || continue
  if [ $hdr = 0 ]; then sed -n '/^version /p' "$OUTDIR/run-$id.log" | head -1; hdr=1; fi
  sed -n '/^version /,$p' "$OUTDIR/run-$id.log" | tail -n +2
done
echo "(TFLOP/s over useful rows; floor = max(flops / cuBLAS 8192^3 rate, bytes / read rate); x_floor = us / floor;"
echo " %cuB8k = share of the cuBLAS 8192^3 rate; cuBdense = cuBLAS at the dense M_total x N x K shape)"
[ $status = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL"
rm -rf "$BUILD"
exit $status
