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
# NVRTC for compiling the CUDA kernels to PTX without a GPU or toolkit (tests/cuda_kernels.rs).
nvrtc_stamp="$VENV/.llama-hotswap-nvrtc-12.8.93"
if [ ! -f "$nvrtc_stamp" ]; then
    "$VENV/bin/pip" install -q "nvidia-cuda-nvrtc-cu12==12.8.93"
    touch "$nvrtc_stamp"
fi
echo "$VENV"
