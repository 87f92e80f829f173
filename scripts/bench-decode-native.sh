#!/usr/bin/env bash
# make bench-decode-native (issue 39's benchmark; benchmark only, never part of make test):
# prompt processing and token generation, tok/s, by llama-bench, against the fastest builds a
# user of this CPU would run:
#   native : upstream (the pinned sources of the cache) built for the host CPU, GGML_NATIVE=ON,
#            AMX off (scripts/build-upstream-native.sh), its llama-bench on its own libllama;
#   fast   : the same llama-bench binary with OUR libllama.so first on LD_LIBRARY_PATH (the
#            drop-in layout of docs/dropin.md: upstream's libggml* beside ours), default mode;
#   exact  : the same, LLAMA_HOTSWAP_EXACT=1 (upstream's portable build bit for bit);
#   ik     : ik_llama.cpp's llama-bench at its pinned commit, built natively into the cache
#            (scripts/build-ik-llama.sh; sources from IK_LLAMA_GIT_DIR, a local git directory
#            of ik_llama.cpp); skipped with one line when there is none.
# Each llama-bench runs with its own defaults (upstream: -fa auto; ik: -fa 1 -fmoe 1, no -rtr)
# and -r 1 after its warm-up; a round runs every runner once per model, the order rotating;
# ratios are the median over the rounds of the within-round ratios (pairing cancels the shared
# machine's drift), the tok/s columns each runner's own median.
# Knobs (environment):
#   BENCH_MODELS   names of scripts/bench-models.sh (default: SmolLM2 Q4_0 Q4_1 Q8_0 F16 BF16
#                  Q4_K_M IQ4_XS, llama-1B Q8_0, qwen3moe Q8_0 and Q4_K_M)
#   BENCH_REPS     rounds (3)            BENCH_THREADS  thread counts ("1 2")
#   BENCH_PP       prompt sizes ("128 512")   BENCH_TG  generated tokens (64)
#   BENCH_PP_1B, BENCH_TG_1B, BENCH_REPS_1B   the same for the llama-1B rows (1B runs are slow)
#   BENCH_RUNNERS  a subset of "native fast exact ik"   BENCH_IK_ARGS  extra ik llama-bench args
#   BENCH_OURS     a directory holding the libllama.so to time (default target/release)
#   BENCH_OUT      the Markdown table (default target/bench/bench-decode-native.md)
# tg rows give the bandwidth the weights were read at (model bytes × tok/s) against the
# machine's read bandwidth measured at the same thread count (ffi-tests/bench_decode.c).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
REPS=${BENCH_REPS:-3}
THREADS=${BENCH_THREADS:-1 2}
PP=${BENCH_PP:-128 512}
TG=${BENCH_TG:-64}
PP_1B=${BENCH_PP_1B:-$PP}
TG_1B=${BENCH_TG_1B:-$TG}
REPS_1B=${BENCH_REPS_1B:-$REPS}
RUNNERS=${BENCH_RUNNERS:-native fast exact ik}
MODELS=${BENCH_MODELS:-smollm2-q4_0 smollm2-q4_1 smollm2-q8_0 smollm2-f16 smollm2-bf16 smollm2-q4_k_m smollm2-iq4_xs 1b-q8_0 moe-q8_0 moe-q4_k_m}
out=${BENCH_WORK:-target/bench}/native
mkdir -p "$out"
table=${BENCH_OUT:-target/bench/bench-decode-native.md}
comma() { echo "$*" | tr ' ' ','; }

native="$(nice bash scripts/build-upstream-native.sh llama-bench)"
ik=""
if [[ " $RUNNERS " == *" ik "* ]]; then
    if ik="$(nice bash scripts/build-ik-llama.sh llama-bench 2>"$out/ik-build.err")"; then :; else
        echo "bench-decode-native: ik_llama.cpp skipped: $(tail -1 "$out/ik-build.err")"
        RUNNERS=$(echo "$RUNNERS" | sed 's/\bik\b//'); ik=""
    fi
