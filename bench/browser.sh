#!/usr/bin/env bash
# Peak memory and speed of the browser package against the native binary on a
# TinyLlama-1.1B-shaped synthetic model (Q4_0): bench/browser.mjs loads it in
# the worker engine of a fresh headless Chromium per configuration (wasm CPU
# with 1 and 2 threads from a URL, 1 thread from OPFS; WebGPU over
# navigator.gpu with the weights streamed by range requests or from OPFS, and
# through the heap) and generates greedily, sampling the PSS/RSS of all the
# browser's processes every 100 ms; the native `wgllm run` (cpu and webgpu,
# under /usr/bin/time -v) runs the same prompt. One markdown table: model size,
# idle / load / peak memory, the wasm heap, load time, prefill and decode tok/s.
#
# The peer in the same browser: wllama (npm @wllama/wllama 3.13.0, llama.cpp
# in wasm; installed here into bench/wllama from its package-lock.json when a
# wllama row is to run, never by the test suite): wasm CPU with 1 and 2
# threads, and its WebGPU attempt (it reports what it actually ran on).
#
# Usage: bash bench/browser.sh [browser.mjs options: -n 16 --gpu-n 4
#        --gpu-timeout 300 --only native-cpu,native-webgpu,cpu1,cpu2,opfs,webgpu,webgpu-opfs,webgpu-heap,
#        wllama-cpu1,wllama-cpu2,wllama-webgpu --prompt TEXT --model FILE]
# Env:   WGLLM_BENCH_MODELS (where the model is made once, default build/models).
# Builds what is missing (make -j2, make wasm, the model). Without a GPU both
# WebGPU rows run on SwiftShader (Vulkan in software): slow, and a measure of
# the software rasteriser, not of a GPU. Slow (minutes): a benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${WGLLM_BENCH_MODELS:-build/models}
m="$MODELS/tinyllama-1.1b-q4_0.gguf"
[ -d web/node_modules/playwright-core ] || bash scripts/deps.sh test
[ -x build/release/wgllm ] || make -j2
[ -f web/dist/wgllm.js ] || make wasm
if [ ! -s "$m" ]; then
  mkdir -p "$MODELS"
  echo "browser bench: synthesizing $m" >&2
  build/release/wgllm synth --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$m.tmp" >&2
  mv "$m.tmp" "$m"
fi
# wllama only when a wllama row runs (all rows run without --only)
only=""
for ((i = 1; i <= $#; i++)); do [ "${!i}" = --only ] && { j=$((i + 1)); only=${!j}; }; done
if { [ -z "$only" ] || [[ "$only" == *wllama* ]]; } && [ ! -f bench/wllama/node_modules/@wllama/wllama/esm/index.js ]; then
  echo "browser bench: installing wllama into bench/wllama (npm ci)" >&2
  (cd bench/wllama && npm ci --no-audit --no-fund >&2)
fi
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
exec node bench/browser.mjs --model "$m" "$@"
