#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/fuzz_*.c) on its seed corpus.
#   bash fuzz/run.sh                 each target for 20 s (what the default suite runs)
#   bash fuzz/run.sh 600             each target for 600 s
#   bash fuzz/run.sh -runs=10000000  each target for 10 million executions (the long run;
#                                    with the per-target flags of long_flags below)
#   bash fuzz/run.sh 20 fuzz_jinja   only the named targets
# New inputs that grow coverage go to build/fuzz/corpus/NAME (the seeds in
# fuzz/corpus/NAME stay as committed); a crash is saved as build/fuzz/crash-NAME-*.
# fuzz/NAME.dict, when there is one, is the target's libFuzzer dictionary.
# Runs one target per core at a time. Prints one line per target and "fuzz: N passed, N failed" at the end.
set -u
cd "$(dirname "$0")/.."
arg="${1:-20}"; shift || true
case "$arg" in -runs=*) limit="$arg" ;; *) limit="-max_total_time=$arg" ;; esac
# The long run's extra flags per target (fuzz/README.md says why each leaves
# nothing unchecked): fuzz_tokenize's inputs stop at 256 bytes, where its
# time is linear in the length (inputs of up to 8 MiB are tests/
# test_hostile_tokenize.c's).
long_flags() {
    case "$limit" in -runs=*) ;; *) return ;; esac
    case "$1" in
        fuzz_tokenize) echo "-max_len=256" ;;
    esac
}
command -v clang >/dev/null || { echo "fuzz: clang is missing (scripts/deps.sh test installs it)"; echo "fuzz: 0 passed, 1 failed"; exit 1; }
if ! make -j"$(nproc 2>/dev/null || echo 2)" fuzz >/tmp/wgllm-fuzz-build.log 2>&1; then
    tail -30 /tmp/wgllm-fuzz-build.log
    echo "fuzz: 0 passed, 1 failed"; exit 1
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for f in fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
export WGLLM_SHARED="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
# intercept_tls_get_addr=0: see tests/run.sh (the GCC 12 runtime's tracer crash)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:allocator_may_return_null=1:intercept_tls_get_addr=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# each target is one process on one core: as many at a time as there are cores
jobs=$(nproc 2>/dev/null || echo 2)
run_target() { # $1 = target: its log in build/fuzz/NAME.log, its exit status in build/fuzz/NAME.rc
    local t="$1" bin="build/fuzz/$1" work="build/fuzz/corpus/$1" seeds="" dict=""
    mkdir -p "$work"
    [ -d "fuzz/corpus/$t" ] && seeds="fuzz/corpus/$t"
    [ -f "fuzz/$t.dict" ] && dict="-dict=fuzz/$t.dict"
    # -rss_limit_mb / -malloc_limit_mb: a parser that allocates without bound is a finding
    "$bin" $limit $(long_flags "$t") $dict -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/crash-$t-" "$work" $seeds >"build/fuzz/$t.log" 2>&1
    echo $? >"build/fuzz/$t.rc"
}
running=0
for t in "${targets[@]}"; do
    rm -f "build/fuzz/$t.rc"
    run_target "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
passed=0; failed=0
for t in "${targets[@]}"; do
    log="build/fuzz/$t.log"
    rc=$(cat "build/fuzz/$t.rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        echo "fuzz $t: ok, ${execs:-?} executions"
        passed=$((passed + 1))
    else
        echo "fuzz $t: FAILED (exit $rc) after ${execs:-?} executions; log $log"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -8
        failed=$((failed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
