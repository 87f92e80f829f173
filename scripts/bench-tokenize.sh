#!/usr/bin/env bash
# Tokenizer throughput, ours vs upstream in the same run (not a test): ≥ 1 MiB of real mixed
# text (the sdist's Markdown docs and READMEs concatenated) tokenized with an SPM, two BPE
# (llama-bpe, qwen2) and the WPM vocab; median of 5 runs; peak RSS of each process.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_upstream_lib
need_library
out="$WORK/bench-tokenize"
mkdir -p "$out"
"$CC" -std=gnu11 -O2 "${UPSTREAM_INCLUDES[@]}" ffi-tests/bench_tokenize.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/bench_tokenize"
find "$UPSTREAM_DIR" -name '*.md' -type f | LC_ALL=C sort | xargs cat > "$out/text.txt"
size=$(stat -c %s "$out/text.txt")
[ "$size" -ge 1048576 ] || fail "only $size bytes of text"
printf '%s, %.2f MiB of Markdown from the sdist, median of 5 runs\n' "$(date -u +%Y-%m-%d)" \
    "$(echo "$size / 1048576" | bc -l)"
echo "| vocab | upstream ms | ours ms | ratio (ours/upstream time) | upstream MiB/s | ours MiB/s | tokens | upstream RSS MiB | ours RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for v in llama-spm llama-bpe qwen2 bert-bge; do
    gguf="$UPSTREAM_LLAMA/models/ggml-vocab-$v.gguf"
    read -r ut ur uk um < <(LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/bench_tokenize" "$gguf" "$out/text.txt" 5)
    read -r ot or ok om < <(LD_LIBRARY_PATH="$RELEASE_DIR" "$out/bench_tokenize" "$gguf" "$out/text.txt" 5)
    [ "$uk" = "$ok" ] || echo "(token counts differ: upstream $uk, ours $ok)"
    printf '| %s | %.1f | %.1f | %.2f× | %s | %s | %s | %s | %s |\n' "$v" \
        "$(echo "$ut * 1000" | bc -l)" "$(echo "$ot * 1000" | bc -l)" "$(echo "$ot / $ut" | bc -l)" \
        "$ur" "$or" "$ok" "$um" "$om"
done
echo "(the newest run of this benchmark goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
