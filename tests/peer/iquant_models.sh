#!/usr/bin/env bash
# The I-quant models of the tests, made by llama.cpp: wgllm cannot write most
# of these formats (their quantizers need an importance matrix), so llama.cpp's
# own llama_model_quantize (node-llama-cpp's libllama, tools/peer/llama_quantize.py)
# does, from tiny's f32 file: --pure (every matrix in the type; IQ2_S is the
# file type IQ2_M's, as llama.cpp's IQ2_S file type writes IQ2_XS) and an
# importance matrix of ones (those file types refuse to run without one).
# Into build/models/tiny-TYPE.gguf, once. Used by tests/peer/run.sh (the
# agreement matrix) and by tests/run.sh before the unit tests
# (test_webgpu_model's llama_iquants reads three of them).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ ! -d tools/peer/node_modules/node-llama-cpp ]; then
  echo "iquant models: installing node-llama-cpp (CPU build only)" >&2
  (cd tools/peer && npm ci --omit=optional --no-audit --no-fund)
fi
[ -x build/release/wgllm ] || make -j2
mkdir -p build/models
if [ ! -s build/models/tiny-f32.gguf ]; then
  build/release/wgllm synth --shape tiny --type f32 --seed 1 -o build/models/tiny-f32.gguf.tmp
  mv build/models/tiny-f32.gguf.tmp build/models/tiny-f32.gguf
fi
iq_jobs=()
for tf in iq3_s:26 iq3_xxs:23 iq2_s:29 iq2_xs:20 iq2_xxs:19 iq1_m:31 iq1_s:24; do
  out="build/models/tiny-${tf%%:*}.gguf"
  [ -s "$out" ] || iq_jobs+=("build/models/tiny-f32.gguf,$out.tmp,${tf##*:}/pure/ones")
done
if [ ${#iq_jobs[@]} -gt 0 ]; then
  echo "iquant models: quantizing with llama.cpp" >&2
  python3 tools/peer/llama_quantize.py tools/peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64 "${iq_jobs[@]}"
  for j in "${iq_jobs[@]}"; do t="${j#*,}"; t="${t%%,*}"; mv "$t" "${t%.tmp}"; done
fi
