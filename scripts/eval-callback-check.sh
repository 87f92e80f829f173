#!/usr/bin/env bash
# Upstream's llama-eval-callback (cb_eval) on upstream's library and on ours, same model and
# prompt: the tensors it prints compared by scripts/eval_callback_compare.py (names, types,
# ops and shapes as upstream's graph names them; the printed values and sums within 2e-3 /
# 1e-3 relative; what may differ: docs/dropin.md, "The graph callback"). Part of
# make test-quantize (issue 36). Models: SmolLM2 (Q4_1), then test-llama-archs fixtures of
# architectures whose lists match upstream's in full (biases, per-tensor scales, Q/K norms, MoE).
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_venv
need_library
model="$(bash scripts/fetch-models.sh)"
fixtures="$(bash scripts/upstream-arch-fixtures.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-eval-callback)"
out="$WORK/eval-callback"
rm -rf "$out" && mkdir -p "$out/lib"
# the drop-in layout: ours as libllama.so.0, upstream's other libraries beside it
cp "$LIB" "$out/lib/libllama.so.0"
for f in "$tools"/libggml*.so.0 "$tools"/libllama-common.so.0; do
    ln -s "$f" "$out/lib/"
done
# llama-eval-callback prints through libcommon's asynchronous logger, which is leaked at exit
# (upstream's common/log.cpp, issue 22142): lines still queued when the program exits are lost
# (often, on a loaded machine), and a line can come out mangled. Both runs preload a destructor
# that gives the logger's thread half a second to drain at exit (the same for both libraries),
# and a run counts when its list is whole: it ends with result_output's values and every header
# starts its line; otherwise it runs again (3 tries).
printf '#include <unistd.h>\n__attribute__((destructor)) static void drain_log(void) { usleep(500000); }\n' \
    >"$out/drain_log.c"
"$CC" -shared -fPIC -O1 -o "$out/drain_log.so" "$out/drain_log.c" || fail "building the exit delay"
whole() {
    awk '/common_debug_cb_eval:/ { last = $0; summed = 0 } /^ *sum = / { summed = 1 }
        END { exit !(last ~ / result_output = / && summed) }' "$1" \
        && ! grep -q '.common_debug_cb_eval' "$1"
}
run() { # run NAME LIBDIR
    local try
    for try in 1 2 3; do
        LD_PRELOAD="$out/drain_log.so" LD_LIBRARY_PATH="$2" "$tools/llama-eval-callback" "${args[@]}" \
            >"$out/$1.out" 2>"$out/$1.err" \
            || fail "llama-eval-callback on $1's library: $(tail -n 3 "$out/$1.err")"
        whole "$out/$1.out" && return 0
        say "note: llama-eval-callback's output on $1's library came out incomplete (try $try)"
    done
    fail "llama-eval-callback on $1's library: no whole output in 3 runs"
}
status=0
for m in "$model" "$fixtures"/{llama-dense,qwen2-dense,qwen2vl-dense,smollm3-dense,ernie4_5-moe,paddleocr-moe}.gguf; do
    args=(-m "$m" -p "The capital of France is" -t 2 -c 256)
    run upstream "$tools"
    run ours "$out/lib"
    if r="$("$VENV/bin/python" scripts/eval_callback_compare.py "$out/upstream.out" "$out/ours.out")"; then
        say "ok   llama-eval-callback on $(basename "$m"): $(echo "$r" | tr '\n' ' ')"
    else
        say "FAIL llama-eval-callback on $(basename "$m"):"
        say "$r"
        status=1
    fi
done
exit $status
