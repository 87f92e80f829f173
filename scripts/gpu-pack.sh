#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs into folder $1 (to carry to a GPU machine that has no
# Rust toolchain and no network): the release test binaries (stripped), the script, the commit,
# upstream's gemma3 and qwen3moe fixtures, and SmolLM2 cut to $2 layers. Without $2 the cut is
# the most layers that keep the folder under $GPU_PACK_MIB (default 60; the device tool carries
# 64 MiB in all). Builds the binaries when missing. Prints what it packed and the layer count.
set -euo pipefail
dest="$1"; layers="${2:-}"
budget=$(( ${GPU_PACK_MIB:-60} * 1024 * 1024 ))
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/fixtures"
cargo test --release --test cuda_compute --test cuda_kernels --test cuda_model --no-run 2>&1 | tail -n 1
for t in cuda_compute cuda_kernels cuda_model; do
    exe="$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -n 1)"
    strip -o "$dest/bin/$t" "$exe"
done
cp scripts/gpu-check.sh "$dest/"
git rev-parse --short HEAD >"$dest/commit"
fx="$(bash scripts/upstream-arch-fixtures.sh | tail -n 1)"
cp "$fx/gemma3-dense.gguf" "$fx/qwen3moe-moe.gguf" "$dest/fixtures/"
model="$(bash scripts/fetch-models.sh | tail -n 1)"
cut_smollm2() { # layers, out
    LLAMA_HOTSWAP_SMOLLM2="$model" LLAMA_HOTSWAP_TRUNCATE_OUT="$2" LLAMA_HOTSWAP_TRUNCATE_LAYERS="$1" \
        "$dest/bin/cuda_compute" --ignored --exact write_truncated_smollm2 >/dev/null
}
if [ -z "$layers" ]; then
    # size(n) = base + n * per_layer, measured from cuts of 1 and 2 layers
    cut_smollm2 1 "$dest/l1.gguf"; cut_smollm2 2 "$dest/l2.gguf"
    s1=$(stat -c %s "$dest/l1.gguf"); s2=$(stat -c %s "$dest/l2.gguf")
    rm -f "$dest/l1.gguf" "$dest/l2.gguf"
    used=$(du -sb "$dest" | cut -f1)
    per=$(( s2 - s1 )); base=$(( s1 - per ))
    layers=$(( (budget - used - base) / per ))
    [ "$layers" -gt 30 ] && layers=30
    [ "$layers" -ge 1 ] || { echo "gpu-pack: no room for SmolLM2 (used $used of $budget bytes)"; exit 1; }
fi
cut_smollm2 "$layers" "$dest/smollm2.gguf"
echo "$layers" >"$dest/smollm2-layers"
du -sh "$dest"/* "$dest"/bin/* "$dest"/fixtures/*
echo "gpu-pack: SmolLM2 cut to $layers of 30 layers; $(du -sb "$dest" | cut -f1) bytes in $dest"
