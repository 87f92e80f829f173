#!/usr/bin/env bash
# Upstream's own programs on our library (docs/dropin.md): built once from the pinned sources
# (scripts/build-upstream-tools.sh), then run twice with the same arguments: on upstream's
# libllama (the oracle) and with our libllama.so.0 first on LD_LIBRARY_PATH and upstream's
# libggml*.so and libllama-common.so beside it (the layout `cmake --install` makes). Model:
# SmolLM2-135M-Instruct Q4_1. Checks:
#  * coexist (ffi-tests/dropin/coexist.cpp, C++ against upstream's headers, ours linked before
#    libggml so our ggml_* exports come first): ggml_* calls answer as libggml's, libggml's
#    handles accepted in tensor_buft_overrides, llama-ext.h's C++ entry points (fit.cpp's
#    no_alloc dry run and memory breakdown) answer with keys libggml understands;
#  * every upstream libllama symbol libllama-common.so and the programs import is ours too;
#  * llama-perplexity: final PPL within 0.1% of upstream's (4 chunks of 128); KLD mode with a
#    base-logits file written by upstream and one written by ours: mean KLD < 1e-3, same top
#    token >= 99% (each side reading the other's file);
#  * llama-completion, greedy, non-interactive: the same text; common's threadpools accepted
#    (with a log line: their thread count cannot be read);
#  * llama-tokenize: the same ids;
#  * llama-bench and llama-batched-bench: run and print their tables;
#  * llama-imatrix (cb_eval): the imatrix file ours writes equals upstream's byte for byte on
#    SmolLM2 Q4_1; on the qwen3moe fixture (MUL_MAT_ID) the same entries and counts, sums within
#    1e-4 relative; llama-quantize --imatrix (Q4_K_M) with our imatrix on ours writes upstream's file;
#  * LLAMA_HOTSWAP_AUTO (ffi-tests/dropin/auto_swap.c): a program that never calls the hot-swap API
#    sees a fresh model's logits after its file is replaced, and not before the interval;
#  * backend sampling (ffi-tests/dropin/backend_sampling.c: a greedy chain offloaded by both) and llama_model_save_to_file
#    (ffi-tests/dropin/save_model.c) against upstream's library;
#  * llama_model_init_from_user (ffi-tests/dropin/init_from_user.c) against upstream's library
#    on the fixtures of every architecture ours builds from metadata, and its hostile cases;
#  * llama-server (scripts/server_check.py: endpoints, slots, -np 4, bad requests, automatic
#    hot-swap while serving) and llama-cli -st: the same answers as on upstream's library.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_venv
need_library
model="$(bash scripts/fetch-models.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-perplexity llama-completion llama-tokenize llama-bench llama-batched-bench llama-imatrix llama-quantize llama-server llama-cli)"
out="$WORK/programs"
rm -rf "$out" && mkdir -p "$out/lib"
# The drop-in layout: ours as libllama.so.0, upstream's other libraries beside it.
cp "$LIB" "$out/lib/libllama.so.0"
for f in "$tools"/libggml*.so.0 "$tools"/libllama-common.so.0 "$tools"/*-impl.so; do
    ln -s "$f" "$out/lib/"
done
status=0
ok() { say "ok   $*"; }
bad() { say "FAIL $*"; status=1; }
ours() { LD_LIBRARY_PATH="$out/lib" "$@"; }
theirs() { LD_LIBRARY_PATH="$tools" "$@"; }

# Symbols: what libllama-common and the programs take from upstream's libllama, we export.
nm -D --defined-only "$tools/libllama.so" | awk '{print $3}' | sort -u >"$out/upstream.syms"
nm -D --defined-only "$LIB" | awk '{print $3}' | sort -u >"$out/ours.syms"
missing=""
for f in libllama-common.so llama-perplexity llama-completion llama-tokenize llama-bench \
    llama-batched-bench llama-imatrix llama-quantize llama-server llama-cli libllama-perplexity-impl.so \
    libllama-completion-impl.so libllama-bench-impl.so libllama-batched-bench-impl.so \
    libllama-server-impl.so libllama-cli-impl.so; do
    [ -e "$tools/$f" ] || continue
    m="$(nm -D --undefined-only "$tools/$f" | awk '{print $2}' | sed 's/@.*//' | sort -u \
        | comm -12 - "$out/upstream.syms" | comm -23 - "$out/ours.syms")"
    [ -z "$m" ] || missing="$missing $f:[$(echo $m)]"
