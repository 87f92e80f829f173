#!/usr/bin/env bash
# Chat templates, differential: ffi-tests/chat_probe.c, compiled once against upstream's
# llama.h, runs against upstream's libllama.so and ours over every built-in template name,
# every models/templates/*.jinja of the sdist, the chat templates stored in its
# models/ggml-vocab-*.gguf, the marker strings of upstream's detection heuristics and a few
# inline strings (scripts/chat_corpus.py), with a dozen conversations each, add_ass 0/1,
# full / too-small / negative-length buffers. The outputs must be identical byte for byte.
# Hostile inputs (NULL pointers, huge n_msg), which crash upstream, are in
# ffi-tests/test_chat.c (scripts/test-c.sh, also under ASan).
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_upstream_lib
need_library
out="$WORK/chat"
rm -rf "$out"
mkdir -p "$out/corpus"
"$CC" -std=c11 -O1 -Wall -Wextra -Werror "${UPSTREAM_INCLUDES[@]}" ffi-tests/chat_probe.c \
    -o "$out/chat_probe" -L "$RELEASE_DIR" -lllama -ldl || fail "chat_probe.c does not compile"
python3 scripts/chat_corpus.py "$UPSTREAM_LLAMA" "$out/corpus" >"$out/corpus.txt" \
    || fail "cannot build the template corpus"
mapfile -t templates < <(ls "$UPSTREAM_LLAMA"/models/templates/*.jinja; cat "$out/corpus.txt")
n_jinja="$(ls "$UPSTREAM_LLAMA"/models/templates/*.jinja | wc -l)"
n_vocab="$(grep -c '/vocab-' "$out/corpus.txt" || true)"
[ "$n_jinja" -gt 0 ] || fail "no .jinja files in $UPSTREAM_LLAMA/models/templates"
[ "$n_vocab" -gt 0 ] || fail "no chat template found in the sdist's ggml-vocab-*.gguf files"

run() { # LABEL LIBDIR
    LD_LIBRARY_PATH="$2" "$out/chat_probe" "${templates[@]}" >"$out/$1.txt" 2>"$out/$1.err" \
        || { cat "$out/$1.err" >&2; fail "chat_probe crashed against $1's library"; }
    grep -q "^library: $2/" "$out/$1.err" || fail "the $1 run did not load $2's library"
}
run upstream "$UPSTREAM_BUILD/bin"
run ours "$RELEASE_DIR"
if ! diff -u --label upstream --label ours "$out/upstream.txt" "$out/ours.txt" >"$out/diff.txt"; then
    head -n 60 "$out/diff.txt"
    fail "chat templates differ from upstream's (full diff: $out/diff.txt)"
fi
grep -q '^builtin count 54$' "$out/ours.txt" || fail "expected 54 built-in templates"
n_probed="$(grep -c '^== ' "$out/ours.txt")"
n_matched="$(grep -c '^  full ' "$out/ours.txt")"
say "chat templates: $n_probed templates ($n_jinja .jinja, $n_vocab from vocab files), $n_matched outputs, $(wc -l <"$out/ours.txt") lines identical (upstream vs ours)"
