#!/usr/bin/env bash
# wgllm vs llama.cpp speed on a TinyLlama-1.1B-shaped synthetic model (q4_0, q8_0, bf16,
# f16, and Q4_K_M, Q5_K_M, Q6_K, IQ4_XS, Q2_K, Q3_K_M, IQ4_NL, Q4_1, Q5_0, Q5_1 quantized from
# the f16 one): prompt 128
# tokens, 32 generated, 2 threads, median of 3.
# Usage: bash bench/run.sh [--peer-only] [--native | --native-noamx] [--isa avx2] [--shapes] [--pp N] [--tg N]
#                          [--threads N] [--reps N] [TYPE...]   (the models, ~4 GB, are made once into
# build/models; TYPE: only those, e.g. q4_0 q8_0; --pp/--tg/--threads/--reps change the
# 128 / 32 / 2 / 3 of the default table, e.g. --pp 1024 --tg 1 for long prompts)
#   --shapes  instead of TinyLlama, the realistic shape of each other family in q4_0 (gemma3-1b,
#             gemma2-2b, phi3-mini, qwen3moe-16x2: ~7 GB made once), with each one's KV memory
#             from `wgllm info` (sliding-window layers keep only their window)
#   --native  also llama.cpp built for this CPU: llama-bench from node-llama-cpp's source with
#             -DGGML_NATIVE=ON (tools/llamacpp/build.sh --native, cached; 20+ minutes the first time)
#   --native-noamx  as --native, the peer built without AMX (tools/llamacpp/build.sh
#             --native-noamx): for AMX CPUs where llama.cpp's AMX path crashes
#   --isa avx2  an AVX2-only CPU on this one: wgllm with WGLLM_CPU=avx2 (its AVX2 kernels, no
#             AVX-512) and, as the native column, llama.cpp built with AVX2+FMA+F16C and no
#             AVX-512 (tools/llamacpp/build.sh --avx2, cached); the prebuilt column still runs
#             the variant node-llama-cpp picks for this CPU (its AVX-512 one on an AVX-512 CPU)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d tools/peer/node_modules/node-llama-cpp ]; then
  (cd tools/peer && npm ci --omit=optional --no-audit --no-fund)
fi
peer_only=0 native=0 isa=native shapes=0 only=() pp=128 tg=32 threads=2 reps=3
usage="usage: bench/run.sh [--peer-only] [--native | --native-noamx] [--isa avx2] [--shapes] [--pp N] [--tg N] [--threads N] [--reps N] [TYPE...]"
while [ $# -gt 0 ]; do
  case "$1" in
    --peer-only) peer_only=1 ;;
    --native) native=1 ;;
    --native-noamx) native=1 isa=native-noamx ;;
    --isa)
      [ "${2:-}" = avx2 ] || { echo "bench: --isa takes avx2 ($usage)" >&2; exit 2; }
      native=1 isa=avx2
      export WGLLM_CPU=avx2
      shift ;;
    --shapes) shapes=1 ;;
    --pp|--tg|--threads|--reps)
      [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "bench: $1 needs a positive number ($usage)" >&2; exit 2; }
      case "$1" in --pp) pp=$2 ;; --tg) tg=$2 ;; --threads) threads=$2 ;; --reps) reps=$2 ;; esac
      shift ;;
    -*) echo "bench: unknown option $1 ($usage)" >&2; exit 2 ;;
    *) only+=("$1") ;;
  esac
  shift
done
if [ $peer_only = 0 ]; then
  make -j2
fi
want() { [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $1 "* ]]; }

mkdir -p build/models
args=()
if [ $shapes = 1 ]; then
  for shape in gemma3-1b gemma2-2b phi3-mini qwen3moe-16x2; do
    want "$shape" || continue
    out="build/models/${shape}-q4_0.gguf"
    if [ ! -s "$out" ]; then
      echo "bench: synthesizing $out" >&2
      build/release/wgllm synth --shape "$shape" --type q4_0 --seed 1 -o "$out.tmp"
      mv "$out.tmp" "$out"
    fi
    # the context's memory at 4096 and 32768 tokens, and its KV cache with and without the
    # sliding windows (a windowed layer keeps only its window: wgllm info's "kv cache" line)
    for ctx in 4096 32768; do
      build/release/wgllm info -m "$out" --ctx $ctx 2>/dev/null | grep -E '^(memory|kv cache):' |
        sed "s/^/$shape at --ctx $ctx: /" >&2 || echo "$shape at --ctx $ctx: ?" >&2
    done
    args+=("$shape-q4_0=$out")
  done
  only=(none) # no TinyLlama rows
fi
need_f16=0 # the quantized presets below are made from the f16 file
for p in q4_k_m q5_k_m q6_k iq4_xs q2_k q3_k_m iq4_nl q4_1 q5_0 q5_1; do want $p && need_f16=1; done
for type in q4_0 q8_0 f16 bf16; do
  out="build/models/tinyllama-1.1b-${type}.gguf"
  want "$type" || { [ "$type" = f16 ] && [ $need_f16 = 1 ]; } || continue
  if [ ! -s "$out" ]; then
    echo "bench: synthesizing $out" >&2
    build/release/wgllm synth --shape tinyllama-1.1b --type "$type" --seed 1 -o "$out.tmp"
    mv "$out.tmp" "$out"
  fi
  want "$type" && args+=("$type=$out")
done
# llama.cpp's mixed presets, IQ4_XS and the other formats, made from the F16 file by `wgllm
# quantize` (whose files equal llama-quantize's: tests/peer/quantize.test.mjs)
for preset in Q4_K_M Q5_K_M Q6_K IQ4_XS Q2_K Q3_K_M IQ4_NL Q4_1 Q5_0 Q5_1; do
  lower=$(echo "$preset" | tr 'A-Z' 'a-z')
  want "$lower" || continue
  out="build/models/tinyllama-1.1b-${lower}.gguf"
  if [ ! -s "$out" ]; then
    echo "bench: quantizing $out" >&2
    build/release/wgllm quantize build/models/tinyllama-1.1b-f16.gguf "$out.tmp" "$preset"
    mv "$out.tmp" "$out"
  fi
  args+=("$lower=$out")
done

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus" >&2
[ ${#args[@]} -gt 0 ] || { echo "bench: no model among: ${only[*]}" >&2; exit 2; }
opts=()
[ $peer_only = 1 ] && opts+=(--peer-only)
[ $native = 1 ] && opts+=(--native "$(bash tools/llamacpp/build.sh --$isa llama-bench)")
[ $isa = avx2 ] && { opts+=(--isa avx2); echo "bench: AVX2 only: wgllm WGLLM_CPU=avx2, native llama.cpp without AVX-512" >&2; }
exec node bench/peer_bench.mjs "${opts[@]}" -p "$pp" -n "$tg" -r "$reps" -t "$threads" "${args[@]}"
