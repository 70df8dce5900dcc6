#!/usr/bin/env bash
# The whole test suite (README's second command). Builds wgllm twice -- release
# and AddressSanitizer+UndefinedBehaviorSanitizer -- runs every C test
# executable under the sanitizers, the README's first command in a fresh clone
# of HEAD (tests/demo_test.sh), then the agreement tests against llama.cpp
# (tests/peer/run.sh: node-llama-cpp from npm on the same synthetic models, the
# server with the official openai client, chat templates with @huggingface/jinja)
# and the browser package in headless Chromium (tests/web/run.sh).
# Ends with one line "total: N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
bash scripts/deps.sh test || { echo "total: 0 passed, 1 failed"; exit 1; }
export WGLLM_REQUIRE_WEBGPU="${WGLLM_REQUIRE_WEBGPU:-1}"  # deps.sh installed Dawn + SwiftShader
export WGLLM_REQUIRE_PEER="${WGLLM_REQUIRE_PEER:-1}"      # ... and node-llama-cpp: a test that needs it fails without it
export WGLLM_SHARED="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
export WGLLM_TUNE_CACHE="${WGLLM_TUNE_CACHE:-off}"  # the defaults, not a `wgllm tune` cache of this machine's user
jobs=$(nproc 2>/dev/null || echo 2)

passed=0; failed=0
note_result() { # $1 = summary line "x: N passed, N failed"
    local p f
    p=$(sed -n 's/.* \([0-9][0-9]*\) passed.*/\1/p' <<<"$1")
    f=$(sed -n 's/.* \([0-9][0-9]*\) failed.*/\1/p' <<<"$1")
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
}

echo "== build (release + asan) [at ${SECONDS} s]"
if ! make -j"$jobs" >/tmp/wgllm-build.log 2>&1 || ! make -j"$jobs" MODE=asan >>/tmp/wgllm-build.log 2>&1; then
    tail -40 /tmp/wgllm-build.log
    echo "total: 0 passed, 1 failed"
    exit 1
fi

# the I-quant models llama.cpp makes (test_webgpu_model reads them; node-llama-cpp is
# installed by now: scripts/deps.sh test)
if ! bash tests/peer/iquant_models.sh >/tmp/wgllm-iquant-models.log 2>&1; then
    tail -20 /tmp/wgllm-iquant-models.log
    echo "iquant models: failed (test_webgpu_model's llama_iquants will say so)"
fi

echo "== unit tests (ASan + UBSan), $jobs at a time [at ${SECONDS} s]"
# intercept_tls_get_addr=0: up to GCC 13 the runtime's __tls_get_addr hook takes
# a dlopen'd library's TLS block that happens to start 16 bytes into a page for
# a pre-2.25 glibc header and reads the two words before it as a block to scan;
# LeakSanitizer's tracer then dies at exit ("Tracer caught signal 11") in the
# tests that load Dawn. Our own TLS is static and still scanned (use_tls).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# The tests are independent processes (temporary files carry the pid): one per
# core, so the phase takes about its longest tests' time, not their sum.
run_unit() { # $1 = test binary: its output, stderr, exit status and seconds in /tmp/wgllm-NAME.*
    local name t0=$SECONDS
    name=$(basename "$1")
    "$1" >/tmp/wgllm-"$name".out 2>/tmp/wgllm-"$name".err
    echo $? >/tmp/wgllm-"$name".rc
    echo $((SECONDS - t0)) >/tmp/wgllm-"$name".sec
}
# Longest first (their seconds under ASan on 2 cores, 2026-12), the rest after in
# name order: two cores then finish together instead of one running the last
# long program alone.
slow_first="test_webgpu_model test_webgpu test_engine_webgpu test_webgpu_fused test_webgpu_moe test_model
            test_web_faults test_kv_window test_hostile_tokenize test_tools test_repack test_engine"
units=()
for name in $slow_first; do [ -x build/asan/tests/$name ] && units+=("build/asan/tests/$name"); done
for t in build/asan/tests/test_*; do
    [ -x "$t" ] && [[ " $(echo $slow_first) " != *" $(basename "$t") "* ]] && units+=("$t")
done
running=0
for t in "${units[@]}"; do
    run_unit "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
