#!/usr/bin/env bash
# Session 18's prepared call (run on the GPU machine: `bash dev/sm90/calls/a8-decode-race.sh <commit>`,
# carry .deps): why the W8A8 QGMMA decode GEMMs give outputs that differ from the same batch run
# alone under `moeforge stress` (NOTES session 18). ~450 s. Results under $OUT/r.tgz, written as it goes.
C=${1:?commit}
O=$OUT; t0=$(date +%s); mkdir -p /tmp/o
el() { echo $(( $(date +%s) - t0 )); }
T() { tar czf $O/r.tgz -C /tmp/o . 2>/dev/null; }
OUT=/tmp/o/build bash tests/gpu/run_all.sh $C build > /tmp/o/build.log 2>&1; tail -1 /tmp/o/build.log
# 1. The test that should fail where stress did: outputs after other batches and on two streams,
#    every format; default planner, then each GEMM pair forced.
for pass in default sm90-wide sm90-decode; do
  OUT=/tmp/o/t-$pass MOEFORGE_TEST_PASSES=$pass MOEFORGE_GPU_FILTER='Sm90Layer.OutputsDependOnlyOnTheirInput' \
    MOEFORGE_GPU_FILTER_SM90='Sm90Layer.OutputsDependOnlyOnTheirInput' MOEFORGE_TEST_SECONDS=60 \
    bash tests/gpu/run_all.sh $C tests > /tmp/o/t-$pass.log 2>&1
  echo "== test $pass at $(el)s: $(grep -E '^gpu tests' /tmp/o/t-$pass.log | tail -1)"
  tar xzf /tmp/o/t-$pass/logs.tgz -O 2>/dev/null | grep -E "changed|round [0-9]|differ" | head -3
done; T
# 2. Stale data or a race: one thread, one stream (calls in sequence, batches in random order).
st() {  # name, env...
  local n=$1; shift
  env "$@" OUT=/tmp/o/$n MOEFORGE_STRESS_MINUTES=0.5 bash tests/gpu/run_all.sh $C stress > /tmp/o/$n.log 2>&1
  echo "== $n ($*) at $(el)s: $(grep -E '^stress' /tmp/o/$n.log | head -1)"; grep -E "mismatch at" /tmp/o/$n.log | head -4; T
}
st a8-serial MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_THREADS=1 MOEFORGE_STRESS_STREAMS=1 \
  MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8 --max-tokens 2048"
st a8-bt64 MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_SM90_DECODE_BT=64 MOEFORGE_STRESS_ARGS="--weights fp8 --activations fp8 --max-tokens 2048"
st w8-decode MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_ARGS="--weights fp8 --max-tokens 2048"
st w4-decode MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_STRESS_ARGS="--weights nvfp4 --max-tokens 2048"
# 3. compute-sanitizer (initcheck: reads of memory never written; racecheck / synccheck) on the test
#    with the decode GEMMs forced.
[ $(el) -lt 420 ] && OUT=/tmp/o/san MOEFORGE_SM90_CROSSOVER=1e9 MOEFORGE_TEST_BACKEND=sm90 \
  MOEFORGE_SANITIZER_FILTER='Sm90Layer.OutputsDependOnlyOnTheirInput' MOEFORGE_SANITIZER_TOOLS="initcheck racecheck" \
  MOEFORGE_SANITIZER_SECONDS=70 bash tests/gpu/run_all.sh $C sanitizer > /tmp/o/san.log 2>&1
grep -E "^sanitizer" /tmp/o/san.log; T
