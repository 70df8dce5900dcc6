#!/usr/bin/env bash
# Cross check of the arm64 build on an x86-64 host: builds build/arm64 with
# aarch64-linux-gnu-gcc and runs test_quant, test_fp4tq, test_iquants, test_repack, test_model and
# test_runtime under qemu-aarch64, twice:
#   -cpu max         (has SDOT: the vdotq_s32 kernels of quant_neon.c)
#   -cpu cortex-a53  (NEON without SDOT: the vmull/vpadal kernels)
# plus test_quant on the A53 with WGLLM_CPU=scalar (the dispatch off switch).
# Installs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (or
# qemu-user-static) with apt-get when they are missing.
#
# Not part of the default suite (tests/run.sh); run it by hand:
#   bash tests/cross_arm64.sh
# Prints each test's closing line; exits non-zero when anything fails.
#
# WGLLM_CPU is always set here: without binfmt_misc a test's re-exec of
# itself (test_quant, test_repack do that to try lower levels) cannot start
# an arm64 binary, so each level is run explicitly instead. "dotprod" caps
# nothing (every level on), "neon" turns SDOT off, "scalar" all SIMD.
set -u
cd "$(dirname "$0")/.."
export WGLLM_SHARED="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
export QEMU_LD_PREFIX="${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}"
CC_ARM=aarch64-linux-gnu-gcc
OUT=build/arm64
TESTS="test_quant test_fp4tq test_iquants test_repack test_model test_runtime"

if ! command -v "$CC_ARM" >/dev/null || [ ! -d /usr/aarch64-linux-gnu/lib ]; then
    echo "== installing the arm64 cross compiler"
    apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/tmp/wgllm-cross-apt.log 2>&1 ||
        { tail -20 /tmp/wgllm-cross-apt.log; echo "cross_arm64: cannot install the cross compiler"; exit 1; }
fi
QEMU=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if [ -z "$QEMU" ]; then
    echo "== installing qemu-user"
    apt-get install -y qemu-user >/tmp/wgllm-cross-apt.log 2>&1 ||
        apt-get install -y qemu-user-static >>/tmp/wgllm-cross-apt.log 2>&1
    QEMU=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
    [ -n "$QEMU" ] || { tail -20 /tmp/wgllm-cross-apt.log; echo "cross_arm64: cannot install qemu"; exit 1; }
fi

echo "== build ($OUT)"
# Only what runs here: the other test programs are not needed (and GCC 12's
# cross compiler has crashed on one of them), nor is the wgllm program, whose
# endpoint client links libcurl (arm64 headers and library are not installed).
targets="$OUT/libwgllm.a"
for t in $TESTS; do targets="$targets $OUT/tests/$t"; done
# shellcheck disable=SC2086
if ! make -j"$(nproc 2>/dev/null || echo 2)" CC="$CC_ARM" OUT="$OUT" $targets >/tmp/wgllm-cross-build.log 2>&1; then
    tail -40 /tmp/wgllm-cross-build.log
    echo "cross_arm64: build failed"
    exit 1
fi

failed=0
run_one() { # $1 = qemu cpu, $2 = WGLLM_CPU, $3 = test
    local out rc line
    out=$(WGLLM_CPU="$2" "$QEMU" -cpu "$1" "$OUT/tests/$3" 2>/tmp/wgllm-cross-"$3".err)
    rc=$?
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
    printf '%-11s %-8s %s\n' "$1" "$2" "${line:-$3: no summary line}"
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        tail -20 /tmp/wgllm-cross-"$3".err
        echo "   ($3 exited $rc)"
        failed=$((failed + 1))
    fi
}

echo "== tests under $QEMU"
for t in $TESTS; do run_one max dotprod "$t"; done
for t in $TESTS; do run_one cortex-a53 neon "$t"; done
run_one cortex-a53 scalar test_quant

if [ $failed -ne 0 ]; then
    echo "cross_arm64: $failed run(s) failed"
    exit 1
fi
echo "cross_arm64: all runs passed"
