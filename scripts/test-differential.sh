#!/usr/bin/env bash
# Differential test: one C probe, compiled once against upstream's llama.h, prints every
# model/vocab getter for a file; it runs against upstream's libllama.so and ours (switching
# LD_LIBRARY_PATH) over every fixture, plain, vocab-only and with a kv override. Outputs must
# be identical (the meta listing is compared sorted: upstream's order is its hash order).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
# Byte comparisons with upstream (state files, logits) run our exact mode, upstream's portable
# build bit for bit: fast mode's kernels (Q4_1 since dba95af) change the KV bytes.
export LLAMA_HOTSWAP_EXACT="${LLAMA_HOTSWAP_EXACT-1}"
bash scripts/build-upstream.sh >/dev/null
cargo build --release --lib --quiet
out=target/ffi-tests/differential
rm -rf "$out" && mkdir -p "$out/fixtures"
cc -std=c11 -O1 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/probe_model.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/probe_model"
cargo run --release --quiet --example diff_fixtures -- "$out/fixtures" > "$out/fixtures.txt"
ours="$PWD/target/release"
# the probes record the SONAME: give the loader libllama.so.0 (as test-common.sh does), so this
# part also runs alone, before any other part made the link
ln -sf libllama.so "$ours/libllama.so.0"
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
kl_close() { # A.f32 B.f32: raw rows of one vocabulary
    python3 - "$1" "$2" <<'PY'
import math, struct, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
if len(a) != len(b) or not a: sys.exit("sizes differ")
x, y = (struct.unpack("<%df" % (len(v) // 4), v) for v in (a, b))
def sm(v):
    m = max(v); e = [math.exp(t - m) for t in v]; s = sum(e); return [t / s for t in e]
p, q = sm(x), sm(y)
kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)
top = x.index(max(x)) == y.index(max(y))
print("kl %.3e top1 %s" % (kl, top))
sys.exit(0 if kl <= 1e-6 and top else 1)
PY
}
# The same round trips on upstream's random-weight gemma2 and gemma3 (sliding-window layers:
# upstream writes its two caches, full-attention then sliding-window), qwen2vl and qwen3vl
# (M-RoPE: each cell's record carries its 2D position and token), the hybrids qwen35,
# qwen35moe (M-RoPE attention beside gated delta-net states), qwen3next, lfm2moe and lfm2
# (short convolutions beside a sliding-window cache: upstream's hybrid-iswa memory, whose
# partial state is the window's cache and the states), minimax-m3 (upstream's indexer cache
# after the layers' one: the keys of its sparse layers, zero V rows, zero keys without flash
# attention, where its attention is dense), glm5-next and qwen4exp (upstream's hybrid memory
# with an indexer cache after the states: glm5-next's key | gate | pooled key per cell,
# qwen4exp's raw indexer keys; qwen4exp's PLE conv history as a second conv row, its n-gram
# predecessors read from the KV cells' tokens); there the engines' logits are not
# bit-identical, so a restored context's next logits are compared with the restoring
# library's own continuation (the restored bytes being equal).
state_specs=("smollm2:$model" "gemma3:$archs/gemma3-dense.gguf" "gemma2:$archs/gemma2-dense.gguf")
for a in qwen2vl-dense qwen3vl-dense qwen35-dense qwen35moe-moe qwen3next-moe lfm2moe-moe lfm2-dense minimax-m3-moe \
    glm5-next-moe qwen4exp-moe; do
    state_specs+=("${a%-*}:$archs/$a.gguf")
done
for spec in "${state_specs[@]}"; do
  tag="${spec%%:*}"; file="${spec#*:}"
  for fa in 0 1; do
    up="$st/$tag-up$fa"; our="$st/$tag-our$fa"
    mkdir -p "$up" "$our"
    state_check "$tag-save-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" save "$file" $fa "$up"
    state_check "$tag-save-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" save "$file" $fa "$our"
    same=(session.bin state.bin seq.bin partial.bin)
    [ "$tag" = smollm2 ] && same+=(next.f32)
    for f in "${same[@]}"; do
        state_check "$tag-same-bytes-$f-fa$fa" cmp "$up/$f" "$our/$f"
    done
    for kind in session state seq partial; do
        state_check "$tag-ours-loads-upstream-$kind-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" load "$file" $fa \
            "$up/$kind.bin" $kind "$st/$tag-ours-from-up-$kind-$fa.f32"
        same_logits=cmp
        # minimax-m3's sparse attention needs flash attention and one sequence per stream:
        # the sequence restore's context (two sequences, one stream) attends densely in both
        # libraries, so its next logits equal the saver's sparse ones within KL only
        [ "$tag/$fa/$kind" = minimax-m3/1/seq ] && same_logits=kl_close
        state_check "$tag-ours-loads-upstream-$kind-fa$fa-logits" $same_logits "$st/$tag-ours-from-up-$kind-$fa.f32" "$our/next.f32"
        state_check "$tag-upstream-loads-ours-$kind-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" load "$file" $fa \
            "$our/$kind.bin" $kind "$st/$tag-up-from-ours-$kind-$fa.f32"
        state_check "$tag-upstream-loads-ours-$kind-fa$fa-logits" $same_logits "$st/$tag-up-from-ours-$kind-$fa.f32" "$up/next.f32"
    done
    [ "$tag" = smollm2 ] || continue
    other="$archs/llama-dense.gguf"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" hostile "$file" $fa "$up" "$other" 0 > "$st/hostile-up$fa.txt" 2>/dev/null || true
    state_check "hostile-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" hostile "$file" $fa "$our" "$other" 1
    grep -v '^seq_file_truncated\|^memory unchanged' "$st/hostile-ours-fa$fa.log" | grep ' ret=\|n_tok=' > "$st/hostile-our$fa.txt" || true
    state_check "hostile-same-results-fa$fa" diff -u "$st/hostile-up$fa.txt" "$st/hostile-our$fa.txt"
  done
done

# The indexer caches and PLE history through later micro-batches (diff_state steps): after
# the prompt, batches of two tokens (one completing a pool of four cells, one completing none:
# upstream then pools the first token's cell with itself), then sequence 0 copied to 1 and two
# more tokens (cells shared by two sequences: upstream pools nothing); each whole state
# byte-identical to upstream's. glm5-next with flash attention on is left out: upstream's
# flash attention over the latent cache rounds those micro-batches' outputs differently in the
# last bits, which reach the delta-net states (its indexer cache stays byte-identical).
for spec in glm5-next-moe:0 qwen4exp-moe:0 qwen4exp-moe:1; do
    a="${spec%:*}"; fa="${spec#*:}"; tag="${a%-*}-steps"
    up="$st/$tag-up$fa"; our="$st/$tag-our$fa"
    mkdir -p "$up" "$our"
    state_check "$tag-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" steps "$archs/$a.gguf" $fa "$up"
    state_check "$tag-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" steps "$archs/$a.gguf" $fa "$our"
    for f in steps.bin shared.bin; do
        state_check "$tag-same-bytes-$f-fa$fa" cmp "$up/$f" "$our/$f"
    done
done

# DeepSeek's sparse attention: deepseek32, glm-dsa and hy_v4 (upstream's llama_kv_cache_dsa:
# the MLA cache, then the lightning indexer's keys on the layers that own an indexer) and
# dots3note (llama_kv_cache_dsa_iswa: that pair on the full-attention layers, then the
# sliding-window cache), on copies of the fixtures whose indexer keeps 4 cells (dots3note's
# window 4 too), so the restored indexer keys pick what the next token attends to (zeroed,
# they move its logits by a KL of ~1e-4). With flash attention on, the engines' floats differ
# in their last bits in places (a few cached values of deepseek32, glm-dsa and hy_v4, and of
# dots3note's later micro-batches), so the files are compared field by field
# (scripts/state_compare.py): every header, cell, layer, type and row size equal, each cached
# value within 2e-3 of its row's largest (two F16 steps); and byte for byte where the engines
# agree: every file without flash attention (prompt states and later micro-batches), and
# dots3note's prompt states with it. Our restore of our own files gives our continuation bit for bit (and a state whose
# indexer keys are zeroed must not: the keys matter); each library restores the
# other's files and its next logits equal those it gets from its own files within KL 1e-6
# (upstream's whole restore of dots3note does not give its own continuation bit for bit);
# later micro-batches and a sequence copy (diff_state steps) keep the layout; hostile states,
# also one cut where the MLA cache ends (no indexer cache), fail alike in both, ours with one
# log line and the memory as it was.
not() { ! "$@"; }
py="${VENV:-$LLAMA_HOTSWAP_CACHE/venv}/bin/python"
derived="$LLAMA_HOTSWAP_CACHE/models/engine/$(basename "$archs")-derived"
mkdir -p "$derived"
for spec in deepseek32:topk4 glm-dsa:topk4 hy_v4:topk4 dots3note:topk4-swa4; do
  a="${spec%%:*}"; t="$derived/$a-moe.${spec#*:}.gguf"; tag="$a-${spec#*:}"
  if [ ! -s "$t" ]; then
      setmeta="$("$py" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')/scripts/gguf_set_metadata.py"
      cp "$archs/$a-moe.gguf" "$t.tmp" \
          && "$py" "$setmeta" "$t.tmp" "$a.attention.indexer.top_k" 4 --force >/dev/null 2>&1 \
          && { [ "$a" != dots3note ] || "$py" "$setmeta" "$t.tmp" "$a.attention.sliding_window" 4 --force >/dev/null 2>&1; } \
          && mv "$t.tmp" "$t"
  fi
  if [ ! -s "$t" ]; then echo "FAIL state $tag: could not write $t"; failed=$((failed + 1)); continue; fi
  for fa in 0 1; do
    up="$st/$tag-up$fa"; our="$st/$tag-our$fa"
    mkdir -p "$up" "$our"
    state_check "$tag-save-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" save "$t" $fa "$up"
    state_check "$tag-save-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" save "$t" $fa "$our"
    # (where the engines agree bit for bit today: the same bytes, and nothing less)
    exact=0; [ "$fa" = 0 ] || [ "$a" = dots3note ] && exact=1
    for kind in session state seq partial; do
        tol=2e-3; [ $exact = 1 ] && tol=0
        state_check "$tag-same-layout-$kind-fa$fa" python3 scripts/state_compare.py $kind "$up/$kind.bin" "$our/$kind.bin" $tol
        [ $exact = 1 ] && state_check "$tag-same-bytes-$kind-fa$fa" cmp "$up/$kind.bin" "$our/$kind.bin"
        for lib in ours up; do
            dir="$our"; [ $lib = up ] && dir="$up"
            for from in ours up; do
                state_check "$tag-$lib-loads-$from-$kind-fa$fa" env LD_LIBRARY_PATH="$([ $lib = up ] && echo "$UPSTREAM_BUILD/bin" || echo "$ours")" \
                    "$out/diff_state" load "$t" $fa "$([ $from = up ] && echo "$up" || echo "$our")/$kind.bin" $kind "$st/$tag-$lib-from-$from-$kind-$fa.f32"
            done
            # each library's continuation is the same from either library's file
            state_check "$tag-$lib-same-from-either-$kind-fa$fa-logits" kl_close "$st/$tag-$lib-from-$lib-$kind-$fa.f32" "$st/$tag-$lib-from-$([ $lib = up ] && echo ours || echo up)-$kind-$fa.f32"
        done
        state_check "$tag-ours-loads-ours-$kind-fa$fa-logits" cmp "$st/$tag-ours-from-ours-$kind-$fa.f32" "$our/next.f32"
    done
    # (the indexer's keys restored as zeros: the next logits must move)
    state_check "$tag-zeroed-indexer-fa$fa" python3 scripts/state_compare.py zero state "$our/state.bin" 1 "$our/zeroed.bin"
    state_check "$tag-zeroed-indexer-load-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" load "$t" $fa "$our/zeroed.bin" state "$st/$tag-zeroed-$fa.f32"
    state_check "$tag-zeroed-indexer-moves-logits-fa$fa" not kl_close "$st/$tag-zeroed-$fa.f32" "$our/next.f32"
    state_check "$tag-steps-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" steps "$t" $fa "$up"
    state_check "$tag-steps-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" steps "$t" $fa "$our"
    for f in steps shared; do
        state_check "$tag-same-layout-$f-fa$fa" python3 scripts/state_compare.py state "$up/$f.bin" "$our/$f.bin" 2e-3
        [ "$fa" = 0 ] && state_check "$tag-same-bytes-$f-fa$fa" cmp "$up/$f.bin" "$our/$f.bin"
    done
    other="$archs/llama-dense.gguf"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" hostile "$t" $fa "$up" "$other" 0 1 > "$st/$tag-hostile-up$fa.txt" 2>/dev/null || true
    state_check "$tag-hostile-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" hostile "$t" $fa "$our" "$other" 1 1
    grep -v '^seq_file_truncated\|^memory unchanged' "$st/$tag-hostile-ours-fa$fa.log" | grep ' ret=\|n_tok=' > "$st/$tag-hostile-our$fa.txt" || true
    state_check "$tag-hostile-same-results-fa$fa" diff -u "$st/$tag-hostile-up$fa.txt" "$st/$tag-hostile-our$fa.txt"
  done
done

# Recurrent and hybrid memories (upstream's llama_memory_recurrent / _hybrid layout: the
# attention layers' KV cache, then per cell position and sequences, conv rows, SSM rows) on
# the fixtures of mamba2 (states only), falcon-h1, jamba and nemotron_h (hybrid): the files of both
# libraries have the same size (the engines' float states differ in their last bits, so the
# bytes do not); ours restores its own to its own next logits bit for bit; each library
# restores the other's, and the next logits are the saver's within KL 1e-6 and the same top
# token; the hostile states get upstream's return values (hybrids also: one error line each
# and the memory as it was).
for tag in mamba2 falcon-h1 jamba nemotron_h; do
  file="$archs/$tag-dense.gguf"
  for fa in 0 1; do
    up="$st/$tag-up$fa"; our="$st/$tag-our$fa"
    mkdir -p "$up" "$our"
    state_check "$tag-save-upstream-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" save "$file" $fa "$up"
    state_check "$tag-save-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" save "$file" $fa "$our"
    for f in session.bin state.bin seq.bin; do
        state_check "$tag-same-size-$f-fa$fa" test "$(wc -c <"$up/$f")" = "$(wc -c <"$our/$f")"
    done
    for kind in session state seq; do
        state_check "$tag-ours-loads-ours-$kind-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" load "$file" $fa \
            "$our/$kind.bin" $kind "$st/$tag-ours-from-ours-$kind-$fa.f32"
        state_check "$tag-ours-loads-ours-$kind-fa$fa-logits" cmp "$st/$tag-ours-from-ours-$kind-$fa.f32" "$our/next.f32"
        state_check "$tag-ours-loads-upstream-$kind-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" load "$file" $fa \
            "$up/$kind.bin" $kind "$st/$tag-ours-from-up-$kind-$fa.f32"
        state_check "$tag-ours-loads-upstream-$kind-fa$fa-logits" kl_close "$up/next.f32" "$st/$tag-ours-from-up-$kind-$fa.f32"
        state_check "$tag-upstream-loads-ours-$kind-fa$fa" env LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" load "$file" $fa \
            "$our/$kind.bin" $kind "$st/$tag-up-from-ours-$kind-$fa.f32"
        state_check "$tag-upstream-loads-ours-$kind-fa$fa-logits" kl_close "$our/next.f32" "$st/$tag-up-from-ours-$kind-$fa.f32"
    done
    other="$archs/llama-dense.gguf"
    LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" hostile "$file" $fa "$up" "$other" 0 > "$st/$tag-hostile-up$fa.txt" 2>/dev/null || true
    # (diff_state's strict checks patch KV-cache offsets: a hybrid's state starts with one)
    strict=1; [ "$tag" = mamba2 ] && strict=0
    state_check "$tag-hostile-ours-fa$fa" env LD_LIBRARY_PATH="$ours" "$out/diff_state" hostile "$file" $fa "$our" "$other" $strict
    grep -v '^seq_file_truncated\|^memory unchanged' "$st/$tag-hostile-ours-fa$fa.log" | grep ' ret=\|n_tok=' > "$st/$tag-hostile-our$fa.txt" || true
    state_check "$tag-hostile-same-results-fa$fa" diff -u "$st/$tag-hostile-up$fa.txt" "$st/$tag-hostile-our$fa.txt"
  done
done

echo "differential: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
