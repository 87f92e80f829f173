#!/usr/bin/env bash
# Upstream's random-weight models for every architecture it supports (tests/test-llama-archs,
# TEST vocabulary), written once into the cache. Prints the directory.
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
dir="$LLAMA_HOTSWAP_CACHE/fixtures/llama-archs-s1"
if [ ! -f "$dir/.complete" ]; then
    bin="$(bash "$here/build-upstream-tools.sh" test-llama-archs)"
    rm -rf "$dir" && mkdir -p "$dir"
    "$bin/test-llama-archs" -o "$dir" -s 1 >"$dir/generate.log" 2>&1
    touch "$dir/.complete"
fi
echo "$dir"
