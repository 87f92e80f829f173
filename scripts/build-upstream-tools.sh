#!/usr/bin/env bash
# Builds upstream programs the tests and benchmarks use as oracles or fixture makers
# (llama-quantize, llama-perplexity, test-llama-archs, ...) and the oracle library itself
# (target `llama`), all in one build tree, $UPSTREAM_BUILD, so ggml and libllama compile once.
# Cached: a target that is already built is not rebuilt. Examples are configured (ON) only for
# llama-eval-callback; nothing builds one unless asked for by name.
# Usage: build-upstream-tools.sh TARGET...  Prints the bin dir.
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
"$here/fetch-upstream.sh" >/dev/null
"$here/setup-venv.sh" >/dev/null
tools_build="$UPSTREAM_BUILD"
missing=()
for target in "$@"; do
    case "$target" in
        llama) [ -f "$tools_build/bin/libllama.so" ] || missing+=("$target") ;;
        *) [ -x "$tools_build/bin/$target" ] || missing+=("$target") ;;
    esac
done
if [ "${#missing[@]}" -gt 0 ]; then
    # One builder at a time: parallel test parts may ask for tools together.
    exec 9>"$LLAMA_HOTSWAP_CACHE/.upstream-tools.lock"
    flock 9
    # The configuration is stamped: a tree configured with other options (an older cache) is
    # reconfigured in place, which rebuilds only what the new options touch.
    options=(-DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja"
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF
        -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
        -DGGML_RPC=ON -DLLAMA_BUILD_COMMON=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
        -DLLAMA_LLGUIDANCE=OFF -DGGML_OPENMP=OFF)
    stamp="$tools_build/.llama-hotswap-options"
    if [ ! -f "$tools_build/build.ninja" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${options[*]}" ]; then
        "$VENV/bin/cmake" -S "$UPSTREAM_LLAMA" -B "$tools_build" -G Ninja "${options[@]}" >/dev/null
        printf '%s' "${options[*]}" >"$stamp"
    fi
    "$VENV/bin/cmake" --build "$tools_build" --target "${missing[@]}" -j"$(nproc)" >/dev/null
fi
echo "$tools_build/bin"
