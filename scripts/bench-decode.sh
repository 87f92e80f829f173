#!/usr/bin/env bash
# make bench-decode: prompt processing (one batch of BENCH_PP=128 tokens) and token generation
# (BENCH_TG=64 single-token steps), tokens/s, ours vs upstream's library in the same run, a
# fresh process per measurement (ffi-tests/bench_decode.c, built against upstream's header),
# interleaved upstream / ours in fast mode (the default) / ours in exact mode
# (LLAMA_HOTSWAP_EXACT=1, upstream's portable build bit for bit), the order rotating each round,
# median of BENCH_REPS=5 (ratios: the median of the per-round ratios), at BENCH_THREADS="1 2"
# threads; peak RSS
# of each process; for tg the bandwidth the weights were read at (model bytes × tok/s) next to
# the machine's read bandwidth measured by the probe at the same thread count.
# Models (BENCH_MODELS, a subset of these names; default all):
#   smollm2-q4_1 smollm2-q4_0 smollm2-q8_0 smollm2-f16: SmolLM2-135M as shipped (Q4_1) and
#       requantized by upstream's llama-quantize (cached, as scripts/test-engine.sh makes them);
#   smollm2-q4_k_m smollm2-q6_k: the same, requantized to the K-quants (not in the default list);
#   1b-q4_0 1b-q8_0 1b-q4_k_m 1b-f16: a generated 1.07 B-parameter llama with random weights
#       (scripts/gen_bench_model.py, F16, written once into the cache) and its requantizations;
#   moe-q8_0 moe-q4_0 moe-q4_k_m: a generated qwen3moe-shaped model, 64 experts, 8 used
#       (gen_bench_model.py moe: ~0.6 GB F16) requantized (not in the default list).
# BENCH_REPS_1B, BENCH_PP_1B, BENCH_TG_1B override repetitions and token counts for the 1B rows
# (default: the same as the others; on a loaded 2-core machine one 1B run takes minutes).
# BENCH_CLOCK=cpu times pp and tg by the process's CPU time instead of the wall clock (meaningful
# at 1 thread on a shared machine: it leaves out the time other processes held the core).
# BENCH_OURS: a directory holding a copy of our libllama.so to time instead of the build's.
# BENCH_NO_MMAP=1 loads with load_mode NONE (owned memory) in both libraries.
# Writes the Markdown table to BENCH_OUT (default target/bench/bench-decode.md) and prints it.
# --smoke: one repetition, 8+8 tokens, 1 thread, SmolLM2 Q4_1 only, and fails unless both
# libraries give a positive figure in every column (the engine test part runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
smoke=0
[ "${1:-}" = --smoke ] && smoke=1
REPS=${BENCH_REPS:-5}
PP=${BENCH_PP:-128}
TG=${BENCH_TG:-64}
THREADS=${BENCH_THREADS:-1 2}
MODELS=${BENCH_MODELS:-smollm2-q4_1 smollm2-q4_0 smollm2-q8_0 smollm2-f16 1b-q4_0 1b-q8_0 1b-q4_k_m 1b-f16}
if [ "$smoke" = 1 ]; then REPS=1 PP=8 TG=8 THREADS=1 MODELS=smollm2-q4_1; fi
REPS_1B=${BENCH_REPS_1B:-$REPS}
PP_1B=${BENCH_PP_1B:-$PP}
TG_1B=${BENCH_TG_1B:-$TG}
out=${BENCH_WORK:-target/bench}
mkdir -p "$out"
table=${BENCH_OUT:-$out/bench-decode.md}

bash scripts/build-upstream.sh >/dev/null
[ -n "${LLAMA_HOTSWAP_BUILT:-}" ] || cargo build --release --lib --quiet
ln -sf libllama.so "${BENCH_OURS:-target/release}/libllama.so.0"
cc -std=c11 -O2 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/bench_decode.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -lpthread -ldl -o "$out/bench_decode"
ours="${BENCH_OURS:-$PWD/target/release}"
upstream="$UPSTREAM_BUILD/bin"

. scripts/bench-models.sh
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A bw bw_cpu
for t in $THREADS; do
    read -r wall oncpu < <(LD_LIBRARY_PATH="$upstream" "$out/bench_decode" --bandwidth "$t" $([ "$smoke" = 1 ] && echo 64 || echo 256))
    bw[$t]=$wall bw_cpu[$t]=$oncpu
