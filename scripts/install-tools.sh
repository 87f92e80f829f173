#!/usr/bin/env bash
# Installs the pinned cbindgen into the cache (not ~/.cargo) so the version is always ours.
set -euo pipefail
. "$(dirname "$0")/env.sh"
bin="$LLAMA_HOTSWAP_CACHE/bin/cbindgen"
if [ ! -x "$bin" ] || ! "$bin" --version | grep -q " $CBINDGEN_VERSION\$"; then
    cargo install --quiet --locked --root "$LLAMA_HOTSWAP_CACHE" cbindgen --version "$CBINDGEN_VERSION"
fi