done
if [ -z "$missing" ]; then
    ok "every libllama symbol that libllama-common.so and the programs import is exported ($(grep -c '^_Z' "$out/ours.syms") C++ ones)"
else
    bad "symbols missing from ours:$missing"
fi

# Coexistence with libggml in one process.
if "$CXX" -std=c++17 -O1 "${UPSTREAM_INCLUDES[@]}" -I "$UPSTREAM_LLAMA/src" ffi-tests/dropin/coexist.cpp \
    -o "$out/coexist" -L "$out/lib" -Wl,--no-as-needed -l:libllama.so.0 -l:libggml.so.0 \
    -l:libggml-base.so.0 -ldl >"$out/coexist-build.log" 2>&1; then
    if COEXIST_HOSTILE=1 ours "$out/coexist" "$model" >"$out/coexist-ours.log" 2>&1; then
        ok "coexist with libggml: $(grep -c '^ok' "$out/coexist-ours.log") checks; $(grep breakdown "$out/coexist-ours.log" | sed 's/^ *//')"
    else
        bad "coexist with libggml:"; grep -v '^ok' "$out/coexist-ours.log" | tail -20
    fi
    if theirs "$out/coexist" "$model" >"$out/coexist-upstream.log" 2>&1; then
        ok "coexist on upstream's libllama (the reference): $(grep breakdown "$out/coexist-upstream.log" | sed 's/^ *//')"
    else
        bad "coexist on upstream's libllama:"; grep -v '^ok' "$out/coexist-upstream.log" | tail -20
    fi
else
    bad "building ffi-tests/dropin/coexist.cpp:"; tail -20 "$out/coexist-build.log"
fi

# LLAMA_HOTSWAP_AUTO in a program that never calls the hot-swap API (ffi-tests/dropin/auto_swap.c):
# the model's file is replaced between two decodes; after the interval the next decode gives a
# fresh model's logits on the new file, before it (and without the variable) the old ones.
newweights="$out/new-weights.gguf"
"$VENV/bin/python" scripts/gguf_perturb.py "$model" "$newweights" >/dev/null
if "$CC" -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/dropin/auto_swap.c -o "$out/auto_swap" -L "$out/lib" \
    -l:libllama.so.0 >"$out/auto_swap-build.log" 2>&1; then
    for mode in auto off; do
        cp "$model" "$out/auto-model.gguf" && cp "$newweights" "$out/auto-new.gguf"
        if [ $mode = auto ]; then
            LLAMA_HOTSWAP_ENABLED=1 LLAMA_HOTSWAP_AUTO=3000 ours "$out/auto_swap" "$out/auto-model.gguf" "$out/auto-new.gguf" 3000 1 \
                >"$out/auto_swap-$mode.log" 2>&1 && grep -q "LLAMA_HOTSWAP_AUTO: 60 tensor(s) reloaded" "$out/auto_swap-$mode.log"
        else
            LLAMA_HOTSWAP_ENABLED=1 ours "$out/auto_swap" "$out/auto-model.gguf" "$out/auto-new.gguf" 0 0 >"$out/auto_swap-$mode.log" 2>&1
        fi && r=0 || r=1
        if [ $r = 0 ]; then
            ok "LLAMA_HOTSWAP_AUTO ($mode): $(grep -c '^ok' "$out/auto_swap-$mode.log") checks ($(grep -E '^(ok|skip)' "$out/auto_swap-$mode.log" | tail -n 1 | cut -c6-))"
        else
            bad "LLAMA_HOTSWAP_AUTO ($mode):"; grep -E '^(FAIL|skip)|LLAMA_HOTSWAP_AUTO' "$out/auto_swap-$mode.log" | tail -n 10
        fi
    done
else
    bad "building ffi-tests/dropin/auto_swap.c:"; tail -20 "$out/auto_swap-build.log"
