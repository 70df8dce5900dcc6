#!/usr/bin/env bash
# The README's first command as a new user runs it: a fresh `git clone` of HEAD
# in a temporary folder (with the shared data beside it, as the README lays it
# out), no models/ folder, no build, then `bash scripts/demo.sh`. Passes when it
# exits 0, prints the model's description and generates text after the prompt.
# Only what is committed is cloned: commit before running this.
# Ends with "demo: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
shared="${WGLLM_SHARED:-$(cd .. && pwd)/shared}"
tmp=$(mktemp -d /tmp/wgllm-demo-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "demo: $*"; echo "demo: 0 passed, 1 failed"; exit 1; }
[ -d "$shared/vocab" ] || fail "no shared data at $shared"
git clone -q "$root" "$tmp/wgllm" || fail "git clone of $root failed"
ln -s "$shared" "$tmp/shared"
prompt="Once upon a time, in a small village by the sea,"
start=$(date +%s)
(cd "$tmp/wgllm" && env -u WGLLM_SHARED -u WGLLM_CPU bash scripts/demo.sh) >"$tmp/out" 2>"$tmp/err"
rc=$?
secs=$(( $(date +%s) - start ))
if [ $rc -ne 0 ]; then
    tail -20 "$tmp/err"
    fail "bash scripts/demo.sh exited $rc in a fresh clone"
fi
grep -q "architecture:" "$tmp/out" || { tail -5 "$tmp/out"; fail "no model description (wgllm info) in the output"; }
# the generated text follows the prompt on stdout; the speeds go to stderr
text=$(grep -F -A1000 "$prompt" "$tmp/out" | tr -d '\n')
[ "${#text}" -gt $(( ${#prompt} + 16 )) ] || { tail -5 "$tmp/out"; fail "no text generated after the prompt"; }
grep -Eq "generation: 64 tokens" "$tmp/err" || { tail -5 "$tmp/err"; fail "the run did not report 64 generated tokens"; }
echo "demo: fresh clone, build, synthetic model and 64 tokens in ${secs} s: $(grep -E 'generation:' "$tmp/err" | tail -1)"
echo "demo: 1 passed, 0 failed"
