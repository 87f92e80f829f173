#!/usr/bin/env bash
# Builds the pinned upstream libllama.so (CPU, portable x86: GGML_NATIVE=OFF) as the tests'
# oracle, in the one upstream tree the tools share (scripts/build-upstream-tools.sh). Cached.
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
bash "$here/build-upstream-tools.sh" llama >/dev/null
[ -f "$UPSTREAM_BUILD/bin/libllama.so" ] || { echo "build-upstream: no libllama.so in $UPSTREAM_BUILD/bin" >&2; exit 1; }
echo "$UPSTREAM_BUILD/bin"
