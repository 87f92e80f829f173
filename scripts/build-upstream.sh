#!/usr/bin/env bash
# Builds the pinned upstream libllama.so (CPU, library only) as the tests' oracle. Cached.
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
"$here/fetch-upstream.sh" >/dev/null
"$here/setup-venv.sh" >/dev/null
lib="$UPSTREAM_BUILD/bin/libllama.so"
if [ ! -f "$lib" ]; then
    "$VENV/bin/cmake" -S "$UPSTREAM_LLAMA" -B "$UPSTREAM_BUILD" -G Ninja \
        -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DGGML_OPENMP=OFF >/dev/null
    "$VENV/bin/cmake" --build "$UPSTREAM_BUILD" --target llama -j"$(nproc)" >/dev/null
fi
echo "$UPSTREAM_BUILD/bin"
