#!/usr/bin/env bash
# llama-hotswap-perplexity against upstream's llama-perplexity (the oracle), on SmolLM2-135M
# (Q4_1 as shipped; base F16 requantized by upstream's llama-quantize, cached by test-engine)
# over upstream's own docs (README + docs, generated in the work dir, never committed),
# chunks of 128 tokens, 4 chunks:
#  * PPL: our final estimate equal to upstream's as printed (Q4_1 over 4 chunks of 512; F16
#    over 4 of 128: the engines' logits are bit-identical), with 4 per-chunk estimates; the
#    same (1e-4) from one chunk per batch and two batches per chunk.
#  * KLD both ways: a base-logits file written by upstream (F16) and one written by ours:
#    headers and tokens byte-identical; each tool reading either file on Q4_1, and ours
#    against upstream on the same file, give the same printed statistics (mean KLD, top-1,
#    PPL(Q)/PPL(base)): our logits are bit-identical to upstream's (mean KLD 0.004641, top-1
#    98.016%, ratio 1.010905 from all four runs).
#    Ours reading its own F16 file on F16: KLD < 1e-4, top-1 100%, PPL(Q) = the PPL run's.
#  * Hostile input: unknown flag, missing model/text/base file, a text shorter than 2 chunks,
#    a file that is not base logits, a truncated one, one whose header undercounts its chunks,
#    /dev/zero as text or base file, contexts and thread counts that cannot be allocated
#    (issue 35): upstream's message or ours, exit status non-zero, never a panic or abort.
#  * -c 100 with the default -b: the batch clamped as upstream does, PPL equal to upstream's.
#  * ik_llama.cpp's flags in GGUF-Tool-Suite's template (-mla, -amb, --warmup-batch warned
#    about; -ctk/-ctv, -fa, --no-mmap honoured): PPL equal to upstream's with the same cache
#    types and flash attention setting; a tensor no graph reads logged in upstream's words.
#  * ik's loop mode on the model split one tensor per shard (upstream's llama-gguf-split):
#    a pre-reload script swaps a Q8_0 copy of one tensor in, then back, then nothing: three
#    evaluations, `reloaded tensor '<name>'` twice, the swapped round equal to a fresh load of
#    the swapped model, the restored round equal to the first.
#  * ik's signal-file mode (tests/perplexity/signal_driver.py): commands with sequence
#    numbers, stale/no-op/exit, statuses read back atomically.
. "$(dirname "$0")/test-common.sh"
out="$WORK/perplexity"
rm -rf "$out" && mkdir -p "$out"
log="$out/build.log"
cargo build --release --bin llama-hotswap-perplexity >"$log" 2>&1 || { tail -30 "$log"; fail "build failed"; }
tool="$ROOT/target/release/llama-hotswap-perplexity"
model="$(bash scripts/fetch-models.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-perplexity llama-quantize llama-gguf-split)"
models_dir="$LLAMA_HOTSWAP_CACHE/models/engine"
mkdir -p "$models_dir"
for t in F16 Q8_0; do
    f="$models_dir/SmolLM2-135M-Instruct.$t.gguf"
    [ -s "$f" ] || { LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$model" "$f.tmp" "$t" \
        >"$out/quantize-$t.log" 2>&1 && mv "$f.tmp" "$f"; } || fail "llama-quantize $t failed"
done
f16="$models_dir/SmolLM2-135M-Instruct.F16.gguf"
q80="$models_dir/SmolLM2-135M-Instruct.Q8_0.gguf"
text="$out/text.txt"
cat "$UPSTREAM_LLAMA/README.md" "$UPSTREAM_LLAMA/docs/build.md" "$UPSTREAM_LLAMA/tools/perplexity/README.md" \
    "$UPSTREAM_LLAMA/CONTRIBUTING.md" >"$text"
C=(-c 128 --chunks 4 -t 2)
up() { LD_LIBRARY_PATH="$tools" "$tools/llama-perplexity" "$@"; }
passed=0; failed=0
ok() { say "ok   $*"; passed=$((passed + 1)); }
bad() { say "FAIL $*"; failed=$((failed + 1)); }
# run NAME PROGRAM ARGS...: stdout+stderr to $out/NAME.log; non-zero status is a failure
run() {
    local name=$1; shift
    local rc=0
    "$@" >"$out/$name.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        bad "$name: exit status $rc (log $out/$name.log)"; tail -5 "$out/$name.log"; return 1
    fi
    if grep -q "panicked" "$out/$name.log"; then bad "$name: panicked"; return 1; fi
}
final_ppl() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$out/$1.log" | tail -1; }
stat() { # NAME LABEL: the first number after the line starting with LABEL
    awk -v l="$2" 'index($0, l) == 1 { sub(/^[^:]*: */, ""); print $1; exit }' "$out/$1.log"
}
within() { awk -v a="$1" -v b="$2" -v rel="$3" -v abs="${4:-0}" \
    'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= rel * m + abs) }'; }

# PERPLEXITY_ONLY="ppl kld hostile ik protocols" runs some sections (default: all)
want() { [ -z "${PERPLEXITY_ONLY:-}" ] || [[ " $PERPLEXITY_ONLY " == *" $1 "* ]]; }
# --- PPL: Q4_1 at upstream's default context (4 chunks of 512, decoded as 4 sequences side by
# side), and F16 at 128 (below, from the base-logits runs)
if want ppl && run ppl-up up -m "$model" -f "$text" -c 512 --chunks 4 -t 2 && run ppl-ours "$tool" -m "$model" -f "$text" -c 512 --chunks 4 -t 2; then
    u=$(final_ppl ppl-up); o=$(final_ppl ppl-ours)
    n=$(grep -o '\[[0-9]*\][0-9.]*,' "$out/ppl-ours.log" | wc -l)
    if within "$o" "$u" 0 && [ "$n" = 4 ]; then ok "ppl Q4_1: ours $o, upstream $u (4 chunks of 512)"
    else bad "ppl Q4_1: ours $o (estimates printed: $n), upstream $u (4 chunks of 512)"; fi
fi
# one chunk per batch (-b 128) and two batches per chunk (-b 64) give the same as 4 sequences
# side by side (the default -b 2048)
if want ppl && run ppl-ours-b128 "$tool" -m "$model" -f "$text" "${C[@]}" -b 128 && run ppl-ours-b64 "$tool" -m "$model" -f "$text" "${C[@]}" -b 64; then
    a=$(final_ppl ppl-ours-b128); b=$(final_ppl ppl-ours-b64)
    if [ -n "$a" ] && within "$b" "$a" 1e-4; then ok "ppl batching: -b 128 $a, -b 64 $b"; else bad "ppl batching: -b 128 $a, -b 64 $b"; fi
fi

# a context that does not divide the batch (issue 35, finding 9): upstream clamps the batch
# to n_seq x n_ctx (-c 100 -b 2048: 20 chunks side by side, batches of 2000) and runs
if want ppl && run ppl-up-c100 up -m "$model" -f "$text" -c 100 --chunks 4 -t 2 && run ppl-ours-c100 "$tool" -m "$model" -f "$text" -c 100 --chunks 4 -t 2; then
    u=$(final_ppl ppl-up-c100); o=$(final_ppl ppl-ours-c100)
    if [ -n "$u" ] && within "$o" "$u" 0; then ok "ppl -c 100 (batch clamped): ours $o, upstream $u"
    else bad "ppl -c 100 (batch clamped): ours $o, upstream $u"; fi
fi

# --- KLD both ways. The same reader on files written by either tool must agree (the file
# format), and our reader with upstream's on one file (the engines' logits are bit-identical):
# the printed statistics equal.
kld_report() { # NAME
    printf 'KLD %s, top-1 %s%%, PPL ratio %s' "$(stat "$1" 'Mean    KLD')" "$(stat "$1" 'Same top p')" \
        "$(stat "$1" 'Mean PPL(Q)/PPL(base)')"
}
kld_close() { # A B KLD_REL TOP_POINTS RATIO_REL
    within "$(stat "$1" 'Mean    KLD')" "$(stat "$2" 'Mean    KLD')" "$3" \
        && within "$(stat "$1" 'Same top p')" "$(stat "$2" 'Same top p')" 0 "$4" \
        && within "$(stat "$1" 'Mean PPL(Q)/PPL(base)')" "$(stat "$2" 'Mean PPL(Q)/PPL(base)')" "$5"
}
if want kld && run base-up up -m "$f16" -f "$text" "${C[@]}" --kl-divergence-base "$out/up.kld" \
    && run base-ours "$tool" -m "$f16" -f "$text" "${C[@]}" --kl-divergence-base "$out/ours.kld"; then
    u=$(final_ppl base-up); o=$(final_ppl base-ours)
    if within "$o" "$u" 0; then ok "ppl F16: ours $o, upstream $u (4 chunks of 128)"; else bad "ppl F16: ours $o, upstream $u"; fi
    hdr=$(( 20 + 4 * 128 * 4 ))
    if cmp -s <(head -c $hdr "$out/up.kld") <(head -c $hdr "$out/ours.kld") \
        && [ "$(wc -c <"$out/up.kld")" = "$(wc -c <"$out/ours.kld")" ]; then
        ok "base files: header and tokens identical, same size ($(wc -c <"$out/ours.kld") bytes)"
    else bad "base files differ in header/tokens or size"; fi
    for w in up ours; do
        run "kld-up-reads-$w" up -m "$model" "${C[@]}" --kl-divergence-base "$out/$w.kld" --kl-divergence || continue
        run "kld-ours-reads-$w" "$tool" -m "$model" "${C[@]}" --kl-divergence-base "$out/$w.kld" --kl-divergence || continue
        if kld_close "kld-ours-reads-$w" "kld-up-reads-$w" 0 0 0; then
            ok "kld, base written by $w: ours $(kld_report "kld-ours-reads-$w"); upstream $(kld_report "kld-up-reads-$w")"
        else
            bad "kld, base written by $w: ours $(kld_report "kld-ours-reads-$w"); upstream $(kld_report "kld-up-reads-$w") (must be equal)"
        fi
    done
    for r in up ours; do
        [ -s "$out/kld-$r-reads-up.log" ] && [ -s "$out/kld-$r-reads-ours.log" ] || continue
        if kld_close "kld-$r-reads-ours" "kld-$r-reads-up" 0 0 0; then
            ok "kld, $r reading either file: $(kld_report "kld-$r-reads-ours") / $(kld_report "kld-$r-reads-up")"
        else
            bad "kld, $r reading either file: $(kld_report "kld-$r-reads-ours") / $(kld_report "kld-$r-reads-up") (must be equal)"
        fi
    done
    if run kld-self "$tool" -m "$f16" "${C[@]}" --kl-divergence-base "$out/ours.kld" --kl-divergence; then
        k=$(stat kld-self 'Mean    KLD'); t=$(stat kld-self 'Same top p'); q=$(stat kld-self 'Mean PPL(Q)  ')
        if within "$k" 0 0 1e-4 && [ "$t" = 100.000 ] && within "$q" "$o" 1e-4; then ok "kld of our F16 base on F16: $k, top-1 $t%, PPL(Q) $q"
        else bad "kld of our F16 base on F16: $k, top-1 $t%, PPL(Q) $q (PPL run: $o)"; fi
    fi
fi

# --- hostile input: non-zero status, the expected message, no panic
hostile() { # NAME MESSAGE ARGS...
    want hostile || return 0
    local name=$1 msg=$2; shift 2
    if "$tool" "$@" >"$out/hostile-$name.log" 2>&1; then bad "hostile $name: exit status 0"; return; fi
    if grep -q panicked "$out/hostile-$name.log"; then bad "hostile $name: panicked"; return; fi
    if ! grep -qF -- "$msg" "$out/hostile-$name.log"; then bad "hostile $name: no '$msg' in $(head -c 300 "$out/hostile-$name.log")"; return; fi
    ok "hostile $name: $msg"
}
head -c 400 "$text" >"$out/short.txt"
python3 -c "import struct,sys; sys.stdout.buffer.write(b'_logits_' + struct.pack('<iii', 128, 49152, 4) + bytes(4 * 128 * 4 + 1000))" >"$out/truncated.kld"
hostile flag "error: invalid argument: --bogus" --bogus
hostile value "expected value for argument" -m "$model" -c
hostile number "invalid integer" -m "$model" -c x12
hostile model "unable to load model" -m "$out/missing.gguf" -f "$text"
hostile text "failed to open file" -m "$model" -f "$out/missing.txt"
hostile short "you need at least 256 tokens" -m "$model" -f "$out/short.txt" -c 128
# a base file whose header undercounts its chunks (issue 35, finding 6): refused by its size
python3 -c "import struct,sys; sys.stdout.buffer.write(b'_logits_' + struct.pack('<iii', 128, 49152, 1) + bytes(4 * 128 * 4))" >"$out/undercount.kld"
hostile undercount "truncated, or not a base-logits file" -m "$model" -c 128 --kl-divergence-base "$out/undercount.kld" --kl-divergence
# devices and endless input (issue 35, finding 7): a bounded read, a clear refusal
hostile dev-zero-text "not a text to evaluate" -m "$model" -f /dev/zero
hostile dev-zero-base "not a regular file" -m "$model" --kl-divergence-base /dev/zero --kl-divergence
# contexts the library cannot allocate, threads it cannot start (issue 35, finding 8): the
# library fails context creation with its log line; the host exits cleanly
hostile huge-ctx "failed to create context" -m "$model" -f "$text" -c 20000000
hostile max-ctx "failed to create context" -m "$model" -f "$text" -c 2147483647
hostile threads "failed to create context" -m "$model" -f "$text" -c 128 -t 99999
hostile not-base "does not look like a file containing log-probabilities" -m "$model" --kl-divergence-base "$text" --kl-divergence
hostile truncated "truncated, or not a base-logits file" -m "$model" -c 128 --kl-divergence-base "$out/truncated.kld" --kl-divergence
hostile no-base "you must provide a name of a file" -m "$model" --kl-divergence

# --- the flags of ik_llama.cpp's llama-perplexity that GGUF-Tool-Suite's template passes
# (issue 36): KV cache types and flash attention as upstream computes them (PPL equal to
# upstream's with the same flags), ik's -mla/-amb/--warmup-batch accepted with a warning,
# --no-mmap honoured (the weights in an owned buffer: upstream's "CPU model buffer" line)
ik_row() { # NAME "UPSTREAM ARGS" "OUR EXTRA ARGS"
    want ik || return 0
    local name=$1 uargs=$2 oargs=$3
    # shellcheck disable=SC2086
    if run "ik-$name-up" up -m "$model" -f "$text" "${C[@]}" $uargs && run "ik-$name-ours" "$tool" -m "$model" -f "$text" "${C[@]}" $uargs $oargs; then
        local u o; u=$(final_ppl "ik-$name-up"); o=$(final_ppl "ik-$name-ours")
        if [ -n "$u" ] && within "$o" "$u" 0; then ok "flags $uargs $oargs: PPL ours $o, upstream $u"
        else bad "flags $uargs $oargs: PPL ours $o, upstream $u"; fi
    else bad "flags $uargs $oargs: a run failed (see $out/ik-$name-*.log)"; fi
}
ik_row template "-fa on -ctk f16 -b 512 -ub 512 --threads 2" "-mla 3 -amb 1024 -ngl 99 -ot exps=CPU --warmup-batch --no-mmap --main-gpu 0 --seed 1337"
ik_row q8-cache "-ctk q8_0 -ctv q8_0" ""
ik_row q4-v "-ctv q4_0" ""
ik_row fa-off "-fa off" ""
if want ik; then
    if grep -q "CPU model buffer size" "$out/ik-template-ours.log" && ! grep -q "CPU_Mapped" "$out/ik-template-ours.log" \
        && grep -q "warning: -mla is ignored" "$out/ik-template-ours.log"; then
        ok "--no-mmap: an owned CPU buffer, no mapping; -mla warned about"
    else bad "--no-mmap: $(grep -m2 "model buffer size\|warning" "$out/ik-template-ours.log" | tr '\n' ' ')"; fi
fi
hostile cache-type "Unsupported cache type: q3_K" -m "$model" -f "$text" -ctk q3_K
hostile fa-value "unknown value for --flash-attn: 'maybe'" -m "$model" -f "$text" -fa maybe
# a tensor the graph never reads (a NextN layer's, say): upstream's "model has unused tensor"
# line, once, with its size (the sweep script reads it), and the PPL of the model without it
if want ik; then
    extra="$LLAMA_HOTSWAP_CACHE/models/perplexity-extra-tensor.gguf"
    [ -s "$extra" ] || { "$VENV/bin/python" scripts/gguf_edit_tensor.py "$model" "$extra.tmp" extra blk.0.ffn_down.weight blk.30.nextn.eh_proj.weight \
        >"$out/extra.log" 2>&1 && mv "$extra.tmp" "$extra"; }
    if run extra-ours "$tool" -m "$extra" -f "$text" "${C[@]}" && run extra-plain "$tool" -m "$model" -f "$text" "${C[@]}"; then
        n=$(grep -c "model has unused tensor blk.30.nextn.eh_proj.weight (size = [0-9]* bytes) -- ignoring" "$out/extra-ours.log" || true)
        others=$(grep -c "model has unused tensor" "$out/extra-plain.log" || true)
        o=$(final_ppl extra-ours); p0=$(final_ppl extra-plain)
        if [ "$n" = 1 ] && [ "$others" = 0 ] && within "$o" "$p0" 0; then
            ok "unused tensor: logged once in upstream's words, none for the plain model, PPL $o = $p0"
        else bad "unused tensor: logged $n times (plain model: $others), PPL $o vs $p0"; fi
    else bad "unused tensor: a run failed (see $out/extra-*.log)"; fi
fi

# --- ik's loop mode on one-tensor shards
split="$LLAMA_HOTSWAP_CACHE/models/perplexity-split"
if [ ! -s "$split/q4_1/q41-00002-of-00272.gguf" ] || [ ! -s "$split/q8_0/q80-00002-of-00272.gguf" ]; then
    rm -rf "$split" && mkdir -p "$split/q4_1" "$split/q8_0"
    LD_LIBRARY_PATH="$tools" "$tools/llama-gguf-split" --split --split-max-tensors 1 "$model" "$split/q4_1/q41" >"$out/split.log" 2>&1 \
        && LD_LIBRARY_PATH="$tools" "$tools/llama-gguf-split" --split --split-max-tensors 1 "$q80" "$split/q8_0/q80" >>"$out/split.log" 2>&1 \
        || fail "llama-gguf-split failed (see $out/split.log)"
fi
n=$(ls "$split/q4_1" | wc -l)
shard_no=$(printf '%05d' 4)   # the shard of the 4th tensor
tensor=$("$VENV/bin/python" -c "import gguf,sys; print(gguf.GGUFReader(sys.argv[1]).tensors[0].name)" \
    "$split/q4_1/q41-$shard_no-of-$(printf '%05d' "$n").gguf")
work="$out/shards"
mkdir -p "$work"
cp "$split/q4_1/"*.gguf "$work/"
first="$work/q41-00001-of-$(printf '%05d' "$n").gguf"
shard="$work/q41-$shard_no-of-$(printf '%05d' "$n").gguf"
# the Q8_0 shard holding the same tensor (llama-quantize orders tensors its own way)
cand=$("$VENV/bin/python" -c "
import gguf, glob, sys
for p in sorted(glob.glob(sys.argv[1] + '/*.gguf')):
    if gguf.GGUFReader(p).tensors[0].name == sys.argv[2]:
        print(p)
" "$split/q8_0" "$tensor")
[ -s "$cand" ] || fail "no Q8_0 shard holds $tensor"
# numbered as the shard it replaces (split.no), as a sweep's candidate shards are, so that a
# fresh load of the swapped set accepts it too
python3 -c "
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
k = b.index(b'split.no') + len('split.no')
assert struct.unpack_from('<I', b, k)[0] == 2  # GGUF_TYPE_UINT16
struct.pack_into('<H', b, k + 4, int(sys.argv[2]) - 1)
open(sys.argv[3], 'wb').write(b)
" "$cand" "$((10#$shard_no))" "$out/candidate.gguf" || fail "cannot renumber the candidate shard"
cand="$out/candidate.gguf"
one=(-c 128 --chunks 1 -t 2)
fresh=
if want protocols && run loop env LLAMA_HOTSWAP_ENABLED=1 \
    LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT="bash $ROOT/tests/perplexity/swap_round.sh $out/round $shard $cand" \
    "$tool" -m "$first" -f "$text" "${one[@]}"; then
    mapfile -t p < <(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$out/loop.log")
    reloaded=$(grep -c "^reloaded tensor '$tensor'$" "$out/loop.log" || true)
    others=$(grep "^reloaded tensor" "$out/loop.log" | grep -vc "'$tensor'" || true)
    cp "$cand" "$work/swapped.gguf" && ln -f "$shard" "$work/orig.gguf" && mv -f "$work/swapped.gguf" "$shard"
    run loop-fresh "$tool" -m "$first" -f "$text" "${one[@]}"
    mv -f "$work/orig.gguf" "$shard"
    fresh=$(final_ppl loop-fresh)
    if [ "${#p[@]}" = 3 ] && [ "$reloaded" = 2 ] && [ "$others" = 0 ] && [ "${p[0]}" = "${p[2]}" ] \
        && [ "${p[1]}" != "${p[0]}" ] && [ "${p[1]}" = "$fresh" ] && grep -q "\[pre-reload\] round 3" "$out/loop.log"; then
        ok "loop mode: PPL ${p[*]} ($tensor Q4_1 -> Q8_0 -> Q4_1; fresh load of the swapped model $fresh), 'reloaded tensor' x2"
    else
        bad "loop mode: PPL ${p[*]} (fresh swapped $fresh), '$tensor' reloaded $reloaded times, others $others"
    fi
fi

# --- ik's signal-file mode
if ! want protocols; then :
elif s=$("$VENV/bin/python" tests/perplexity/signal_driver.py "$tool" "$first" "$shard" "$cand" "$text" "$out/signal.log" 2>&1); then
    read -r s1 s2 s3 <<<"$s"
    r=$(grep -c "^reloaded tensor '$tensor'$" "$out/signal.log" || true)
    if [ "$s1" = "$s3" ] && [ "$s2" = "$fresh" ] && [ "$r" = 2 ]; then
        ok "signal mode: PPL $s1 $s2 $s3, statuses as commanded, stale command ignored"
    else bad "signal mode: PPL $s1 $s2 $s3 (expected $s2 = $fresh, first = last), reloaded $r times"; fi
else
    bad "signal mode: $s"
fi

say "perplexity: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
