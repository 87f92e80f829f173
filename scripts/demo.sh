#!/usr/bin/env bash
# make demo: builds the library and the demo host, then runs it on a freshly written model.
# The demo sets LLAMA_VIRTUAL_GPUS=48MiB,16MiB and LLAMA_HOTSWAP_ENABLED=1 itself (first thing
# in main), loads the model across both virtual GPUs and hot-swaps one tensor's type; then, on
# the real model, generates a few words and swaps one tensor to Q8_0 and back.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo shows placement on virtual GPUs and decodes on the CPU engine; a real NVIDIA GPU would
# come first in the registry and take layers that the engine cannot decode, so CUDA is off
# unless the caller set the variable.
export LLAMA_HOTSWAP_NO_CUDA="${LLAMA_HOTSWAP_NO_CUDA-1}"
cargo build --release --lib --quiet
model="$(bash scripts/fetch-models.sh | tail -n 1)" # SmolLM2-135M Q4_1, cached
# Programs linked with -lllama record the SONAME, libllama.so.0; cargo writes only libllama.so.
ln -sfn libllama.so target/release/libllama.so.0
mkdir -p build/demo
cc -std=c11 -Wall -Wextra -O2 -Iinclude ffi-tests/demo/demo.c -Ltarget/release -lllama \
    -Wl,-rpath,"$PWD/target/release" -lm -o build/demo/demo
cd build/demo && ./demo demo-model.gguf "$model" 2>demo.log || { cat demo.log >&2; exit 1; }
