#!/usr/bin/env bash
# Installs, on Debian 12, only what is missing:
#   bash scripts/deps.sh build   a C compiler, make, and the native-only libraries of
#                                the wgllm command (libmicrohttpd, cJSON, libcurl)
#   bash scripts/deps.sh test    the above, plus what the tests run against: Node.js >= 20
#                                and npm (llama.cpp's npm package, the openai client),
#                                Dawn (npm, tools/dawn) with SwiftShader's Vulkan ICD from
#                                chromium-common and libvulkan1 (WebGPU without a GPU), and
#                                emscripten + Chromium + playwright-core (the browser tests),
#                                and CMake + g++ (llama-server built from node-llama-cpp's
#                                llama.cpp source for the gateway tests: tools/llamacpp/build.sh)
# apt-get runs as root or through sudo. WGLLM_DEPS_WEB=1 is the same as `test`.
set -u
mode="${1:-build}"
[ "${WGLLM_DEPS_WEB:-0}" = 1 ] && mode=test
case "$mode" in build|test) ;; *) echo "usage: scripts/deps.sh [build|test]" >&2; exit 2 ;; esac
root="$(cd "$(dirname "$0")/.." && pwd)"

missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v make >/dev/null || missing+=(make)
# `wgllm serve` and the client's remote endpoints (native only)
[ -f /usr/include/microhttpd.h ] || missing+=(libmicrohttpd-dev)
[ -f /usr/include/cjson/cJSON.h ] || missing+=(libcjson-dev)
[ -n "$(find /usr/include -maxdepth 3 -path '*curl/curl.h' -print -quit 2>/dev/null)" ] || missing+=(libcurl4-openssl-dev)
if [ "$mode" = test ]; then
    if ! command -v node >/dev/null || [ "$(node -e 'console.log(process.versions.node.split(".")[0])' 2>/dev/null || echo 0)" -lt 20 ]; then
        missing+=(nodejs)
    fi
    command -v npm >/dev/null || missing+=(npm)
    [ -f /usr/lib/chromium/vk_swiftshader_icd.json ] || missing+=(chromium-common)
    ls /usr/lib/*/libvulkan.so.1 >/dev/null 2>&1 || missing+=(libvulkan1)
    command -v emcc >/dev/null || missing+=(emscripten)
    # tools/llamacpp/build.sh (llama-server for tests/peer/llamacpp.test.mjs, llama-bench for bench/run.sh)
    command -v cmake >/dev/null || missing+=(cmake)
    command -v g++ >/dev/null || missing+=(g++)
    command -v git >/dev/null || missing+=(git)
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    # the fuzz targets (fuzz/run.sh): clang with libFuzzer and the sanitizers' runtime
    command -v clang >/dev/null || missing+=(clang)
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
        || [ "$(uname -m)" != x86_64 ] || missing+=(libclang-rt-14-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null || {
        echo "wgllm: could not install ${missing[*]} with apt-get" >&2
        exit 1
    }
fi
[ "$mode" = test ] || exit 0

# npm packages, each pinned with its package-lock.json
npm_ci() { # $1 = folder, $2 = a package that shows it is installed
    [ -d "$root/$1/node_modules/$2" ] && return 0
    echo "installing: npm packages of $1"
    (cd "$root/$1" && npm ci --omit=optional --no-audit --no-fund >/dev/null) || {
        echo "wgllm: npm ci failed in $1" >&2
        exit 1
    }
}
npm_ci tools/peer node-llama-cpp
npm_ci tools/peer openai
npm_ci tools/peer @anthropic-ai/sdk
npm_ci tools/dawn bun-webgpu-linux-x64
npm_ci web playwright-core
npm_ci web @yowasp/clang # the relaxed-SIMD kernel module of the wasm build (web/relaxed.mjs)
exit 0
