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

# State and sessions (ffi-tests/diff_state.c) on SmolLM2 with an F16 cache, flash attention
# off (V transposed upstream) and on: each library saves a session file, a state buffer and a
# sequence file after the same prompt; the bytes must be equal. Each library then restores
# the other's files in a fresh context (the sequence file into sequence 1) and the next
# token's logits must equal, bit for bit, those of the library that saved them. Hostile
# states (truncated, wrong magic/version/arch, mismatched streams, cells, layers, types, a
# state of another model) must fail alike in both; ours must also log one line per failure
# and leave the memory as it was.
cc -std=c11 -O1 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/diff_state.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/diff_state"
model="$(bash scripts/fetch-models.sh)"
st="$out/state"
state_check() { # name, command...
    local name="$1"; shift
    if "$@" > "$st/$name.log" 2>&1; then passed=$((passed + 1)); else
        echo "FAIL state $name:"; tail -5 "$st/$name.log"; failed=$((failed + 1)); fi
}
for fa in 0 1; do
    mkdir -p "$st/up$fa" "$st/our$fa"
    state_check "save-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" save "$model" $fa "$st/up$fa"
    state_check "save-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" save "$model" $fa "$st/our$fa"
    for f in session.bin state.bin seq.bin next.f32; do
        state_check "same-bytes-$f-fa$fa" cmp "$st/up$fa/$f" "$st/our$fa/$f"
    done
    for kind in session state seq; do
        state_check "ours-loads-upstream-$kind-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" load "$model" $fa \
            "$st/up$fa/$kind.bin" $kind "$st/ours-from-up-$kind-$fa.f32"
        state_check "ours-loads-upstream-$kind-fa$fa-logits" cmp "$st/ours-from-up-$kind-$fa.f32" "$st/our$fa/next.f32"
        state_check "upstream-loads-ours-$kind-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" load "$model" $fa \
            "$st/our$fa/$kind.bin" $kind "$st/up-from-ours-$kind-$fa.f32"
        state_check "upstream-loads-ours-$kind-fa$fa-logits" cmp "$st/up-from-ours-$kind-$fa.f32" "$st/up$fa/next.f32"
    done
    other="$archs/llama-dense.gguf"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" hostile "$model" $fa "$st/up$fa" "$other" 0 > "$st/hostile-up$fa.txt" 2>/dev/null || true
    state_check "hostile-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" hostile "$model" $fa "$st/our$fa" "$other" 1
    grep -v '^seq_file_truncated\|^memory unchanged' "$st/hostile-ours-fa$fa.log" | grep ' ret=\|n_tok=' > "$st/hostile-our$fa.txt" || true
    state_check "hostile-same-results-fa$fa" diff -u "$st/hostile-up$fa.txt" "$st/hostile-our$fa.txt"
done

echo "differential: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
