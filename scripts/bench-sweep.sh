#!/usr/bin/env bash
# make bench-sweep: what one quantization-sweep round costs on the real SmolLM2 model split
# into one-tensor shards (the layout sweep users keep), with Q8_0 candidates of a few tensors
# in the GGUF-Tool-Suite layout (drop-in shards with the base's file names).
#   in-process round : `llama-hotswap-perplexity sweep`: swap in + evaluate PPL/KLD + swap
#                      back + hash check, from the rows' `seconds`; the evaluation alone is
#                      the rows' `eval_seconds` (same round, same process).
#   full-reload round: put the candidate's shard in place and run the tool on the model:
#                      ours (llama-hotswap-perplexity --kl-divergence) and upstream's
#                      llama-perplexity, interleaved, same base-logits file, wall time.
# Prints medians and the ratios; the goal is round / evaluation <= 1.1.
# Env: CTX (128), CHUNKS (2), THREADS (2), REPEAT (1 full-reload run per candidate per tool),
# UPSTREAM=native: upstream's llama-perplexity built for this CPU (scripts/build-upstream-native.sh)
# instead of the portable build. Also printed: the evaluation alone, ours (the rows'
# eval_seconds) against upstream's (its "seconds per pass" x chunks), issue 39's sweep ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
CTX="${CTX:-128}" CHUNKS="${CHUNKS:-2}" THREADS="${THREADS:-2}" REPEAT="${REPEAT:-1}"
model="$(bash scripts/fetch-models.sh)"
tools="$(bash scripts/build-upstream-tools.sh llama-perplexity llama-quantize)"
up_tools="$tools" up_kind=portable
if [ "${UPSTREAM:-}" = native ]; then up_tools="$(nice bash scripts/build-upstream-native.sh llama-perplexity)" up_kind=native; fi
cargo build --release --quiet --bin llama-hotswap-perplexity --example sweep_fixtures
ours="$PWD/target/release/llama-hotswap-perplexity"
fixtures="$PWD/target/release/examples/sweep_fixtures"

data="$LLAMA_HOTSWAP_CACHE/bench-sweep"
q8="$LLAMA_HOTSWAP_CACHE/models/engine/SmolLM2-135M-Instruct.Q8_0.gguf"
mkdir -p "$data" "$(dirname "$q8")"
[ -s "$q8" ] || { LD_LIBRARY_PATH="$tools" "$tools/llama-quantize" --allow-requantize "$model" "$q8.tmp" Q8_0 \
    >/dev/null 2>&1 && mv "$q8.tmp" "$q8"; }
shards=$("$fixtures" split "$model" "$data/shards/smol")
first=$(head -n1 <<<"$shards")
n_shards=$(wc -l <<<"$shards")
tensors=(blk.0.ffn_down.weight blk.10.attn_q.weight blk.20.ffn_up.weight)
rm -rf "$data/cand" && "$fixtures" candidates "$data/shards/smol" "$q8" "$data/cand/q8_0" "${tensors[@]}" >/dev/null
cat "$UPSTREAM_LLAMA/README.md" "$UPSTREAM_LLAMA/docs/build.md" >"$data/text.txt"

work="$PWD/target/bench-sweep"
rm -rf "$work" && mkdir -p "$work"
echo "bench-sweep: SmolLM2-135M Q4_1 in $n_shards one-tensor shards, ${#tensors[@]} Q8_0 candidates," \
     "-c $CTX --chunks $CHUNKS -t $THREADS, $(date -u +%F)"

# Base logits, computed once by our tool and read by every run below (ours and upstream's).
base="$work/base.kld"
"$ours" -m "$first" -f "$data/text.txt" --kl-divergence-base "$base" -c "$CTX" -b "$CTX" \
    --chunks "$CHUNKS" -t "$THREADS" >"$work/base.log" 2>&1 || { tail -n 30 "$work/base.log"; exit 1; }

