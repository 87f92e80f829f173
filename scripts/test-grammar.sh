#!/usr/bin/env bash
# Grammar samplers, differential: ffi-tests/probe_grammar.c, compiled once against upstream's
# llama.h, runs on upstream's libllama.so and ours with the vocab-only llama-bpe model (and the
# llama-spm one for the sample grammars): every grammars/*.gbnf of the pinned llama.cpp,
# upstream's integration-test grammars, token references, lazy samplers (word, pattern,
# token), JSON-schema grammars, invalid grammars. Outputs must be identical. Then input
# upstream aborts on ("hostile"), on ours only: every sampler NULL.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_upstream_lib
need_library
out="$WORK/grammar"
rm -rf "$out" && mkdir -p "$out"
"$CC" -std=c11 -O1 -Wall -Wno-deprecated-declarations -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" \
    ffi-tests/probe_grammar.c -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/probe_grammar"
ours="$RELEASE_DIR"
passed=0; failed=0
# The llama-bpe vocab (GPT-2 byte-level pieces) for everything; the llama-spm vocab (▁ for
# spaces, <0xXX> byte tokens) for the sample grammars too.
# JSON-schema grammars from llama-cpp-python's own converter (what `response_format` sends).
python3 scripts/grammar_schemas.py "$UPSTREAM_DIR/llama_cpp/llama_grammar.py" "$out/schemas"
# `<text>` token references on the SPM vocab: BOS/EOS (control), <unk> (unknown), and a byte
# token, which is no special token (NULL on both).
mkdir -p "$out/spm"
printf 'root ::= <s> [a-c]+ </s>\n' > "$out/spm/token-s.gbnf"
printf 'root ::= <unk> "x"\n' > "$out/spm/token-unk.gbnf"
printf 'root ::= "a" <0x0A>\n' > "$out/spm/token-byte.gbnf"
# `<text>` references go through the tokenizer (special tokens parsed, exactly one token):
# on the llama-bpe vocab a special token, ordinary text that is one token (`<>`), and text that is
# several tokens (invalid on both).
mkdir -p "$out/bpe"
printf 'root ::= <|begin_of_text|> [a-c]+ <|eot_id|>\n' > "$out/bpe/token-special.gbnf"
printf 'root ::= <> "x"\n' > "$out/bpe/token-normal.gbnf"
printf 'root ::= <hello world> "x"\n' > "$out/bpe/token-multi.gbnf"
# Pieces from the tokenizer on two more kinds: gemma-4 (BPE that escapes spaces as ▁) and
# nomic-bert-moe (UGM).
for mode in files builtin invalid files-spm schemas files-gemma4 files-ugm; do
    args=()
    model="$UPSTREAM_LLAMA/models/ggml-vocab-llama-bpe.gguf"
    case "$mode" in
        files) args=(files "$UPSTREAM_LLAMA"/grammars/*.gbnf "$out"/bpe/*.gbnf) ;;
        files-spm) args=(files "$UPSTREAM_LLAMA"/grammars/*.gbnf "$out"/spm/*.gbnf); model="$UPSTREAM_LLAMA/models/ggml-vocab-llama-spm.gguf" ;;
        files-gemma4) args=(files "$UPSTREAM_LLAMA"/grammars/*.gbnf); model="$UPSTREAM_LLAMA/models/ggml-vocab-gemma-4.gguf" ;;
        files-ugm) args=(files "$UPSTREAM_LLAMA"/grammars/*.gbnf); model="$UPSTREAM_LLAMA/models/ggml-vocab-nomic-bert-moe.gguf" ;;
        schemas) args=(files "$out"/schemas/*.gbnf) ;;
        *) args=("$mode") ;;
    esac
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/probe_grammar" "$model" "${args[@]}" > "$out/$mode.upstream" 2> "$out/$mode.upstream.log" || true
    LD_LIBRARY_PATH="$ours" "$out/probe_grammar" "$model" "${args[@]}" > "$out/$mode.ours" 2> "$out/$mode.ours.log" || true
    n=$(grep -c '^grammar ' "$out/$mode.upstream" || true)
    if [ "$n" -eq 0 ]; then
        echo "FAIL $mode: upstream printed no grammar (see $out/$mode.upstream)"; failed=$((failed + 1)); continue
    fi
    if diff -u "$out/$mode.upstream" "$out/$mode.ours" > "$out/$mode.diff"; then
        echo "ok   $mode: $n grammars, $(wc -l < "$out/$mode.ours") lines identical"; passed=$((passed + 1))
    else
        echo "FAIL $mode:"; head -30 "$out/$mode.diff"; failed=$((failed + 1))
    fi
done
LD_LIBRARY_PATH="$ours" "$out/probe_grammar" "$UPSTREAM_LLAMA/models/ggml-vocab-llama-bpe.gguf" hostile > "$out/hostile.ours" 2> "$out/hostile.ours.log" || true
if [ "$(grep -c ': NULL$' "$out/hostile.ours" || true)" -eq 8 ]; then
    echo "ok   hostile: 8 cases NULL on ours"; passed=$((passed + 1))
else
    echo "FAIL hostile:"; cat "$out/hostile.ours" "$out/hostile.ours.log"; failed=$((failed + 1))
fi
echo "grammar: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