fi

# Backend sampling (ffi-tests/dropin/backend_sampling.c): without a backend sampler both
# libraries answer alike; a greedy chain is offloaded by both (sampled inside the decode) and the
# program's tokens are the same (the full differential is scripts/test-sampling.sh's).
if "$CC" -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/dropin/backend_sampling.c -o "$out/backend_sampling" -L "$out/lib" \
    -l:libllama.so.0 >"$out/backend_sampling-build.log" 2>&1 \
    && theirs "$out/backend_sampling" "$model" >"$out/backend_sampling-upstream.out" 2>/dev/null \
    && ours "$out/backend_sampling" "$model" >"$out/backend_sampling-ours.out" 2>"$out/backend_sampling-ours.err"; then
    if cmp -s "$out/backend_sampling-upstream.out" "$out/backend_sampling-ours.out" \
        && grep -q "greedy chain): offloaded" "$out/backend_sampling-ours.out"; then
        ok "backend sampling: getters answer as upstream's without a backend sampler ($(sed -n 's/^no sampler: //p' "$out/backend_sampling-ours.out")); a greedy chain offloaded by both, the same 8 tokens"
    else
        bad "backend sampling:"; diff "$out/backend_sampling-upstream.out" "$out/backend_sampling-ours.out" | head || true
        tail -n 3 "$out/backend_sampling-ours.err"
    fi
else
    bad "backend sampling probe failed (see $out/backend_sampling-*)"
fi

# llama_model_save_to_file (ffi-tests/dropin/save_model.c): the same tensors (names, types,
# shapes, bytes) as upstream's writer; both files give the original's logits on upstream's
# library, bit for bit.
if "$CC" -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/dropin/save_model.c -o "$out/save_model" -L "$out/lib" \
    -l:libllama.so.0 >"$out/save_model-build.log" 2>&1 \
    && theirs "$out/save_model" save "$model" "$out/saved-upstream.gguf" 2>"$out/save-upstream.err" \
    && ours "$out/save_model" save "$model" "$out/saved-ours.gguf" 2>"$out/save-ours.err" \
    && r="$("$VENV/bin/python" - "$out/saved-upstream.gguf" "$out/saved-ours.gguf" <<'PY'
import sys
import gguf
a, b = (gguf.GGUFReader(f) for f in sys.argv[1:3])
ta = {t.name: (int(t.tensor_type), [int(x) for x in t.shape], bytes(t.data.tobytes())) for t in a.tensors}
tb = {t.name: (int(t.tensor_type), [int(x) for x in t.shape], bytes(t.data.tobytes())) for t in b.tensors}
if set(ta) != set(tb):
    sys.exit(f"tensor names differ: {sorted(set(ta) ^ set(tb))[:5]}")
diff = [n for n in ta if ta[n] != tb[n]]
if diff:
    sys.exit(f"tensors differ: {diff[:5]}")
print(f"{len(ta)} tensors equal; metadata: upstream {len(a.fields)} fields, ours {len(b.fields)}")
PY
)"; then
    theirs "$out/save_model" logits "$model" >"$out/logits-original.out" 2>/dev/null
    theirs "$out/save_model" logits "$out/saved-upstream.gguf" >"$out/logits-saved-upstream.out" 2>/dev/null
    theirs "$out/save_model" logits "$out/saved-ours.gguf" >"$out/logits-saved-ours.out" 2>/dev/null
    if [ -s "$out/logits-original.out" ] && cmp -s "$out/logits-original.out" "$out/logits-saved-upstream.out" \
        && cmp -s "$out/logits-original.out" "$out/logits-saved-ours.out"; then
        ok "llama_model_save_to_file: $r; upstream's library gives the original's logits on both files"
    else
        bad "llama_model_save_to_file: logits differ on the saved files (see $out/logits-*.out)"
    fi
else
    bad "llama_model_save_to_file: ${r:-a run failed (see $out/save-*.err)}"
fi

