#!/usr/bin/env bash
# Agreement tests against llama.cpp (node-llama-cpp, CPU build): tokenizer ids,
# teacher-forced distributions, greedy generation, damaged-file handling.
# Usage: bash tests/peer/run.sh   (from anywhere; ~5 minutes on 2 cores, +2 the first time: llama-server)
# Extra arguments go to `node --test` (e.g. --test-name-pattern=tiny-f32).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ ! -d tools/peer/node_modules/node-llama-cpp ] || [ ! -d tools/peer/node_modules/openai ] || [ ! -d tools/peer/node_modules/zod ] ||
   [ ! -d tools/peer/node_modules/ajv ]; then
  echo "peer: installing node-llama-cpp (CPU build only)" >&2
  (cd tools/peer && npm ci --omit=optional --no-audit --no-fund)
fi
if [ ! -x build/release/wgllm ]; then
  echo "peer: building wgllm" >&2
  make -j2
fi
if [ ! -x build/asan/wgllm ]; then # hardening.test.mjs stops a server under ASan
  echo "peer: building the ASan wgllm" >&2
  make -j2 MODE=asan build/asan/wgllm
fi

mkdir -p build/models
models=()
for type in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs; do
  models+=("tiny $type")
done
for shape in tiny-ropefreqs tiny-ropescale tiny-phi3-longrope tiny-phi3-longctx; do
  for type in f32 q8_0; do models+=("$shape $type"); done
done
models+=("tiny-yarn f32" "tiny-mistral3 f32")
models+=("tiny mxfp4" "tiny nvfp4" "tiny tq2_0" "tiny tq1_0" "tiny q1_0") # the new formats: the llama shape only
models+=("tiny-qwen3moe f32" "tiny-qwen3moe q8_0" "tiny-mixtral f32" "tiny-olmoe f32" "tiny-qwen2moe f32"
         "tiny-granitemoe f32" "tiny-gptoss f32" "tiny-gptoss q8_0" "tiny-gptoss mxfp4")
# the qwen2, qwen3, gemma, phi3, granite, olmo2 and smollm3 shapes in the types agreement.test.mjs checks them in (SHAPE_TYPES)
for shape in tiny-qwen2 tiny-qwen3 tiny-gemma3 tiny-gemma2 tiny-phi3 tiny-granite tiny-olmo2 tiny-smollm3; do
  for type in f32 f16 q8_0 q4_0 q4_k; do models+=("$shape $type"); done
done
# the bert encoders bert.test.mjs compares (embeddings)
for type in f32 f16 q8_0 q4_0; do models+=("tiny-bert $type"); done
for type in f16 q8_0; do models+=("bge-small $type"); done
for type in f32 q8_0; do models+=("tiny-nomic-bert $type"); done
for m in "${models[@]}"; do
  read -r shape type <<<"$m"
  {
    out="build/models/${shape}-${type}.gguf"
    if [ ! -s "$out" ]; then
      echo "peer: synthesizing $out" >&2
      build/release/wgllm synth --shape "$shape" --type "$type" --seed 1 -o "$out.tmp"
      mv "$out.tmp" "$out"
    fi
  }
done

# the I-quant models, made by llama.cpp (tiny-f32 above comes first)
bash tests/peer/iquant_models.sh

# llama.cpp's own server, for tests/peer/llamacpp.test.mjs (the gateway in front of it):
# compiled once from node-llama-cpp's source against its prebuilt libraries, then cached
# (about 2 CPU-minutes; tools/llamacpp/build.sh says where)
bash tools/llamacpp/build.sh llama-server >/dev/null

# one test file per core at a time: most of a file's time is one process (node with
# llama.cpp, or one wgllm) on one core, so two files keep a 2-core machine busy (the
# files share nothing: temporary folders, servers on ports the system picks)
exec node --test --test-concurrency="$(nproc 2>/dev/null || echo 2)" "$@" tests/peer/
