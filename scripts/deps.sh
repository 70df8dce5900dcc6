#!/usr/bin/env bash
# Installs what building and testing wgllm needs on Debian 12, only when it is
# missing: a C compiler and make (build), libmicrohttpd, cJSON and libcurl (the server and client),
# Node.js >= 20 and npm (the llama.cpp peer of the tests and benchmarks). Runs
# apt-get as root or through sudo.
set -u
missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v make >/dev/null || missing+=(make)
if ! command -v node >/dev/null || [ "$(node -e 'console.log(process.versions.node.split(".")[0])' 2>/dev/null || echo 0)" -lt 20 ]; then
    missing+=(nodejs)
fi
command -v npm >/dev/null || missing+=(npm)
# `wgllm serve` (native only): HTTP and JSON libraries
[ -f /usr/include/microhttpd.h ] || missing+=(libmicrohttpd-dev)
[ -f /usr/include/cjson/cJSON.h ] || missing+=(libcjson-dev)
# endpoints in the client (gateways, providers): libcurl
[ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -f /usr/include/curl/curl.h ] || \
    [ -n "$(find /usr/include -maxdepth 2 -path '*curl/curl.h' -print -quit 2>/dev/null)" ] || missing+=(libcurl4-openssl-dev)
# WebGPU tests without a GPU: SwiftShader's Vulkan ICD (from Chromium) and the Vulkan loader
[ -f /usr/lib/chromium/vk_swiftshader_icd.json ] || missing+=(chromium-common)
ls /usr/lib/*/libvulkan.so.1 >/dev/null 2>&1 || missing+=(libvulkan1)
# browser package (`make wasm`, tests/web), only with WGLLM_DEPS_WEB=1: emscripten
# (Debian's 3.1.6) and Chromium for the headless browser tests
if [ "${WGLLM_DEPS_WEB:-0}" = 1 ]; then
    command -v emcc >/dev/null || missing+=(emscripten)
    [ -x /usr/bin/chromium ] || missing+=(chromium)
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
# Dawn (webgpu.h C library, dlopen'ed by the WebGPU backend), pinned in tools/dawn
dawn_dir="$(cd "$(dirname "$0")/.." && pwd)/tools/dawn"
if [ ! -d "$dawn_dir/node_modules" ]; then
    echo "installing: Dawn (npm bun-webgpu-linux-x64) into tools/dawn"
    (cd "$dawn_dir" && npm ci --no-audit --no-fund >/dev/null) || {
        echo "wgllm: could not install Dawn with npm in $dawn_dir" >&2
        exit 1
    }
fi
# playwright-core (pinned in web/package.json) drives /usr/bin/chromium; it never downloads a browser
if [ "${WGLLM_DEPS_WEB:-0}" = 1 ]; then
    web_dir="$(cd "$(dirname "$0")/.." && pwd)/web"
    if [ ! -d "$web_dir/node_modules/playwright-core" ]; then
        echo "installing: playwright-core (npm) into web/node_modules"
        (cd "$web_dir" && npm ci --no-audit --no-fund >/dev/null) || {
            echo "wgllm: could not install playwright-core with npm in $web_dir" >&2
            exit 1
        }
    fi
fi
exit 0