# For each candidate, interleaved: (1) the in-process sweep round (a sweep of that one
# candidate: its row has the round's and the evaluation's seconds), (2) our tool on the
# model with the candidate's shard in place (full reload), (3) upstream's, the same way.
# The full-reload model is a directory of links to the base shards, one replaced.
full="$work/full"
mkdir -p "$full"
for s in $shards; do ln -sf "$s" "$full/$(basename "$s")"; done
now() { date +%s.%N; }
: >"$work/full.tsv"
: >"$work/inmem.tsv"
for r in $(seq "$REPEAT"); do
    for t in "${tensors[@]}"; do
        "$ours" sweep -m "$first" --candidates "$data/cand" --include "^${t//./\\.}\$" \
            --csv "$work/rounds.csv" --retry-failed --kl-divergence-base "$base" -c "$CTX" -b "$CTX" \
            --chunks "$CHUNKS" -t "$THREADS" --plain >"$work/sweep-$t-$r.log" 2>&1 \
            || { tail -n 30 "$work/sweep-$t-$r.log"; exit 1; }
        # the same tensor as an in-memory candidate (--quantize q8_0: converted from the base's
        # Q4_1 in the round, no file), right after the file round
        "$ours" sweep -m "$first" --quantize q8_0 --include "^${t//./\\.}\$" \
            --csv "$work/inmem-$t-$r.csv" --kl-divergence-base "$base" -c "$CTX" -b "$CTX" \
            --chunks "$CHUNKS" -t "$THREADS" --plain >"$work/inmem-$t-$r.log" 2>&1 \
            || { tail -n 30 "$work/inmem-$t-$r.log"; exit 1; }
        echo -e "$t\t$(tail -n1 "$work/rounds.csv" | awk -F, '{print $9}')\t$(tail -n1 "$work/inmem-$t-$r.csv" | awk -F, '{print $9}')" >>"$work/inmem.tsv"
        # the row was appended: the next repeat must run it again, so forget it
        cp "$work/rounds.csv" "$work/rounds-$t-$r.csv"
        head -n1 "$work/rounds.csv" >"$work/rounds.tmp" && mv "$work/rounds.tmp" "$work/rounds.csv"
        tail -n1 "$work/rounds-$t-$r.csv" >>"$work/all-rounds.csv"
        c=$(grep -m1 -F "$t," "$work/rounds-$t-$r.csv" | awk -F, '{print $14}')
        name=$(basename "$c")
        # the row names the file by its canonical path (older rows: relative to the directory)
        case "$c" in /*) ;; *) c="$data/cand/$c" ;; esac
        ln -sf "$c" "$full/$name"
        t0=$(now)
        "$ours" -m "$full/$(basename "$first")" --kl-divergence-base "$base" --kl-divergence \
            -c "$CTX" -b "$CTX" --chunks "$CHUNKS" -t "$THREADS" >"$work/ours-$t-$r.log" 2>&1
        t1=$(now)
        LD_LIBRARY_PATH="$up_tools" "$up_tools/llama-perplexity" -m "$full/$(basename "$first")" \
            --kl-divergence-base "$base" --kl-divergence -c "$CTX" -b "$CTX" --chunks "$CHUNKS" \
            -t "$THREADS" >"$work/upstream-$t-$r.log" 2>&1
        t2=$(now)
        ln -sf "$(dirname "$first")/$name" "$full/$name"
        echo -e "$t\t$(awk "BEGIN{print $t1 - $t0}")\t$(awk "BEGIN{print $t2 - $t1}")" >>"$work/full.tsv"
        load=$(grep -m1 -o 'tensors, [0-9]* bytes) in [0-9.]* s' "$work/sweep-$t-$r.log" | awk '{print $(NF-1)}')
        echo "  $t: in-process $(tail -n1 "$work/rounds-$t-$r.csv" | awk -F, '{printf "round %.3f s (evaluation %.3f s), KLD %s", $9, $10, $6}'); load $load s;" \
             "full reload: ours $(awk "BEGIN{printf \"%.3f\", $t1 - $t0}") s [$(grep -m1 -E '^Mean +KLD' "$work/ours-$t-$r.log" | tr -s ' ')]," \
             "upstream $(awk "BEGIN{printf \"%.3f\", $t2 - $t1}") s [$(grep -m1 -E '^Mean +KLD' "$work/upstream-$t-$r.log" | tr -s ' ')]"
    done
done
(head -n1 "$work/rounds.csv"; cat "$work/all-rounds.csv") >"$work/rounds.csv.all"

python3 - "$work/rounds.csv.all" "$work/full.tsv" "$work" "$work/inmem.tsv" "$up_kind" "$CHUNKS" <<'PY'
import csv, glob, re, statistics as st, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["status"] == "ok"]
if not rows:
    sys.exit("bench-sweep: no ok rows")
rnd = st.median(float(r["seconds"]) for r in rows)
ev = st.median(float(r["eval_seconds"]) for r in rows)
per = st.median(float(r["seconds"]) / float(r["eval_seconds"]) for r in rows)
full = [l.split("\t") for l in open(sys.argv[2]).read().splitlines()]
ours = st.median(float(f[1]) for f in full)
up = st.median(float(f[2]) for f in full)
swap_ms = st.median(1000 * (float(r["seconds"]) - float(r["eval_seconds"])) for r in rows)
loads = [float(m.group(1)) for f in glob.glob(sys.argv[3] + "/sweep-*.log")
         for m in [re.search(r"bytes\) in ([0-9.]+) s", open(f).read())] if m]
print(f"bench-sweep: in-process round {rnd:.3f} s, evaluation alone {ev:.3f} s: "
      f"round / evaluation = {rnd / ev:.3f} (median of per-round ratios {per:.4f}; goal <= 1.1); "
      f"swap in + back + hash check {swap_ms:.1f} ms")
if loads:
    print(f"bench-sweep: our load of the 272-shard model: median {st.median(loads):.2f} s")
print(f"bench-sweep: full-reload round: ours {ours:.3f} s, upstream ({sys.argv[5]}) llama-perplexity {up:.3f} s "
      f"(ours / upstream = {ours / up:.2f})")
print(f"bench-sweep: full-reload round / in-process round: ours {ours / rnd:.2f}x, upstream {up / rnd:.2f}x")
# the same evaluation in both, without either side's load: ours timed by the sweep rows
# (eval_seconds), upstream's from its "N seconds per pass" (its first pass, one chunk here since
# -b equals -c) times the chunks
up_eval = [float(m.group(1)) * int(sys.argv[6]) for f in glob.glob(sys.argv[3] + "/upstream-*.log")
           for m in [re.search(r"([0-9.]+) seconds per pass", open(f).read())] if m]
if up_eval:
    ue = st.median(up_eval)
    print(f"bench-sweep: evaluation alone: ours {ev:.3f} s, upstream ({sys.argv[5]}) {ue:.3f} s "
          f"(its seconds per pass x chunks): ours {ue / ev:.2f}x faster (issue 39: at least the pp ratio)")
mem = [l.split("\t") for l in open(sys.argv[4]).read().splitlines()]
if mem:
    ratio = st.median(float(m[2]) / float(m[1]) for m in mem)
    print(f"bench-sweep: in-memory Q8_0 round {st.median(float(m[2]) for m in mem):.3f} s vs the file "
          f"round {st.median(float(m[1]) for m in mem):.3f} s: median of per-round ratios {ratio:.3f} (goal <= 1.2)")
PY
echo "(the newest run of this benchmark goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
