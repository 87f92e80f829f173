#!/usr/bin/env bash
# Downloads and unpacks the pinned llama-cpp-python sdist (vendored llama.cpp 0c1e57098bba)
# into the cache. Idempotent.
set -euo pipefail
. "$(dirname "$0")/env.sh"
mkdir -p "$LLAMA_HOTSWAP_CACHE"
if [ ! -f "$UPSTREAM_LLAMA/include/llama.h" ]; then
    tarball="$LLAMA_HOTSWAP_CACHE/llama_cpp_python-$UPSTREAM_VERSION.tar.gz"
    if [ ! -f "$tarball" ]; then
        python3 -m pip download -q --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$UPSTREAM_VERSION" -d "$LLAMA_HOTSWAP_CACHE"
    fi
    tar -xzf "$tarball" -C "$LLAMA_HOTSWAP_CACHE"
fi
echo "$UPSTREAM_DIR"
