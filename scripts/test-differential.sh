#!/usr/bin/env bash
# Differential test: one C probe, compiled once against upstream's llama.h, prints every
# model/vocab getter for a file; it runs against upstream's libllama.so and ours (switching
# LD_LIBRARY_PATH) over every fixture, plain, vocab-only and with a kv override. Outputs must
# be identical (the meta listing is compared sorted: upstream's order is its hash order).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
bash scripts/build-upstream.sh >/dev/null
cargo build --release --lib --quiet
out=target/ffi-tests/differential
rm -rf "$out" && mkdir -p "$out/fixtures"
cc -std=c11 -O1 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/probe_model.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/probe_model"
cargo run --release --quiet --example diff_fixtures -- "$out/fixtures" > "$out/fixtures.txt"
ours="$PWD/target/release"
passed=0; failed=0
while read -r fixture; do
    variants=("" vocab_only override:llama.context_length=4096)
    # A file without tensors only loads vocab-only upstream (its architecture requires tensors).
    case "$fixture" in *vocab-only*) variants=(vocab_only) ;; esac
    for variant in "${variants[@]}"; do
        name="$(basename "$fixture" .gguf)${variant:+-${variant%%:*}}"
        LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/probe_model" "$fixture" $variant > "$out/$name.upstream" 2>&1 || true
        LD_LIBRARY_PATH="$ours" "$out/probe_model" "$fixture" $variant > "$out/$name.ours" 2>&1 || true
        if ! grep -q "^load = ok" "$out/$name.upstream"; then
            echo "FAIL $name: upstream could not load the fixture (fix the fixture)"; failed=$((failed + 1)); continue
        fi
        if diff -u "$out/$name.upstream" "$out/$name.ours" > "$out/$name.diff"; then
            passed=$((passed + 1))
        else
            echo "FAIL $name:"; head -20 "$out/$name.diff"; failed=$((failed + 1))
        fi
    done
done < "$out/fixtures.txt"

# Upstream's random-weight model of every architecture (test-llama-archs): every getter,
# including the rope type that upstream derives from metadata for some architectures.
archs="$(bash scripts/upstream-arch-fixtures.sh)"
for fixture in "$archs"/*.gguf; do
    name="arch-$(basename "$fixture" .gguf)"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/probe_model" "$fixture" > "$out/$name.upstream" 2>&1 || true
    LD_LIBRARY_PATH="$ours" "$out/probe_model" "$fixture" > "$out/$name.ours" 2>&1 || true
    if ! grep -q "^load = ok" "$out/$name.upstream"; then
        echo "FAIL $name: upstream could not load its own fixture"; failed=$((failed + 1)); continue
    fi
    if diff -u "$out/$name.upstream" "$out/$name.ours" > "$out/$name.diff"; then
        passed=$((passed + 1))
    else
        echo "FAIL $name:"; head -20 "$out/$name.diff"; failed=$((failed + 1))
    fi
done
echo "differential: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