done
{
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, $(nproc) cores, read bandwidth $(for t in $THREADS; do printf '%s GB/s wall-clock, %s GB/s on CPU (%s thread%s); ' "${bw[$t]}" "${bw_cpu[$t]}" "$t" "$([ "$t" = 1 ] || echo s)"; done)"
    echo "pp = one batch of $PP tokens, tg = $TG single-token steps; tok/s$([ "${BENCH_CLOCK:-}" = cpu ] && echo " by process CPU time"), median of $REPS (1B rows: pp $PP_1B, tg $TG_1B, median of $REPS_1B); ours = fast mode (the default), exact = LLAMA_HOTSWAP_EXACT=1; ratio = median over the rounds of ours / upstream within a round (each round runs all three, the order rotating; higher is better, lower for RSS); tg GB/s = model bytes × tg tok/s, machine = the wall-clock read bandwidth; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| model | type | threads | pp upstream | pp exact | pp ours | pp ratio | pp exact ratio | tg upstream | tg exact | tg ours | tg ratio | tg exact ratio | RSS upstream MiB | RSS ours MiB | RSS ratio | tg GB/s upstream / ours / machine |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} | tee "$table"
failed=0
for name in $MODELS; do
    file=$(model_path "$name") || { echo "| $name | (model could not be made) |" | tee -a "$table"; failed=1; continue; }
    reps=$REPS pp=$PP tg=$TG
    case "$name" in 1b-*) reps=$REPS_1B pp=$PP_1B tg=$TG_1B ;; esac
    for t in $THREADS; do
        : >"$out/up.txt"; : >"$out/us.txt"; : >"$out/ex.txt"
        for r in $(seq "$reps"); do
            # rotate who goes first, so an order effect (caches, clock) favours none
            case $((r % 3)) in 1) order="up us ex" ;; 2) order="us ex up" ;; *) order="ex up us" ;; esac
            for who in $order; do
                lib=$upstream; [ "$who" = up ] || lib=$ours
                exact=0; [ "$who" = ex ] && exact=1
                LLAMA_HOTSWAP_EXACT=$exact LD_LIBRARY_PATH="$lib" "$out/bench_decode" "$file" "$t" "$pp" "$tg" >>"$out/$who.txt" \
                    2>"$out/$who.err" || { echo "($who failed on $name: $(tail -1 "$out/$who.err"))" >&2; failed=1; }
            done
        done
        col() { cut -d' ' -f"$2" "$out/$1.txt" | median; }
        # ratio of a column within each round (line r of both files), median over the rounds:
        # pairing cancels the machine's drift between rounds, which medians taken apart do not
        ratio() { paste -d' ' "$out/${2:-us}.txt" "$out/up.txt" | awk -v c="$1" 'NF == 8 && $(c + 4) > 0 { print $c / $(c + 4) }' | median; }
        awk -v m="${name%%-*}" -v ty="${name#*-}" -v t="$t" \
            -v upp="$(col up 1)" -v opp="$(col us 1)" -v epp="$(col ex 1)" \
            -v utg="$(col up 2)" -v otg="$(col us 2)" -v etg="$(col ex 2)" \
            -v ubytes="$(col up 3)" -v obytes="$(col us 3)" -v urss="$(col up 4)" -v orss="$(col us 4)" \
            -v rpp="$(ratio 1)" -v rtg="$(ratio 2)" -v rrss="$(ratio 4)" \
            -v epp_r="$(ratio 1 ex)" -v etg_r="$(ratio 2 ex)" \
            -v bw="${bw[$t]}" 'BEGIN {
                m = (m == "1b") ? "llama-1B (random)" : (m == "moe") ? "qwen3moe 64×8 (random)" : "SmolLM2-135M"
                printf "| %s | %s | %s | %.1f | %.1f | %.1f | %.2f× | %.2f× | %.1f | %.1f | %.1f | %.2f× | %.2f× | %.0f | %.0f | %.2f× | %.1f / %.1f / %s |\n",
                    m, toupper(ty), t, upp, epp, opp, rpp, epp_r, utg, etg, otg, rtg, etg_r,
                    urss / 1024, orss / 1024, rrss, ubytes * utg / 1e9, obytes * otg / 1e9, bw
            }' | tee -a "$table"
        if [ "$smoke" = 1 ]; then
            for who in up us ex; do
                awk '{ exit !(NF == 4 && $1 > 0 && $2 > 0 && $3 > 0 && $4 > 0) }' "$out/$who.txt" \
                    || { echo "bench-decode smoke: $who gave no figures: $(cat "$out/$who.txt" "$out/$who.err")" >&2; failed=1; }
            done
        fi
    done
done
[ "$smoke" = 1 ] || echo "(table in $table; the newest run of this benchmark goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
[ "$failed" = 0 ]
