#!/usr/bin/env bash
# The whole test suite (README's second command). Builds wgllm twice -- release
# and AddressSanitizer+UndefinedBehaviorSanitizer -- runs every C test
# executable under the sanitizers, then the agreement tests against llama.cpp
# (tests/peer/run.sh: node-llama-cpp from npm on the same synthetic models).
# Ends with one line "total: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
bash scripts/deps.sh || { echo "total: 0 passed, 1 failed"; exit 1; }
export WGLLM_REQUIRE_WEBGPU="${WGLLM_REQUIRE_WEBGPU:-1}"  # deps.sh installed Dawn + SwiftShader
export WGLLM_SHARED="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
jobs=$(nproc 2>/dev/null || echo 2)

passed=0; failed=0
note_result() { # $1 = summary line "x: N passed, N failed"
    local p f
    p=$(sed -n 's/.* \([0-9][0-9]*\) passed.*/\1/p' <<<"$1")
    f=$(sed -n 's/.* \([0-9][0-9]*\) failed.*/\1/p' <<<"$1")
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
}

echo "== build (release + asan)"
if ! make -j"$jobs" >/tmp/wgllm-build.log 2>&1 || ! make -j"$jobs" MODE=asan >>/tmp/wgllm-build.log 2>&1; then
    tail -40 /tmp/wgllm-build.log
    echo "total: 0 passed, 1 failed"
    exit 1
fi

echo "== unit tests (ASan + UBSan)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for t in build/asan/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    out=$("$t" 2>/tmp/wgllm-"$name".err)
    rc=$?
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        cat /tmp/wgllm-"$name".err | tail -30
        [ -n "$line" ] || line="$name: 0 passed, 1 failed"
        [ $rc -ne 0 ] && ! grep -q ' [1-9][0-9]* failed' <<<"$line" && line="$name: 0 passed, 1 failed (exit $rc)"
    fi
    echo "$line"
    note_result "$line"
done

echo "== agreement with llama.cpp (node-llama-cpp)"
peer_out=$(bash tests/peer/run.sh 2>&1)
peer_rc=$?
echo "$peer_out" | grep -vE '^\s*$' | tail -60
p=$(grep -E '^# pass [0-9]+' <<<"$peer_out" | tail -1 | awk '{print $3}')
f=$(grep -E '^# fail [0-9]+' <<<"$peer_out" | tail -1 | awk '{print $3}')
if [ -z "$p" ]; then p=0; f=1; fi
[ $peer_rc -ne 0 ] && [ "${f:-0}" = 0 ] && f=1
note_result "peer: $p passed, ${f:-0} failed"

echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
