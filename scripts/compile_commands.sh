#!/usr/bin/env bash
# Writes compile_commands.json (for clangd, clang-tidy, editors) from the
# commands `make` would run for the release build, without building anything.
#   bash scripts/compile_commands.sh [MODE=asan ...]
set -eu
cd "$(dirname "$0")/.."
dir=$(pwd)
{
    echo "["
    first=1
    make -Bn "$@" all 2>/dev/null | grep -E '^(cc|gcc|clang)[^|]* -c [^ ]+\.c ' | while IFS= read -r cmd; do
        file=$(sed -E 's/.* -c ([^ ]+\.c) .*/\1/' <<<"$cmd")
        esc=$(sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' <<<"$cmd")
        [ $first = 1 ] || echo ","
        first=0
        printf '  {"directory": "%s", "file": "%s", "command": "%s"}' "$dir" "$file" "$esc"
    done
    echo
    echo "]"
} >compile_commands.json
echo "compile_commands.json: $(grep -c '"file"' compile_commands.json) files"
