#!/usr/bin/env bash
# tests/web/run.sh - the browser tests: installs what is missing (emscripten,
# chromium, playwright-core via scripts/deps.sh), builds the native tool (the
# reference) and the wasm package, then runs node --test tests/web/.
set -eu
cd "$(dirname "$0")/../.."
WGLLM_DEPS_WEB=1 bash scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" build/release/wgllm >/dev/null || [ -x build/release/wgllm ]  # a broken neighbour file need not stop us
make -j"$jobs" wasm >/dev/null  # two builds of the core (threaded, single-threaded): ~80 s on one core
make -j"$jobs" wasm-test  # the SIMD128 kernels against the scalar reference, under node
exec node --test --test-concurrency=1 tests/web/
