#!/usr/bin/env bash
# wgllm vs llama.cpp speed on a TinyLlama-1.1B-shaped synthetic model (q4_0, q8_0,
# f16, and Q4_K_M, Q5_K_M, Q6_K, IQ4_XS quantized from the f16 one): prompt 128
# tokens, 32 generated, 2 threads, median of 3.
# Usage: bash bench/run.sh [--peer-only]   (the models, ~4 GB, are made once into build/models)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d tools/peer/node_modules/node-llama-cpp ]; then
  (cd tools/peer && npm ci --omit=optional --no-audit --no-fund)
fi
if [ "${1:-}" != "--peer-only" ]; then
  make -j2
fi

mkdir -p build/models
args=()
for type in q4_0 q8_0 f16; do
  out="build/models/tinyllama-1.1b-${type}.gguf"
  if [ ! -s "$out" ]; then
    echo "bench: synthesizing $out" >&2
    build/release/wgllm synth --shape tinyllama-1.1b --type "$type" --seed 1 -o "$out.tmp"
    mv "$out.tmp" "$out"
  fi
  args+=("$type=$out")
done
# llama.cpp's mixed presets and IQ4_XS, made from the F16 file by `wgllm quantize`
# (whose tensor bytes equal llama-quantize's: tests/peer/quantize.test.mjs)
for preset in Q4_K_M Q5_K_M Q6_K IQ4_XS; do
  lower=$(echo "$preset" | tr 'A-Z' 'a-z')
  out="build/models/tinyllama-1.1b-${lower}.gguf"
  if [ ! -s "$out" ]; then
    echo "bench: quantizing $out" >&2
    build/release/wgllm quantize build/models/tinyllama-1.1b-f16.gguf "$out.tmp" "$preset"
    mv "$out.tmp" "$out"
  fi
  args+=("$lower=$out")
done

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus" >&2
exec node bench/peer_bench.mjs "$@" -p 128 -n 32 -r 3 -t 2 "${args[@]}"
