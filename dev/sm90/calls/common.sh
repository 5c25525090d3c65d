# Sourced by the call scripts here (after setting C, the commit): the shared preamble of one GPU
# call. Outputs go under /tmp/o (emptied first: a warm machine keeps the last call's /tmp) and
# travel back as $OUT/r.tgz, rewritten by T after each step, so a call cut by its time limit
# still returns what it finished.
O=$OUT; t0=$(date +%s); rm -rf /tmp/o; mkdir -p /tmp/o
el() { echo $(( $(date +%s) - t0 )); }  # seconds since the call began
T() { tar czf $O/r.tgz -C /tmp/o . 2>/dev/null; }
# A 0.5-minute `moeforge stress` of $C as step <name>, with the env assignments that follow.
st() {
  local n=$1; shift
  env "$@" OUT=/tmp/o/$n MOEFORGE_STRESS_MINUTES=0.5 bash tests/gpu/run_all.sh $C stress > /tmp/o/$n.log 2>&1
  echo "== $n ($*) at $(el)s: $(grep -E '^stress' /tmp/o/$n.log | head -1)"; grep -E "mismatch at" /tmp/o/$n.log | head -4; T
}
# The GPU tests of $C as step <name> (run_all.sh's tests stage), with the env assignments that
# follow (MOEFORGE_TEST_PASSES, filters, MOEFORGE_TEST_SECONDS); its record back at once.
tst() {
  local n=$1; shift
  env "$@" OUT=/tmp/o/$n bash tests/gpu/run_all.sh $C tests > /tmp/o/$n.log 2>&1
  echo "== $n at $(el)s: $(grep -E '^gpu tests' /tmp/o/$n.log | tail -1)"; grep -E "^\[  FAILED" /tmp/o/$n.log | head -5; T
}
# The sm90 bench of $C as `auto` runs it, both models (unless the env names others), with its
# resource report (BENCH_STAGES, default "bench,sass"), as step <name>, with the env assignments
# that follow (MOEFORGE_BENCH_WEIGHTS, _ACTIVATIONS, _TOKENS); the summary rows printed.
bench() {
  local n=$1; shift
  env MOEFORGE_BENCH_MODELS="mistral-small-4 deepseek-v3" "$@" OUT=/tmp/o/$n MOEFORGE_BENCH_BACKENDS=sm90 \
    bash tests/gpu/run_all.sh $C ${BENCH_STAGES:-bench,sass} > /tmp/o/$n.log 2>&1
  echo "== $n at $(el)s"; sed -n '/== summary/,$p' /tmp/o/$n.log | grep -E "^-- bench|^ +[0-9]+ |Q?GMMA" | cut -c1-160; T
}
# bench, Mistral-Small-4 only and no resource report: name, weights, activations, tokens, env...
small_bench() {
  local n=$1 w=$2 a=$3 tok=$4; shift 4
  BENCH_STAGES=bench bench $n MOEFORGE_BENCH_MODELS=mistral-small-4 MOEFORGE_BENCH_WEIGHTS=$w \
    MOEFORGE_BENCH_ACTIVATIONS=$a MOEFORGE_BENCH_TOKENS=$tok "$@"
}
# run_all.sh's profile stage of $C as step <name>: ncu's kernel table of one forward at each of
# TOKENS ("8 128 512"), the sm90 backend, in the given formats, with the env assignments that
# follow (MOEFORGE_PROFILE_CEILINGS, _SOURCE, _SECTIONS, ...); our kernels' and cuBLAS's lines printed.
prof() {  # name, tokens, weights, activations, env...
  local n=$1 tokens=$2 w=$3 a=$4; shift 4
  env OUT=/tmp/o/$n MOEFORGE_PROFILE_TOKENS="$tokens" MOEFORGE_PROFILE_BACKEND=sm90 \
    MOEFORGE_PROFILE_WEIGHTS=$w MOEFORGE_PROFILE_ACTIVATIONS=$a "$@" bash tests/gpu/run_all.sh $C profile > /tmp/o/$n.log 2>&1
  echo "== $n at $(el)s"; grep -E "^-- T=|moe_sm90|^   nvjet" /tmp/o/$n.log | cut -c1-170 | head -24; T
}
OUT=/tmp/o/build bash tests/gpu/run_all.sh $C build > /tmp/o/build.log 2>&1; tail -1 /tmp/o/build.log
