#!/usr/bin/env bash
# Quick start, command 1: set up, build, and run the main job — one Mistral-Small-4
# MoE layer on 64 tokens, on the GPU when there is one (checked against the CPU
# reference), else on the CPU reference, which says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
exec "$root/build/moeforge" run --model mistral-small-4 --tokens 64 "$@"