# llama_model_init_from_user (ffi-tests/dropin/init_from_user.c): for every architecture ours
# builds from metadata (graph::arch::DECLARES_TENSORS), each test-llama-archs fixture's
# key/value pairs (one F16 override) through libggml's gguf_context on both libraries, tensors
# filled by a name-seeded callback: the same tensors filled, n_params (0), and the last token's logits
# within 1e-3 of the largest (same argmax); filled from one sequential stream: the same
# sequence of callbacks (tensor names in order, repeats included) and, where no tensor is
# created twice, the same logits; hostile cases NULL on both, and the cases
# upstream aborts on (or an architecture ours refuses) NULL with a log line on ours.
fixtures="$(bash scripts/upstream-arch-fixtures.sh)"
declared="$(sed -n '/^pub static DECLARES_TENSORS/,/^];/p' src/graph/arch/mod.rs | grep -o '"[^"]*"' | tr -d '"')"
if "$CC" -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/dropin/init_from_user.c -o "$out/init_from_user" -L "$out/lib" \
    -l:libllama.so.0 -l:libggml-base.so.0 -lm >"$out/init_from_user-build.log" 2>&1; then
    n_same=0; n_order=0; n_stream_logits=0; differ=""
    for f in "$fixtures"/*.gguf; do
        name="$(basename "$f" .gguf)"; arch="${name%-dense}"; arch="${arch%-moe}"
        grep -qx -- "$arch" <<<"$declared" || continue
        # cogvlm: every token an output, where upstream's graph is right (it selects no rows,
        # so with fewer outputs than tokens it returns the first rows: docs/dropin.md)
        run=(env); [ "$arch" = cogvlm ] && run=(env INIT_USER_ALL_OUTPUTS=1)
        theirs "${run[@]}" "$out/init_from_user" logits "$f" >"$out/iu-$name-upstream.out" 2>"$out/iu-$name-upstream.err"
        ours "${run[@]}" "$out/init_from_user" logits "$f" >"$out/iu-$name-ours.out" 2>"$out/iu-$name-ours.err"
        if r="$(python3 - "$out/iu-$name-upstream.out" "$out/iu-$name-ours.out" <<'PY'
import sys
a, b = (open(p).read().split("\n") for p in sys.argv[1:3])
if not a[0].startswith("tensors filled") or a[:2] != b[:2]:
    sys.exit(f"{a[:2]!r} vs {b[:2]!r}")
la, lb = ([float(x) for x in t[2:] if x] for t in (a, b))
if not la or len(la) != len(lb):
    sys.exit("no logits")
scale = max(abs(x) for x in la)
err = max(abs(x - y) for x, y in zip(la, lb))
if err > 1e-3 * scale or la.index(max(la)) != lb.index(max(lb)):
    sys.exit(f"max |diff| {err:.3g} of {scale:.3g}")
print(f"{err / scale:.1e}")
PY
)" && ! grep -q "model has unused tensor" "$out/iu-$name-ours.err"; then
            n_same=$((n_same + 1))
        else
            differ="$differ $name(${r:-run failed})"
        fi
        # every tensor filled from one sequential stream: the callbacks' sequence (names,
        # repeats included) equal to upstream's; the logits too where no tensor is created
        # twice (ours keeps a repeated tensor's first values, upstream's later copy the later)
        theirs "${run[@]}" "$out/init_from_user" stream "$f" >"$out/iu-$name-stream-upstream.out" 2>"$out/iu-$name-stream-upstream.err"
        ours "${run[@]}" "$out/init_from_user" stream "$f" >"$out/iu-$name-stream-ours.out" 2>"$out/iu-$name-stream-ours.err"
        if r="$(python3 - "$out/iu-$name-stream-upstream.out" "$out/iu-$name-stream-ours.out" <<'PY'
import re, sys
a, b = (open(p).read().split("\n") for p in sys.argv[1:3])
number = re.compile(r"^-?([0-9]|nan|inf)")
names = [[x for x in t[1:] if x and not number.match(x)] for t in (a, b)]
if not a[0].startswith("callbacks") or a[0] != b[0] or names[0] != names[1]:
    first = next((i for i, (x, y) in enumerate(zip(*names)) if x != y), min(map(len, names)))
    sys.exit(f"{a[0]!r} vs {b[0]!r}, first difference at call {first}")
if len(set(names[0])) != len(names[0]):
    print("repeats")
    sys.exit(0)
la, lb = ([float(x) for x in t[1:] if x and number.match(x)] for t in (a, b))
if not la or len(la) != len(lb):
    sys.exit("no logits")
scale = max(abs(x) for x in la)
err = max(abs(x - y) for x, y in zip(la, lb))
if err > 1e-3 * scale or la.index(max(la)) != lb.index(max(lb)):
    sys.exit(f"stream logits: max |diff| {err:.3g} of {scale:.3g}")
print("logits")
PY
)"; then
            n_order=$((n_order + 1))
            [ "$r" = logits ] && n_stream_logits=$((n_stream_logits + 1))
        else
            differ="$differ $name-stream(${r:-run failed})"
        fi
    done
    if [ -z "$differ" ] && [ "$n_same" -gt 0 ]; then
        ok "llama_model_init_from_user: $n_same fixtures of $(wc -w <<<"$declared") architectures: the same tensors filled, logits within 1e-3 of upstream's, no tensor logged as unused (as upstream); filled from one stream: the same callback sequence on $n_order, the same logits on the $n_stream_logits that create no tensor twice"
    else
        bad "llama_model_init_from_user: $n_same equal; differ:$differ (see $out/iu-*)"
    fi
    llama="$fixtures/llama-dense.gguf"
    # the first fixture of an architecture ours does not build from metadata; with every
    # fixture's built, llama's metadata renamed to bert (upstream's, no graph of ours)
    refused=""; refused_as=""
    for f in "$fixtures"/*.gguf; do
        name="$(basename "$f" .gguf)"; arch="${name%-dense}"; arch="${arch%-moe}"
        grep -qx -- "$arch" <<<"$declared" || { refused="$f"; break; }
    done
    [ -n "$refused" ] || { refused="$llama"; refused_as=bert; }
    if theirs "$out/init_from_user" hostile "$llama" >"$out/iu-hostile-upstream.out" 2>/dev/null \
        && ours "$out/init_from_user" hostile "$llama" >"$out/iu-hostile-ours.out" 2>"$out/iu-hostile-ours.err" \
        && cmp -s "$out/iu-hostile-upstream.out" "$out/iu-hostile-ours.out" \
        && ours "$out/init_from_user" refuse "$llama" >"$out/iu-refuse.out" 2>"$out/iu-refuse.err" \
        && ours "$out/init_from_user" refuse-arch "$refused" $refused_as >>"$out/iu-refuse.out" 2>>"$out/iu-refuse.err" \
        && [ "$(grep -c 'llama_model_init_from_user: ' "$out/iu-refuse.err")" -ge 4 ] \
        && ! grep -q "callbacks [1-9]" "$out/iu-refuse.out"; then
        ok "llama_model_init_from_user hostile: unknown architecture, missing hyperparameter: NULL as upstream; NULL metadata / callback, a misfit override type, an undeclared architecture: NULL with a log line, no callback"
    else
        bad "llama_model_init_from_user hostile cases (see $out/iu-hostile-* $out/iu-refuse.*)"
    fi
else
    bad "building ffi-tests/dropin/init_from_user.c (see $out/init_from_user-build.log)"
fi

# llama-server (scripts/server_check.py) and llama-cli, single turn.
if python3 scripts/server_check.py "$tools/llama-server" "$out/lib" "$tools" "$model" "$newweights" "$out" \
    >"$out/server.log" 2>&1; then
    ok "llama-server on ours against upstream's:"; sed 's/^/     /' "$out/server.log"
else
    bad "llama-server:"; sed 's/^/     /' "$out/server.log" | tail -n 40
fi
cli_args=(-m "$model" -p "The capital of France is" -st -n 32 --temp 0 -t 2 -c 256 --seed 1)
if theirs "$tools/llama-cli" "${cli_args[@]}" -o "$out/cli-upstream.txt" </dev/null >"$out/cli-upstream.out" 2>&1 \
    && ours "$tools/llama-cli" "${cli_args[@]}" -o "$out/cli-ours.txt" </dev/null >"$out/cli-ours.out" 2>&1; then
    if [ -s "$out/cli-ours.txt" ] && cmp -s "$out/cli-upstream.txt" "$out/cli-ours.txt"; then
        ok "llama-cli -st (single turn, --output-file): the same conversation ($(tr '\n' ' ' <"$out/cli-ours.txt" | head -c 70)...)"
    else
        bad "llama-cli: outputs differ"; diff "$out/cli-upstream.txt" "$out/cli-ours.txt" | head || true
    fi
else
    bad "llama-cli failed: $(tail -n 5 "$out"/cli-*.out)"
fi

# A text of 4 chunks of 128 tokens (upstream's own README, from the cache: never committed).
text="$out/text.txt"
cat "$UPSTREAM_LLAMA/README.md" "$UPSTREAM_LLAMA/docs/build.md" >"$text"
ppl_args=(-m "$model" -f "$text" -c 128 --chunks 4 -t 2)
final_ppl() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1"; }
run2() { # NAME ARGS...: runs a program on both libraries, logs in $out/NAME-{ours,upstream}.*
    local name="$1"; shift
    theirs "$@" >"$out/$name-upstream.out" 2>"$out/$name-upstream.err" || { bad "$name on upstream's library failed: $(tail -n 3 "$out/$name-upstream.err")"; return 1; }
    ours "$@" >"$out/$name-ours.out" 2>"$out/$name-ours.err" || { bad "$name on ours failed (exit $?): $(tail -n 5 "$out/$name-ours.err")"; return 1; }
}

if run2 perplexity "$tools/llama-perplexity" "${ppl_args[@]}"; then
    a="$(final_ppl "$out/perplexity-upstream.err")"; b="$(final_ppl "$out/perplexity-ours.err")"
    if python3 -c "import sys; a,b=float('$a'),float('$b'); sys.exit(0 if abs(a-b) <= 1e-3*a else 1)" 2>/dev/null; then
        ok "llama-perplexity: final PPL ours $b, upstream $a (within 0.1%)"
    else
        bad "llama-perplexity: final PPL ours '$b', upstream '$a'"
    fi
fi

# KLD: base logits written by one side, read by the other.
kld_check() { # LOG WHAT
    local mean top
    mean="$(sed -n 's/^.*Mean    KLD: *\([-0-9.e+]*\).*/\1/p' "$1" | head -n 1)"
    top="$(sed -n 's/^.*Same top p: *\([0-9.]*\).*/\1/p' "$1" | head -n 1)"
    if python3 -c "import sys; sys.exit(0 if float('$mean') < 1e-3 and float('$top') >= 99 else 1)" 2>/dev/null; then
        ok "llama-perplexity KLD, $2: mean KLD $mean, same top $top%"
    else
        bad "llama-perplexity KLD, $2: mean KLD '$mean', same top '$top' (log $1)"
    fi
}
if theirs "$tools/llama-perplexity" "${ppl_args[@]}" --kl-divergence-base "$out/base-upstream.kld" >/dev/null 2>"$out/kld-base-upstream.err" \
    && ours "$tools/llama-perplexity" "${ppl_args[@]}" --kl-divergence-base "$out/base-ours.kld" >/dev/null 2>"$out/kld-base-ours.err"; then
    ours "$tools/llama-perplexity" "${ppl_args[@]}" --kl-divergence --kl-divergence-base "$out/base-upstream.kld" \
        >"$out/kld-ours-on-upstream.log" 2>&1 || true
    kld_check "$out/kld-ours-on-upstream.log" "ours against upstream's base file"
    theirs "$tools/llama-perplexity" "${ppl_args[@]}" --kl-divergence --kl-divergence-base "$out/base-ours.kld" \
        >"$out/kld-upstream-on-ours.log" 2>&1 || true
    kld_check "$out/kld-upstream-on-ours.log" "upstream against our base file"
