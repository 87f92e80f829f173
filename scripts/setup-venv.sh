#!/usr/bin/env bash
# A local Python venv (cached) with cmake, gguf-py and what llama-cpp-python needs at import.
set -euo pipefail
. "$(dirname "$0")/env.sh"
stamp="$VENV/.llama-hotswap-v1"
if [ ! -f "$stamp" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q cmake ninja numpy typing_extensions diskcache jinja2 gguf==0.19.0
    touch "$stamp"
fi
echo "$VENV"
