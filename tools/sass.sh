#!/usr/bin/env bash
# SASS of one kernel source, here, without a GPU: nvcc -cubin for sm_90a (ptxas's resource
# report and its "Potential Performance Loss" advisories, e.g. C7511: serialized wgmma), then
# nvdisasm (pip, pinned in tools/sass-requirements.txt, into a venv under ~/.cache on first
# use: not .deps, which travels to the GPU machine). nvcc's PTX is not NVRTC's: the W8A8 GEMM 2
# serialized its wgmmas under NVRTC only (session 25), so the runtime's own builds are checked
# by the CPU test RuntimeCompileTarget.EveryKernel. Prints the resource
# line, the counts that matter for the sm90 kernels (HGMMA, QGMMA, local memory) and the
# opcode histogram; --full prints the whole listing.
#
#   bash tools/sass.sh src/kernels/sm90/fp8_gemm.cuh -DGEMM_STAGE=1 -DACT=0 -DACT_ALPHA=1.0f \
#        -DACT_LIMIT=7.0f -DSM90_FP8_SMEM_BYTES=205824
#
# The defines are the KernelSpec's (src/backends/*/kernel_specs.cpp, or the cache's .json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: tools/sass.sh KERNEL.cuh [-DNAME=VALUE ...] [--full]}
shift
full=false defs=()
for a in "$@"; do [ "$a" = --full ] && full=true || defs+=("$a"); done
venv=${XDG_CACHE_HOME:-$HOME/.cache}/moeforge-tools/sass-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q -r "$root/tools/sass-requirements.txt" >&2
fi
nvdisasm=$(find "$venv" -name nvdisasm -type f | head -1)
[ -n "$nvdisasm" ] || { echo "tools/sass.sh: nvdisasm not found in $venv" >&2; exit 1; }
chmod +x "$nvdisasm"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nvcc -arch=sm_90a -cubin -Xptxas -v -I "$root/src/kernels" "${defs[@]}" -o "$tmp/k.cubin" -x cu "$src" 2>&1 |
  grep -E 'registers|spill|Performance Loss|error' || true
"$nvdisasm" -c "$tmp/k.cubin" > "$tmp/k.sass"
ops=$(grep -oE '^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9_.]+' "$tmp/k.sass" | awk '{print $NF}')
echo "instructions $(wc -l <<<"$ops")  HGMMA $(grep -c '^HGMMA' <<<"$ops" || true)  QGMMA $(grep -c '^QGMMA' <<<"$ops" || true)" \
     " LDL/STL $(grep -cE '^(LDL|STL)' <<<"$ops" || true)"
sed -E 's/\..*//' <<<"$ops" | sort | uniq -c | sort -rn | head -25
if $full; then cat "$tmp/k.sass"; fi
