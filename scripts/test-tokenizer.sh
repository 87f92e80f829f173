#!/usr/bin/env bash
# The tokenizer part: (1) the Rust tests on upstream's vocab files (.inp/.out cases token for
# token, round trip, hostile arguments, linear time, threads); (2) a differential C probe
# (ffi-tests/probe_tokenize.c, compiled on upstream's llama.h) run on upstream's library and
# ours over every models/ggml-vocab-*.gguf, the SmolLM2 vocab and a TEST-vocab model from
# upstream's test-llama-archs, with a generated corpus; outputs must be identical.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_upstream_lib
need_library
say "== cargo test --release --test tokenizer"
LLAMA_HOTSWAP_TOKENIZER_MODELS="$UPSTREAM_LLAMA/models" \
    cargo test --release --quiet --test tokenizer -- --test-threads 1

out="$WORK/tokenizer"
rm -rf "$out" && mkdir -p "$out"
"$CC" -std=gnu11 -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/probe_tokenize.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/probe_tokenize"
python3 scripts/gen-tokenizer-corpus.py "$UPSTREAM_LLAMA/models" "$out/corpus.txt" 1234

vocabs=("$UPSTREAM_LLAMA"/models/ggml-vocab-*.gguf)
vocabs+=("$(bash scripts/fetch-models.sh)")
# A TEST-vocab model: upstream's random-architecture fixture of llama (the shared cache).
archs="$(bash scripts/upstream-arch-fixtures.sh 2>"$out/archs.log")" \
    || fail "could not write upstream's test-llama-archs fixtures (see $out/archs.log)"
[ -s "$archs/llama-dense.gguf" ] || fail "test-llama-archs wrote no llama model (see $archs/generate.log)"
vocabs+=("$archs/llama-dense.gguf")

# RWKV, PLaMo2 and UGM (user-defined tokens, whitespace flags) fixtures: the sdist has no
# vocab of the first two and one UGM file (gguf::fixtures::vocab_algos).
while read -r fixture; do vocabs+=("$fixture"); done < <(cargo run --release --quiet \
    --example tokenizer_fixtures -- "$out/algos" "$UPSTREAM_LLAMA/models/ggml-vocab-nomic-bert-moe.gguf")

passed=0; failed=0
for vocab in "${vocabs[@]}"; do
    name="$(basename "$vocab" .gguf)"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/probe_tokenize" "$vocab" "$out/corpus.txt" >"$out/$name.upstream" 2>&1 || true
    LD_LIBRARY_PATH="$RELEASE_DIR" "$out/probe_tokenize" "$vocab" "$out/corpus.txt" >"$out/$name.ours" 2>&1 || true
    if ! grep -q "^load = ok" "$out/$name.upstream"; then
        say "FAIL $name: upstream could not load it"; failed=$((failed + 1)); continue
    fi
    if cmp -s "$out/$name.upstream" "$out/$name.ours"; then
        passed=$((passed + 1))
    else
        say "FAIL $name ($(diff "$out/$name.upstream" "$out/$name.ours" | grep -c '^<') lines differ):"
        diff "$out/$name.upstream" "$out/$name.ours" | head -8 | cut -c1-240
        failed=$((failed + 1))
    fi
done
say "tokenizer differential: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