else
    bad "llama-perplexity --kl-divergence-base failed: $(tail -n 3 "$out"/kld-base-*.err)"
fi

if run2 completion "$tools/llama-completion" -m "$model" -p "The capital of France is" -n 32 --temp 0 \
    -no-cnv -t 2 -c 256 --seed 1; then
    if cmp -s "$out/completion-upstream.out" "$out/completion-ours.out"; then
        ok "llama-completion greedy: the same text ($(wc -c <"$out/completion-ours.out") bytes: $(head -c 60 "$out/completion-ours.out" | tr '\n' ' ')...)"
    else
        bad "llama-completion greedy: texts differ"; diff "$out/completion-upstream.out" "$out/completion-ours.out" | head
    fi
fi

# llama_attach_threadpool: common's threadpools (libggml-cpu's, -t 2) are accepted; upstream's
# libggml-cpu exports no thread-count getter, so ours says it computes with the context's counts.
if [ -s "$out/completion-ours.err" ]; then
    if grep -q "llama_attach_threadpool: accepted, but the pool's thread count cannot be read" "$out/completion-ours.err" \
        && ! grep -q "llama_attach_threadpool: not supported" "$out/completion-ours.err"; then
        ok "llama_attach_threadpool: common's threadpools accepted (the context's thread counts; one log line)"
    else
        bad "llama_attach_threadpool: no 'accepted' line in $out/completion-ours.err"
    fi
