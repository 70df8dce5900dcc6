#!/usr/bin/env bash
# The WebGPU kernels on this machine's adapter, in one short run: the op-level
# tests (which print mat-vec / mat-mat timings), then `wgllm tune` on the
# TinyLlama-1.1B shape, whose best tunables go to the per-adapter cache that
# later `wgllm run/bench --backend webgpu` read. Run it before bench/webgpu.sh.
#
# Usage: bash bench/tune.sh [TYPE ...]          (default q4_0)
# Env:   WGLLM (default build/release/wgllm), WGLLM_BENCH_MODELS (default
#        build/models), WGLLM_BENCH_SHAPE (default tinyllama-1.1b),
#        WGLLM_TUNE_BUDGET seconds per model (default 120), WGLLM_TUNE_FULL=1
#        for the full sweep instead of --quick, WGLLM_TUNE_CACHE (the cache file).
set -euo pipefail
cd "$(dirname "$0")/.."

W=${WGLLM:-build/release/wgllm}
MODELS=${WGLLM_BENCH_MODELS:-build/models}
SHAPE=${WGLLM_BENCH_SHAPE:-tinyllama-1.1b}
BUDGET=${WGLLM_TUNE_BUDGET:-120}
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(q4_0)
if [ ! -x "$W" ]; then make -j"$(nproc)"; fi
T=$(dirname "$W")/tests/test_webgpu

"$W" devices
echo
if [ -x "$T" ]; then
  echo "== op tests ($T)"
  WGLLM_REQUIRE_WEBGPU=1 "$T" 2>&1 | grep -E 'timing|FAIL|failed|passed|adapter' || true
  echo
fi
mkdir -p "$MODELS"
for type in "${types[@]}"; do
  m="$MODELS/$SHAPE-$type.gguf"
  if [ ! -s "$m" ]; then
    echo "tune: synthesizing $m" >&2
    "$W" synth --shape "$SHAPE" --type "$type" --seed 1 -o "$m.tmp" >&2
    mv "$m.tmp" "$m"
  fi
  echo "== wgllm tune $m"
  quick=--quick
  [ "${WGLLM_TUNE_FULL:-0}" = 1 ] && quick=
  "$W" tune -m "$m" $quick --budget "$BUDGET"
done