for t in "${units[@]}"; do
    name=$(basename "$t")
    out=$(cat /tmp/wgllm-"$name".out)
    rc=$(cat /tmp/wgllm-"$name".rc)
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        cat /tmp/wgllm-"$name".err | tail -30
        [ -n "$line" ] || line="$name: 0 passed, 1 failed"
        [ $rc -ne 0 ] && ! grep -q ' [1-9][0-9]* failed' <<<"$line" && line="$name: 0 passed, 1 failed (exit $rc)"
    fi
    echo "$line ($(cat /tmp/wgllm-"$name".sec) s)"
    note_result "$line"
done

echo "== threaded tests (ThreadSanitizer) [at ${SECONDS} s]"
# the thread pool, the engine's scheduler thread and the stepped engine; a race
# report fails the test (TSan's exit code 66 at exit, halt_on_error for the first)
TSAN_TESTS="test_threadpool test_engine_step test_engine"
# cases of test_engine that add compute but no threading of their own (MoE and grammar
# decoding, one layer's shift math at three kernel levels): under ASan only
TSAN_SKIP_test_engine="moe_batching_equals_alone,lazy_grammar_waits_for_its_trigger,grammar_constrains_the_text,seq_shift_equals_fresh_evaluation_one_layer"
if make -j"$jobs" MODE=tsan $(printf 'build/tsan/tests/%s ' $TSAN_TESTS) >>/tmp/wgllm-build.log 2>&1; then
    for name in $TSAN_TESTS; do
        skip_var="TSAN_SKIP_$name"
        out=$(WGLLM_TEST_SKIP="${!skip_var:-}" TSAN_OPTIONS="halt_on_error=1:exitcode=66" build/tsan/tests/$name 2>/tmp/wgllm-tsan-$name.err)
        rc=$?
        line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
        if [ $rc -ne 0 ] || [ -z "$line" ]; then
            grep -A30 -m1 "WARNING: ThreadSanitizer" /tmp/wgllm-tsan-$name.err || tail -30 /tmp/wgllm-tsan-$name.err
            line="$name (tsan): 0 passed, 1 failed (exit $rc)"
        fi
        echo "${line/$name:/$name (tsan):}"
        note_result "$line"
    done
else
    tail -20 /tmp/wgllm-build.log
    note_result "tsan build: 0 passed, 1 failed"
fi

# scripts that end with one line "x: N passed, N failed"
script_suite() { # $1 = title, $2... = command
    echo "== $1 [at ${SECONDS} s]"
    shift
    local out line
    out=$("$@" 2>&1)
    local rc=$?
    echo "$out" | tail -15
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
    [ -n "$line" ] || line="x: 0 passed, 1 failed"
    [ $rc -ne 0 ] && ! grep -q ' [1-9][0-9]* failed' <<<"$line" && line="x: 0 passed, 1 failed"
    note_result "$line"
}
script_suite "fuzz targets, 4 s each (fuzz/run.sh; the long run is documented in fuzz/README.md)" bash fuzz/run.sh 4
script_suite "README's first command in a fresh clone of HEAD (tests/demo_test.sh)" bash tests/demo_test.sh

# node --test suites: their closing lines "# pass N" / "# fail N"
node_suite() { # $1 = title, $2 = script
    echo "== $1 [at ${SECONDS} s]"
    local out rc p f
    out=$(bash "$2" 2>&1)
    rc=$?
    echo "$out" | grep -vE '^\s*$' | tail -60
    # failures can sit far above the tail: show each with its details
    echo "$out" | grep -A25 -E '^(\s*)not ok ' | head -200
    p=$(grep -E '^# pass [0-9]+' <<<"$out" | tail -1 | awk '{print $3}')
    f=$(grep -E '^# fail [0-9]+' <<<"$out" | tail -1 | awk '{print $3}')
    if [ -z "$p" ]; then p=0; f=1; fi
    [ $rc -ne 0 ] && [ "${f:-0}" = 0 ] && f=1
    note_result "$1: $p passed, ${f:-0} failed"
}
node_suite "agreement with llama.cpp, server, chat templates (tests/peer)" tests/peer/run.sh
node_suite "the browser package in headless Chromium (tests/web)" tests/web/run.sh

echo "suite time: ${SECONDS} s"
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