fi

# llama_perf_context through common_perf_print: the same token and run counts as upstream,
# and times that were measured (a positive eval time).
perf_counts() { sed -n 's/.*common_perf_print: \(prompt eval\|       eval\) time = *\([0-9.]*\) ms \/ *\([0-9]*\) .*/\1:\3/p' "$1" | tr '\n' ' '; }
if [ -s "$out/completion-ours.err" ]; then
    a="$(perf_counts "$out/completion-upstream.err")"; b="$(perf_counts "$out/completion-ours.err")"
    t="$(sed -n 's/.*common_perf_print: *eval time = *\([0-9.]*\) ms.*/\1/p' "$out/completion-ours.err")"
    if [ -n "$b" ] && [ "$a" = "$b" ] && python3 -c "import sys; sys.exit(0 if float('$t') > 0 else 1)" 2>/dev/null; then
        ok "llama_perf_context (common_perf_print): counts as upstream's ($b), eval time $t ms"
    else
        bad "llama_perf_context: ours '$b' (eval time '$t'), upstream '$a'"
    fi
fi

if run2 tokenize "$tools/llama-tokenize" -m "$model" --ids --log-disable \
    -p "Drop-in check: ünïcödé, 12345, tabs	and  spaces, emoji 🦙 and <|im_start|> tags."; then
    if cmp -s "$out/tokenize-upstream.out" "$out/tokenize-ours.out"; then
        ok "llama-tokenize: the same ids $(tail -n 1 "$out/tokenize-ours.out" | head -c 80)..."
    else
        bad "llama-tokenize: ids differ"; diff "$out/tokenize-upstream.out" "$out/tokenize-ours.out" | head
    fi
