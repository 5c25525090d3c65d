#!/usr/bin/env bash
# Session 17, call 1: W8A8 two-partial test + A/B vs 863c620, bf16 A/B (wait.cuh), W8A8 crossover (wide vs decode).
C=${1:?commit}
O=$OUT; t0=$(date +%s); mkdir -p /tmp/o
el() { echo $(( $(date +%s) - t0 )); }
T() { tar czf $O/r.tgz -C /tmp/o . 2>/dev/null; }
export MOEFORGE_BASELINE_COMMIT=863c620
AB="MOEFORGE_BASELINE_SRC=$PWD/.ab/main"
OUT=/tmp/o/build bash tests/gpu/run_all.sh $C build 2>&1 | tail -2
echo "== build done at $(el)s"
OUT=/tmp/o/t1 MOEFORGE_TEST_PASSES="sm90-wide" MOEFORGE_GPU_FILTER_SM90='Sm90Layer.Fp8ActivationsW8A8:Sm90Layer.Deterministic:RuntimeGpuFault.*' \
  MOEFORGE_TEST_SECONDS=150 bash tests/gpu/run_all.sh $C tests > /tmp/o/t1.log 2>&1
grep -E "^== |FAILED|PASSED" /tmp/o/t1.log | tail -8
echo "== test done at $(el)s"; T
env $AB OUT=/tmp/o/ab8 MOEFORGE_BENCH_BACKENDS=sm90-wide MOEFORGE_BENCH_MODELS="mistral-small-4" \
  MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8 MOEFORGE_BENCH_TOKENS=2048,8192,36308 \
  bash tests/gpu/run_all.sh $C bench > /tmp/o/ab8.log 2>&1
echo "== ab w8a8 done at $(el)s"; T
env $AB OUT=/tmp/o/ab16 MOEFORGE_BENCH_BACKENDS=sm90 MOEFORGE_BENCH_WEIGHTS="bf16 fp8 nvfp4" MOEFORGE_BENCH_TOKENS=8,512,8192,36308 \
  bash tests/gpu/run_all.sh $C bench > /tmp/o/ab16.log 2>&1
echo "== ab bf16 done at $(el)s"; T
[ $(el) -lt 450 ] && OUT=/tmp/o/x MOEFORGE_BENCH_BACKENDS="sm90-wide sm90-decode" MOEFORGE_BENCH_MODELS="mistral-small-4" \
  MOEFORGE_BENCH_WEIGHTS=fp8 MOEFORGE_BENCH_ACTIVATIONS=fp8 MOEFORGE_BENCH_TOKENS=128,256,512,1024,2048,4096 \
  bash tests/gpu/run_all.sh $C bench > /tmp/o/x.log 2>&1
echo "== crossover done at $(el)s"; T
for bt in 128; do
  [ $(el) -lt 500 ] || break
  OUT=/tmp/o/bt$bt MOEFORGE_SM90_DECODE_BT=$bt MOEFORGE_BENCH_BACKENDS=sm90-decode MOEFORGE_BENCH_WEIGHTS=fp8 \
    MOEFORGE_BENCH_ACTIVATIONS=fp8 MOEFORGE_BENCH_TOKENS=1024,2048,4096 bash tests/gpu/run_all.sh $C bench > /tmp/o/bt$bt.log 2>&1
done
echo "== bt done at $(el)s"
for f in /tmp/o/ab8.log /tmp/o/ab16.log /tmp/o/x.log /tmp/o/bt64.log /tmp/o/bt128.log; do [ -f $f ] && sed -n '/== summary/,$p' $f | grep -vE "^== (bench|build|baseline)" ; done
T
