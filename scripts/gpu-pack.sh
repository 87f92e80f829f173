#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs into folder $1 (to carry to a GPU machine that has no
# Rust toolchain and no network): the release test binaries (stripped), the script, the commit,
# and a SmolLM2 file cut to $2 layers (default 10) so that everything stays under the carry
# limit. Builds the binaries when missing.
set -euo pipefail
dest="$1"; layers="${2:-10}"
mkdir -p "$dest/bin"
cargo test --release --test cuda_compute --test cuda_kernels --test cuda_model --no-run 2>&1 | tail -n 1
for t in cuda_compute cuda_kernels cuda_model; do
    exe="$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -n 1)"
    strip -o "$dest/bin/$t" "$exe"
done
cp scripts/gpu-check.sh "$dest/"
git rev-parse --short HEAD >"$dest/commit"
model="$(bash scripts/fetch-models.sh | tail -n 1)"
LLAMA_HOTSWAP_SMOLLM2="$model" LLAMA_HOTSWAP_TRUNCATE_OUT="$dest/smollm2.gguf" LLAMA_HOTSWAP_TRUNCATE_LAYERS="$layers" \
    "$dest/bin/cuda_compute" --ignored --exact write_truncated_smollm2 >/dev/null
du -sh "$dest"/* "$dest"/bin/*