fi

if ours "$tools/llama-bench" -m "$model" -p 16 -n 8 -r 1 -t 2 >"$out/bench-ours.out" 2>"$out/bench-ours.err" \
    && grep -q '| *pp16 |' "$out/bench-ours.out" && grep -q '| *tg8 |' "$out/bench-ours.out"; then
    ok "llama-bench prints its table:"; grep -E '^\|' "$out/bench-ours.out" | sed 's/^/     /'
else
    bad "llama-bench: $(tail -n 5 "$out/bench-ours.out" "$out/bench-ours.err")"
fi

if ours "$tools/llama-batched-bench" -m "$model" -c 512 -b 128 -ub 128 -npp 32 -ntg 8 -npl 1,2 -t 2 \
    >"$out/batched-ours.out" 2>"$out/batched-ours.err" \
    && [ "$(grep -cE '^\| +32 \| +8 \| +[12] \|' "$out/batched-ours.out")" = 2 ]; then
    ok "llama-batched-bench prints its table:"; grep -E '^\|' "$out/batched-ours.out" | sed 's/^/     /'
else
    bad "llama-batched-bench: $(tail -n 5 "$out/batched-ours.out" "$out/batched-ours.err")"
fi
# llama-imatrix collects its statistics through cb_eval (src/ffi/eval_callback.rs).
im_args=(-f "$text" -c 128 --chunks 4 -t 2)
if theirs "$tools/llama-imatrix" -m "$model" "${im_args[@]}" -o "$out/imatrix-upstream.gguf" >"$out/imatrix-upstream.log" 2>&1 \
    && ours "$tools/llama-imatrix" -m "$model" "${im_args[@]}" -o "$out/imatrix-ours.gguf" >"$out/imatrix-ours.log" 2>&1; then
    if cmp -s "$out/imatrix-upstream.gguf" "$out/imatrix-ours.gguf"; then
        ok "llama-imatrix (cb_eval): the same imatrix file, byte for byte ($(wc -c <"$out/imatrix-ours.gguf") bytes)"
    else
        bad "llama-imatrix: the imatrix files differ"
    fi
    fx="$(bash scripts/upstream-arch-fixtures.sh)/qwen3moe-moe.gguf"
    if theirs "$tools/llama-imatrix" -m "$fx" "${im_args[@]}" --chunks 2 -o "$out/imatrix-moe-upstream.gguf" >"$out/imatrix-moe-upstream.log" 2>&1 \
        && ours "$tools/llama-imatrix" -m "$fx" "${im_args[@]}" --chunks 2 -o "$out/imatrix-moe-ours.gguf" >"$out/imatrix-moe-ours.log" 2>&1 \
        && r="$("$VENV/bin/python" - "$out/imatrix-moe-upstream.gguf" "$out/imatrix-moe-ours.gguf" <<'PY'
