#!/usr/bin/env bash
# Installs what building and testing wgllm needs on Debian 12, only when it is
# missing: a C compiler and make (build), Node.js >= 20 and npm (the llama.cpp
# peer of the tests and benchmarks). Runs apt-get as root or through sudo.
set -u
missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v make >/dev/null || missing+=(make)
if ! command -v node >/dev/null || [ "$(node -e 'console.log(process.versions.node.split(".")[0])' 2>/dev/null || echo 0)" -lt 20 ]; then
    missing+=(nodejs)
fi
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null || {
    echo "wgllm: could not install ${missing[*]} with apt-get" >&2
    exit 1
}
