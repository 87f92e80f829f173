#!/usr/bin/env bash
# Upstream's llama-eval-callback (cb_eval) on upstream's library and on ours, same model and
# prompt: the tensors it prints compared by scripts/eval_callback_compare.py (names, types,
# ops and shapes as upstream's graph names them; the printed values and sums within 2e-3 /
# 1e-3 relative; what may differ: docs/dropin.md, "The graph callback"). Part of
# make test-quantize (issue 36). Usage: eval-callback-check.sh [MODEL]
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_venv
need_library
model="${1:-$(bash scripts/fetch-models.sh)}"
tools="$(bash scripts/build-upstream-tools.sh llama-eval-callback)"
out="$WORK/eval-callback"
rm -rf "$out" && mkdir -p "$out/lib"
# the drop-in layout: ours as libllama.so.0, upstream's other libraries beside it
cp "$LIB" "$out/lib/libllama.so.0"
for f in "$tools"/libggml*.so.0 "$tools"/libllama-common.so.0; do
    ln -s "$f" "$out/lib/"
done
args=(-m "$model" -p "The capital of France is" -t 2 -c 256)
LD_LIBRARY_PATH="$tools" "$tools/llama-eval-callback" "${args[@]}" >"$out/upstream.out" 2>"$out/upstream.err" \
    || fail "llama-eval-callback on upstream's library: $(tail -n 3 "$out/upstream.err")"
LD_LIBRARY_PATH="$out/lib" "$tools/llama-eval-callback" "${args[@]}" >"$out/ours.out" 2>"$out/ours.err" \
    || fail "llama-eval-callback on ours: $(tail -n 3 "$out/ours.err")"
if r="$("$VENV/bin/python" scripts/eval_callback_compare.py "$out/upstream.out" "$out/ours.out")"; then
    say "ok   llama-eval-callback on $(basename "$model"): $(echo "$r" | tr '\n' ' ')"
else
    say "FAIL llama-eval-callback on $(basename "$model"):"
    say "$r"
    exit 1
fi
