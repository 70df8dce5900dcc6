#!/usr/bin/env bash
# The WebGPU backend against the CPU backend, side by side in one run, on
# TinyLlama-1.1B-shaped synthetic models (q4_0, q8_0, f16 by default): prompt
# processing and generation tok/s (`wgllm bench`, median of R runs), the
# adapter's name, and the GPU memory of the plan.
#
# Usage: bash bench/webgpu.sh [-t THREADS] [-p 128] [-n 32] [-r 3] [TYPE ...]
# Env:   WGLLM (the binary, default build/release/wgllm), WGLLM_BENCH_MODELS
#        (where the models are made once, default build/models),
#        WGLLM_BENCH_SHAPE (default tinyllama-1.1b).
# On a machine without a GPU, point Vulkan at SwiftShader first
# (VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json): the numbers
# then measure a software rasteriser, not a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

W=${WGLLM:-build/release/wgllm}
MODELS=${WGLLM_BENCH_MODELS:-build/models}
SHAPE=${WGLLM_BENCH_SHAPE:-tinyllama-1.1b}
threads=$(nproc) pp=128 tg=32 reps=3
types=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t) threads=$2; shift 2 ;;
    -p) pp=$2; shift 2 ;;
    -n) tg=$2; shift 2 ;;
    -r) reps=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) types+=("$1"); shift ;;
  esac
done
[ ${#types[@]} -gt 0 ] || types=(q4_0 q8_0 f16)
if [ ! -x "$W" ]; then make -j"$(nproc)"; fi

adapter=$("$W" devices 2>/dev/null | sed -n 's/^webgpu: //p' | head -1)
echo "adapter: ${adapter:-none}"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads"
echo "shape: $SHAPE, prompt $pp tokens, $tg generated, median of $reps"

# field FILE KEY: the median of "pp" or "tg" from `wgllm bench --json`
median() { sed -n "s/.*\"$2\": {[^}]*\"median\": \([0-9.]*\).*/\1/p" "$1"; }

mkdir -p "$MODELS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '\n| type | size MiB | CPU pp t/s | WebGPU pp t/s | CPU tg t/s | WebGPU tg t/s | tg ratio | GPU MiB |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for type in "${types[@]}"; do
  m="$MODELS/$SHAPE-$type.gguf"
  if [ ! -s "$m" ]; then
    echo "webgpu bench: synthesizing $m" >&2
    "$W" synth --shape "$SHAPE" --type "$type" --seed 1 -o "$m.tmp" >&2
    mv "$m.tmp" "$m"
  fi
  size=$(( $(stat -c %s "$m") / 1048576 ))
  "$W" bench -m "$m" --backend cpu -t "$threads" -p "$pp" -n "$tg" -r "$reps" --json >"$tmp/cpu" 2>"$tmp/cpu.err" ||
    { cat "$tmp/cpu.err" >&2; echo "| $type | $size | failed | | | | | |"; continue; }
  if ! "$W" bench -m "$m" --backend webgpu -t "$threads" -p "$pp" -n "$tg" -r "$reps" --json >"$tmp/gpu" 2>"$tmp/gpu.err"; then
    cat "$tmp/gpu.err" >&2
    echo "| $type | $size | $(median "$tmp/cpu" pp) | failed | $(median "$tmp/cpu" tg) | failed | | |"
    continue
  fi
  gmem=$(sed -n 's/.*GPU memory \([0-9.]*\) MiB.*/\1/p' "$tmp/gpu.err" | head -1)
  cpp=$(median "$tmp/cpu" pp) ctg=$(median "$tmp/cpu" tg) gpp=$(median "$tmp/gpu" pp) gtg=$(median "$tmp/gpu" tg)
  ratio=$(awk -v a="$gtg" -v b="$ctg" 'BEGIN { if (b > 0) printf "%.2fx", a / b }')
  echo "| $type | $size | $cpp | $gpp | $ctg | $gtg | $ratio | ${gmem:-?} |"
done
