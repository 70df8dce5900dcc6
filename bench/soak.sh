#!/usr/bin/env bash
# Soak test of `wgllm serve` (not in the default suite): 32 concurrent
# streaming clients for 5 minutes with a quarter of the streams abandoned
# mid-way; prints errors, cancellations, RSS start/end/peak and p50/p99 time
# to first token. Arguments go to bench/soak.mjs (--minutes, --clients, ...).
# Usage: bash bench/soak.sh [--minutes 5] [--clients 32]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/release/wgllm ] || make -j2
exec node bench/soak.mjs "$@"
