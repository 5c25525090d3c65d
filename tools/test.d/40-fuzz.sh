#!/usr/bin/env bash
# Fuzzing suite: libFuzzer targets over the host-side validation (tests/fuzz/):
#   fuzz_validate  validate_forward / validate_tensor, TensorView helpers (fake pointers
#                  into PROT_NONE memory: validation must never dereference caller data)
#   fuzz_spec      MoeSpec::validate/describe with arbitrary fields, presets, parse_*
#   fuzz_quant     QuantMatrix::validate + dequantize_rows, quantize round trips
#   fuzz_checkpoint  a safetensors file's bytes (io::parse_safetensors) and config.json
#                  (io::spec_from_config): what a checkpoint directory hands the loader
# Built with clang (libFuzzer needs it) and -fsanitize=fuzzer-no-link,address,undefined
# from only the library sources these touch (src/core validation/spec/tensor/dtype/errors,
# src/formats, src/io's safetensors and config readers): they are plain C++20 and compile
# with clang 14; the rest of the library is not needed. Each target starts from its committed
# seed corpus (tests/fuzz/corpus/<name>) and runs MOEFORGE_FUZZ_SECONDS (default 60) seconds;
# any crash, sanitizer report, leak or timeout fails the suite (the reproducer is left in the
# build directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MOEFORGE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${MOEFORGE_FUZZ_SECONDS:-60}
t_start=$(date +%s)

# clang 14 and its runtime (libFuzzer, sanitizers): Debian 12 packages, pinned.
pins=(clang-14=1:14.0.6-12 libclang-rt-14-dev=1:14.0.6-12)
missing=()
for p in "${pins[@]}"; do
  [ "$(dpkg-query -W -f='${Version}' "${p%%=*}" 2>/dev/null || true)" = "${p#*=}" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
CXX=clang++-14

mkdir -p "$build/obj"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=all -I"$root/include" -I"$root/src" -I"$root/tests/fuzz")
sources=(src/core/validate.cpp src/core/spec.cpp src/core/presets.cpp src/core/dtype.cpp src/core/errors.cpp
         src/core/tensor.cpp src/formats/block_scaled.cpp src/formats/float16.cpp src/formats/fp4.cpp
         src/formats/fp8.cpp src/formats/quant_matrix.cpp src/io/safetensors.cpp src/io/mapped_file.cpp
         src/io/hf_config.cpp)
targets=(fuzz_validate fuzz_spec fuzz_quant fuzz_checkpoint)
objs=()
for s in "${sources[@]}"; do
  o="$build/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$root/$s" -nt "$o" ] || [ "$0" -nt "$o" ]; then
    $CXX "${flags[@]}" -c "$root/$s" -o "$o" &
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  fi
  objs+=("$o")
done
wait
for t in "${targets[@]}"; do
  $CXX "${flags[@]}" -fsanitize=fuzzer "$root/tests/fuzz/$t.cpp" "${objs[@]}" -lfmt -o "$build/$t"
done
echo "fuzz: built in $(( $(date +%s) - t_start ))s"

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
failed=0
for t in "${targets[@]}"; do
  corpus="$build/corpus-$t"           # grows during the run; the committed seeds stay as they are
  mkdir -p "$corpus"
  log="$build/$t.log"
  if (cd "$build" && "./$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
        -print_final_stats=1 "$corpus" "$root/tests/fuzz/corpus/${t#fuzz_}" > "$log" 2>&1); then
    echo "fuzz: $t ok: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs in ${seconds}s"
  else
    failed=1
    echo "fuzz: $t FAILED (log $log):"
    grep -E "ERROR|runtime error|SUMMARY|threw|Test unit written|deadly signal" "$log" | head -20
    tail -n 30 "$log"
  fi
done
echo "fuzz: $([ $failed = 0 ] && echo passed || echo FAILED), $(( $(date +%s) - t_start ))s in all"
exit $failed