fi
[ -n "${LLAMA_HOTSWAP_BUILT:-}" ] || [ -n "${BENCH_OURS:-}" ] || cargo build --release --lib --quiet
ours_so="${BENCH_OURS:-$PWD/target/release}/libllama.so"
# the drop-in layout: ours as libllama.so.0, the native build's other libraries beside it
lib="$out/ours-lib"
rm -rf "$lib" && mkdir -p "$lib"
cp "$ours_so" "$lib/libllama.so.0"
for f in "$native"/libggml*.so* "$native"/libllama-common.so* "$native"/*-impl.so; do
    [ -e "$f" ] && ln -s "$f" "$lib/"
done
# (ldd's whole output first: grep -q would stop reading early and fail the pipe under pipefail)
resolved=$(LD_LIBRARY_PATH="$lib" ldd "$native/llama-bench")
grep "libllama.so.0 => $lib/" <<<"$resolved" >/dev/null \
    || { echo "bench-decode-native: llama-bench does not resolve libllama.so.0 to ours" >&2; exit 1; }

# the machine's read bandwidth at each thread count (the probe links upstream's portable library)
up_portable="$(bash scripts/build-upstream.sh)"
cc -std=c11 -O2 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/bench_decode.c \
    -L"$up_portable" -lllama -lpthread -ldl -o "$out/bench_decode"
declare -A bw
for t in $THREADS; do
    bw[$t]=$(LD_LIBRARY_PATH="$up_portable" "$out/bench_decode" --bandwidth "$t" 256 | cut -d' ' -f1)
done

. scripts/bench-models.sh
run() { # WHO MODEL_FILE PP TG -> llama-bench CSV on stdout
    local who=$1 file=$2 pp=$3 tg=$4
    # the process's peak RSS (KiB) into $out/$who.rss when GNU time is there
    local timer=()
    [ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o "$out/$who.rss")
    case "$who" in
        native) LD_LIBRARY_PATH="$native" "${timer[@]}" "$native/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$(comma $THREADS)" -r 1 -o csv ;;
        fast) LLAMA_HOTSWAP_EXACT=0 LD_LIBRARY_PATH="$lib" "${timer[@]}" "$native/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$(comma $THREADS)" -r 1 -o csv ;;
        exact) LLAMA_HOTSWAP_EXACT=1 LD_LIBRARY_PATH="$lib" "${timer[@]}" "$native/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$(comma $THREADS)" -r 1 -o csv ;;
        ik) LD_LIBRARY_PATH="$ik:$(dirname "$ik")/src:$(dirname "$ik")/ggml/src" "${timer[@]}" "$ik/llama-bench" -m "$file" -p "$pp" -n "$tg" -t "$(comma $THREADS)" -r 1 -o csv ${BENCH_IK_ARGS:-} ;;
    esac
}

results="$out/results.tsv"   # round who model threads test tok/s model_bytes
rss="$out/rss.tsv"           # round who model peak_rss_kib (one llama-bench process: every test)
: >"$results"
: >"$rss"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
failed=0
for name in $MODELS; do
    file=$(model_path "$name") || { echo "bench-decode-native: $name could not be made" >&2; failed=1; continue; }
    reps=$REPS pp=$PP tg=$TG
    case "$name" in 1b-*) reps=$REPS_1B pp=$PP_1B tg=$TG_1B ;; esac
    read -ra who_list <<<"$RUNNERS"
    n=${#who_list[@]}
    for r in $(seq "$reps"); do
        # rotate who goes first, so an order effect (caches, clock, load) favours none
        for i in $(seq 0 $((n - 1))); do
            who=${who_list[$(((i + r - 1) % n))]}
            if run "$who" "$file" "$(comma $pp)" "$tg" >"$out/$who.csv" 2>"$out/$who.err"; then
                python3 - "$out/$who.csv" "$r" "$who" "$name" >>"$results" <<'PY'
import csv, sys
path, rnd, who, name = sys.argv[1:5]
for row in csv.DictReader(l for l in open(path) if l.strip()):
    n_prompt, n_gen = int(row["n_prompt"]), int(row["n_gen"])
    test = f"pp{n_prompt}" if n_gen == 0 else f"tg{n_gen}"
    print(rnd, who, name, row["n_threads"], test, row["avg_ts"], row["model_size"], sep="\t")
PY
                [ -s "$out/$who.rss" ] && printf '%s\t%s\t%s\t%s\n' "$r" "$who" "$name" "$(tail -1 "$out/$who.rss")" >>"$rss"
                rm -f "$out/$who.rss"
            else
                echo "bench-decode-native: $who failed on $name: $(tail -2 "$out/$who.err" | tr '\n' ' ')" >&2; failed=1
            fi
        done
        echo "bench-decode-native: $name round $r/$reps done $(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src 2>/dev/null || echo '+changes')"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx|sse4_2|bmi2|vnni|avx512)' | sort -u | tr '\n' ' ')
bwline=$(for t in $THREADS; do printf '%s GB/s at %s thread%s; ' "${bw[$t]}" "$t" "$([ "$t" = 1 ] || echo s)"; done)
python3 - "$results" "$RUNNERS" "$THREADS" "$bwline" "$rss" <<PY | tee "$table"
import collections, statistics as st, sys
results, runners, threads, bwline, rss_file = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5]
bw = {t: float(x.split()[0]) for t, x in zip(threads, bwline.strip("; ").split("; "))}
ts = collections.defaultdict(dict)    # (model, threads, test) -> {(who, round): tok/s}
size = {}
for line in open(results):
    rnd, who, name, t, test, v, b = line.rstrip("\n").split("\t")
    ts[(name, t, test)][(who, rnd)] = float(v)
    size[name] = int(b)
def med(xs): return st.median(xs) if xs else None
def ratio(d, a, b):
    rounds = {r for (w, r) in d}
    return med([d[(a, r)] / d[(b, r)] for r in rounds if (a, r) in d and (b, r) in d and d[(b, r)] > 0])
def f(x, fmt): return "—" if x is None else fmt.format(x)
label = {"smollm2": "SmolLM2-135M", "1b": "llama-1B (random)", "moe": "qwen3moe 64×8 (random)"}
print("$started – $(date -u '+%H:%M UTC'), ours = library of $commit, $cpu, $(nproc) cores, flags: $flags")
ik_line = "ik_llama.cpp ${IK_LLAMA_COMMIT:-8337e4cd3861406fc04e0854b1409cd1b027fbc9}" if "ik" in runners else "ik_llama.cpp not run"
print(f"upstream 0c1e57098bba, its CPU backend built for this CPU ($(sed 's/ -O3.*-march=native/ … -march=native/' "$LLAMA_HOTSWAP_CACHE/upstream-native-$UPSTREAM_VERSION/cpu-flags.txt" 2>/dev/null)); {ik_line}; read bandwidth {bwline.strip('; ')}; "
      f"load average at the start $load_start, at the end $load_end; llama-bench -r 1 per round, $REPS rounds (1B: $REPS_1B), each runner's own defaults; "
      "ratio = median of per-round ratios; goals: pp fast ≥ 1.5× native and ≥ 1.0× ik, tg fast ≥ 1.0× both")
print()
cols = [w for w in ["native", "fast", "exact", "ik"] if w in runners]
head = ["model", "type", "threads", "test"] + [f"{w} tok/s" for w in cols]
rat = [("fast", "native"), ("exact", "native"), ("fast", "ik"), ("ik", "native")]
rat = [(a, b) for a, b in rat if a in cols and b in cols]
head += [f"{a} / {b}" for a, b in rat] + ["goal", "note"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
order = {"pp": 0, "tg": 1}
keys = sorted(ts, key=lambda k: (list(dict.fromkeys(n for n, _, _ in ts)).index(k[0]), int(k[1]), order[k[2][:2]], int(k[2][2:])))
one_thread = {}
for name, t, test in keys:
    d = ts[(name, t, test)]
    meds = {w: med([v for (x, r), v in d.items() if x == w]) for w in cols}
    if t == threads[0]:
        one_thread[(name, test)] = meds
    rs = {(a, b): ratio(d, a, b) for a, b in rat}
    goal = []
    need = 1.5 if test.startswith("pp") else 1.0
    if rs.get(("fast", "native")) is not None:
        goal.append("✓" if rs[("fast", "native")] >= need else "✗")
    if rs.get(("fast", "ik")) is not None:
        goal.append("✓" if rs[("fast", "ik")] >= 1.0 else "✗")
    note = []
    if test.startswith("tg") and meds.get("fast") and not name.startswith("moe"):
        gbs = size[name] * meds["fast"] / 1e9
        note.append(f"fast reads {gbs:.1f} GB/s = {100 * gbs / bw[t]:.0f}% of {bw[t]:.1f}")
    base = one_thread.get((name, test), {})
    if t != threads[0]:
        slow = [w for w in cols if meds.get(w) and base.get(w) and meds[w] < base[w]]
        if slow:
            note.append("load artifact: " + ", ".join(slow) + f" slower than at {threads[0]} thread")
    ty = name.split("-", 1)[1].upper()
    row = [label.get(name.split("-")[0], name), ty, t, test] + [f(meds[w], "{:.1f}") for w in cols]
    row += [f(rs[k], "{:.2f}×") for k in rat] + [" ".join(goal), "; ".join(note)]
    print("| " + " | ".join(row) + " |")
# peak RSS of each runner's llama-bench process (every test of a model in one process: the
# weights as the library holds them plus its KV cache and compute buffers), median over rounds
peak = collections.defaultdict(list)   # (model, who) -> [KiB]
for line in open(rss_file):
    rnd, who, name, kib = line.rstrip("\n").split("\t")
    peak[(name, who)].append(int(kib))
if peak:
    print()
    print("Peak RSS, MiB (median over rounds); goal (issue 39): fast and exact within 5% of native")
    print()
    head = ["model", "type"] + [f"{w} MiB" for w in cols] + [f"{w} / native" for w in cols if w != "native" and "native" in cols]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in dict.fromkeys(n for n, _, _ in keys):
        m = {w: med(peak.get((name, w), [])) for w in cols}
        row = [label.get(name.split("-")[0], name), name.split("-", 1)[1].upper()]
        row += [f(m[w] and m[w] / 1024, "{:.0f}") for w in cols]
        row += [f(m[w] / m["native"] if m[w] and m["native"] else None, "{:.3f}") for w in cols if w != "native" and "native" in cols]
        print("| " + " | ".join(row) + " |")
PY
echo "(table in $table; the newest run goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
[ "$failed" = 0 ]