import sys
import numpy as np
import gguf
a, b = ({t.name: np.array(t.data, dtype=np.float64) for t in gguf.GGUFReader(f).tensors} for f in sys.argv[1:3])
if set(a) != set(b):
    sys.exit(f"entries differ: {sorted(set(a) ^ set(b))[:4]}")
worst = 0.0
for name, x in a.items():
    y = b[name]
    if x.shape != y.shape or (name.endswith(".counts") and not np.array_equal(x, y)):
        sys.exit(f"{name}: shape or counts differ")
    if x.size:
        worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30))))
if worst > 1e-4:
    sys.exit(f"sums differ by {worst:.3g} relative")
print(f"{len(a)} entries, counts equal, sums within {worst:.2g} relative")
PY
)"; then
        ok "llama-imatrix on the qwen3moe fixture (MUL_MAT_ID): $r"
    else
        bad "llama-imatrix on the qwen3moe fixture: ${r:-a run failed (see $out/imatrix-moe-*.log)}"
    fi
    f16="$LLAMA_HOTSWAP_CACHE/models/engine/SmolLM2-135M-Instruct.F16.gguf"
    mkdir -p "$(dirname "$f16")"
    [ -s "$f16" ] || { theirs "$tools/llama-quantize" --allow-requantize "$model" "$f16.tmp" F16 >"$out/f16.log" 2>&1 \
        && mv "$f16.tmp" "$f16"; }
    # one imatrix path for both runs: llama-quantize records it in the model (quantize.imatrix.file)
    if cp "$out/imatrix-upstream.gguf" "$out/imatrix.gguf" \
        && theirs "$tools/llama-quantize" --imatrix "$out/imatrix.gguf" "$f16" "$out/q4km-upstream.gguf" Q4_K_M 2 >"$out/quantize-im-upstream.log" 2>&1 \
        && cp "$out/imatrix-ours.gguf" "$out/imatrix.gguf" \
        && ours "$tools/llama-quantize" --imatrix "$out/imatrix.gguf" "$f16" "$out/q4km-ours.gguf" Q4_K_M 2 >"$out/quantize-im-ours.log" 2>&1 \
        && cmp -s "$out/q4km-upstream.gguf" "$out/q4km-ours.gguf"; then
        ok "llama-quantize --imatrix Q4_K_M: our imatrix on ours gives upstream's file, byte for byte"
    else
        bad "llama-quantize --imatrix Q4_K_M: files differ or a run failed (see $out/quantize-im-*.log)"
    fi
else
    bad "llama-imatrix failed: $(tail -n 3 "$out"/imatrix-*.log)"
fi
exit "$status"
