#!/usr/bin/env bash
# wgllm's main job in one command (README's first command): build, then
# generate text from MODEL.gguf -- or, when none is given, from a synthetic
# TinyLlama-1.1B-shaped Q4_0 model that wgllm writes itself (random weights,
# real LLaMA vocabulary, so the text is gibberish but the speed is real).
#   bash scripts/demo.sh [MODEL.gguf] [PROMPT]
set -eu
cd "$(dirname "$0")/.."
bash scripts/deps.sh build
make -j"$(nproc 2>/dev/null || echo 2)" build/release/wgllm >/dev/null
export WGLLM_SHARED="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
model="${1:-}"
prompt="${2:-Once upon a time, in a small village by the sea,}"
if [ -z "$model" ]; then
    model=models/tinyllama-1.1b-q4_0.gguf
    mkdir -p models
    [ -f "$model" ] || build/release/wgllm synth --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$model"
fi
build/release/wgllm info -m "$model"
echo
build/release/wgllm run -m "$model" -p "$prompt" -n 64 --temp 0.8 --seed 42 -t "$(nproc 2>/dev/null || echo 2)"
