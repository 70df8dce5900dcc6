#!/usr/bin/env bash
# Builds llama.cpp tools from the source node-llama-cpp ships (its git bundle
# of the llama.cpp release its prebuilt binaries come from), cached.
#
#   bash tools/llamacpp/build.sh [--native | --native-noamx | --avx2] TARGET...
#
# Prints what it does on stderr and, on stdout, the folder that holds the
# built executables (bin=$(bash tools/llamacpp/build.sh llama-server)).
#   default   only llama-server: the server's sources (and mtmd's, which it
#             links) compiled at -O1 against node-llama-cpp's prebuilt
#             libllama / libggml* / libllama-common for linux-x64 (same
#             release, so the bundle's headers are theirs); the folder holds
#             copies of those libraries beside the executable.
#   --native  all of llama.cpp, Release, -DGGML_NATIVE=ON (this CPU's
#             instructions): any of its targets (llama-bench, llama-server, ...).
#   --native-noamx  --native without AMX (-mno-amx-*: ggml's AMX buffers off, its
#             AVX-512 and repacked kernels kept): on the AMX CPUs where llama.cpp's AMX
#             path crashes (v0.4.0 here: SIGSEGV in ggml_backend_amx_mul_mat, as in
#             llama.cpp issue 20824), the fastest llama.cpp that runs.
#   --avx2    the same with -DGGML_NATIVE=OFF and AVX2+FMA+F16C+BMI2, no
#             AVX-512: the peer an AVX2-only CPU (AMD Zen 1-3, Intel before
#             Ice Lake) would run, measured on this one (bench/run.sh --isa avx2).
# Cache: $WGLLM_LLAMACPP_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/wgllm/llamacpp,
# one folder per key (the bundle's SHA-256 and the configuration: the CMake
# options, and for the default flavor the CMake project and the prebuilt
# libraries), outside the work tree so that fresh clones on the same machine
# (CI) find it. A target is built once per key; a second run only checks.
# Jobs: $WGLLM_LLAMACPP_JOBS (default 2).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
nlc="$root/tools/peer/node_modules/node-llama-cpp"
bundle="$nlc/llama/gitRelease.bundle"
prebuilt="$root/tools/peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
say() { echo "llamacpp: $*" >&2; }
die() { echo "llamacpp: $*" >&2; exit 1; }

native=0 # 1: all of llama.cpp from source (flavor native or avx2)
flavor=prebuilt
targets=()
for a in "$@"; do
  case "$a" in
    --native) native=1 flavor=native ;;
    --native-noamx) native=1 flavor=native-noamx ;;
    --avx2) native=1 flavor=avx2 ;;
    -*) die "unknown option $a (usage: build.sh [--native | --native-noamx | --avx2] TARGET...)" ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || die "no target given (usage: build.sh [--native | --avx2] TARGET...)"
if [ $native = 0 ]; then
  for t in "${targets[@]}"; do
    [ "$t" = llama-server ] || die "'$t': without --native or --avx2 only llama-server is built (against the prebuilt libraries)"
  done
fi
[ -s "$bundle" ] || die "no $bundle: install tools/peer's npm packages (bash scripts/deps.sh test)"
command -v cmake >/dev/null || die "cmake is missing (bash scripts/deps.sh llamacpp)"
command -v c++ >/dev/null || die "a C++ compiler is missing (bash scripts/deps.sh llamacpp)"
tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$nlc/llama/llama.cpp.info.json")"
if [ $native = 0 ]; then
  [ -s "$prebuilt/libllama-common.so" ] || die "no prebuilt libraries in $prebuilt (node-llama-cpp's linux-x64 package)"
  release="$(sed -n 's/.*"release": *"\([^"]*\)".*/\1/p' "$prebuilt/_nlcBuildMetadata.json")"
  [ "$release" = "$tag" ] || die "the bundle is llama.cpp $tag but the prebuilt libraries are $release: their headers may differ"
fi

# the configure line of each flavor: what the key is made of, with the inputs below
common=(-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF) # never a download
if [ $native = 1 ]; then
  isa=(-DGGML_NATIVE=ON)
  # GCC keeps an explicit -mno-* over what -march=native (added later by ggml) implies
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  [ $flavor = native-noamx ] && isa=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx")
  [ $flavor = avx2 ] && isa=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF)
  config=(-DCMAKE_BUILD_TYPE=Release "${isa[@]}" -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF "${common[@]}")
  inputs=("$bundle")
else
  # -O1 without -g: the server's own code is not where the time goes (the prebuilt libraries compute)
  config=(-DCMAKE_BUILD_TYPE= -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 "${common[@]}")
  inputs=("$bundle" "$here/prebuilt/CMakeLists.txt" "$prebuilt"/*.so)
fi
key="$( { sha256sum "${inputs[@]}" | cut -d' ' -f1; echo "$flavor ${config[*]}"; } | sha256sum | cut -c1-16)"
cache="${WGLLM_LLAMACPP_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/wgllm/llamacpp}"
dir="$cache/$tag-$flavor-$key"
mkdir -p "$dir"
# one build per key at a time (two test files, or a bench beside the tests)
exec 9>"$dir/lock"
flock 9

bin="$dir/build/bin"
todo=()
for t in "${targets[@]}"; do
  if [ -f "$dir/built-$t" ] && [ -x "$bin/$t" ]; then say "$t: cached in $bin"; else todo+=("$t"); fi
done
if [ ${#todo[@]} -eq 0 ]; then echo "$bin"; exit 0; fi

t0=$(date +%s)
if [ ! -f "$dir/src/.cloned" ]; then
  say "cloning llama.cpp $tag from $bundle into $dir/src"
  rm -rf "$dir/src"
  git clone -q --no-checkout "$bundle" "$dir/src"
  git -C "$dir/src" -c advice.detachedHead=false checkout -q "$(git -C "$dir/src" rev-parse HEAD)"
  touch "$dir/src/.cloned"
fi
if [ ! -f "$dir/build/CMakeCache.txt" ]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ $native = 1 ]; then
    say "configuring all of llama.cpp: ${config[*]}"
    src=("$dir/src")
  else
    say "configuring llama-server against the prebuilt libraries of $prebuilt: ${config[*]}"
    src=("$here/prebuilt" -DLLAMA_SRC="$dir/src" -DPREBUILT="$prebuilt")
  fi
  cmake -S "${src[@]}" -B "$dir/build" "${gen[@]}" "${config[@]}" >"$dir/configure.log" 2>&1 ||
    { tail -20 "$dir/configure.log" >&2; die "cmake configure failed (log: $dir/configure.log)"; }
fi
jobs="${WGLLM_LLAMACPP_JOBS:-2}"
say "building ${todo[*]} with $jobs jobs (log: $dir/build.log)"
cmake --build "$dir/build" -j "$jobs" --target "${todo[@]}" >"$dir/build.log" 2>&1 ||
  { grep -E "error|Error" "$dir/build.log" | head -20 >&2; die "the build of ${todo[*]} failed (log: $dir/build.log)"; }
for t in "${todo[@]}"; do
  [ -x "$bin/$t" ] || die "$t was built but is not in $bin"
  touch "$dir/built-$t"
done
say "built ${todo[*]} in $(($(date +%s) - t0)) s"
echo "$bin"
