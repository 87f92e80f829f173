#!/usr/bin/env bash
# make bench-push: pushing a whole model's full-precision weights into a loaded model
# (llama_ext_tensors_push: every tensor quantized to its current type, one transaction) vs
# quantizing the same weights into a file with llama_model_quantize, same process,
# interleaved (ffi-tests/bench_push.c). Goal: push <= 1.2x quantize. SmolLM2-135M F16 as the
# source (upstream's llama-quantize of the shipped Q4_1), bases in Q8_0 and Q4_K_M made from
# it by upstream's llama-quantize. Env: ROUNDS (5), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
ROUNDS="${ROUNDS:-5}" THREADS="${THREADS:-2}"
model="$(bash scripts/fetch-models.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-quantize)"
cargo build --release --lib --quiet
ln -sf libllama.so target/release/libllama.so.0
out="$PWD/target/bench-push" && mkdir -p "$out"
cc -std=c11 -O2 -Iinclude ffi-tests/bench_push.c -Ltarget/release -lllama -o "$out/bench_push"
dir="$LLAMA_HOTSWAP_CACHE/models/engine"
f16="$dir/SmolLM2-135M-Instruct.F16.gguf"
mkdir -p "$dir"
[ -s "$f16" ] || { LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$model" "$f16.tmp" F16 \
    >/dev/null 2>&1 && mv "$f16.tmp" "$f16"; }
echo "bench-push: SmolLM2-135M from F16, $ROUNDS rounds, $THREADS threads, $(date -u +%F), commit $(git rev-parse --short HEAD)"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for pair in Q8_0:7 Q4_K_M:15; do
    name=${pair%%:*} ftype=${pair##*:}
    base="$out/base-$name.gguf"
    [ -s "$base" ] || LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" "$f16" "$base" "$name" >/dev/null 2>&1
    echo "== $name"
    LLAMA_HOTSWAP_ENABLED=1 LD_LIBRARY_PATH="$PWD/target/release" \
        "$out/bench_push" "$f16" "$base" "$ftype" "$out/quantized.tmp.gguf" "$ROUNDS" "$THREADS"
done
