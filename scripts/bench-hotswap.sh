#!/usr/bin/env bash
# make bench-hotswap: the hot-swap reload path, timed, with upstream's full reload (free + load)
# in the same run. Prints the machine and one Markdown table, each row with its goal and
# whether it was met. Timings are medians of RUNS (default 5) runs.
#   1. no-change poll: one llama_ext_model_reload_changed_tensors call on a model of 1,002
#      one-tensor shards with nothing changed (fresh process per run, 20 calls each).
#   2. reload of one changed 64 MiB tensor (blk.0.ffn_down.weight, F16 [8192, 4096], in its own
#      shard of a ~2 GB model split one tensor per shard, as quant sweeps lay models out): a new
#      version of the shard is written to a temp file, fdatasync'ed and renamed into place
#      outside the timed region; then one reload is timed. Same type (in place), F16 -> Q8_0
#      (relocation) and Q8_0 -> F16 (return to original). Baseline: pread of the tensor's 64 MiB
#      from the page cache into a warm buffer, same process. Also llama_model_free +
#      llama_model_load_from_file (LLAMA_LOAD_MODE_NONE) of the same model, ours and upstream's
#      libllama.so (each in its own fresh processes, interleaved).
#   3. VmRSS across CYCLES (default 1000) oscillation cycles of that tensor between two types
#      (one cycle: B renamed into place, reload, A renamed into place, reload; A and B are
#      hard-linked, never rewritten): F16 <-> Q8_0 (relocate / return to original) and
#      Q8_0 <-> Q4_0 (private buffer replaced by another).
# Models are generated once into $LLAMA_HOTSWAP_CACHE/bench-hotswap (~2.2 GB, never committed);
# the shard being swapped lives in a scratch directory of hard links, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
RUNS=${RUNS:-5}
CYCLES=${CYCLES:-1000}
POLL_CALLS=20
bash scripts/build-upstream.sh >/dev/null
cargo build --release --lib --quiet
ln -sf libllama.so target/release/libllama.so.0
out=target/bench && mkdir -p "$out"
data="$LLAMA_HOTSWAP_CACHE/bench-hotswap"
cargo run --release --quiet --example write_shards -- "$data" >"$out/models.txt"
eval "$(grep -E '^[a-z_0-9]+=[^ ]*$' "$out/models.txt" | sed 's/^/m_/')"
cc -std=c11 -O2 -Wall -DBENCH_OURS -Iinclude ffi-tests/bench_hotswap.c \
    -Ltarget/release -lllama "-Wl,-rpath,$PWD/target/release" -o "$out/bench_hotswap_ours"
cc -std=c11 -O2 -Wall -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" \
    ffi-tests/bench_hotswap.c -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/bench_hotswap_up"

# Scratch copy of the big model: hard links, so renaming versions into place never touches the
# cached files and costs no space.
work="$data/work.$$"
rm -rf "$work"
cp -al "$data/big" "$work"
trap 'rm -rf "$work"' EXIT
first="$work/$(basename "$m_big_first")"
shard="$work/$(basename "$m_big_shard")"
original() { ln -f "$m_variants/f16a.gguf" "$shard"; }
export LLAMA_HOTSWAP_ENABLED=1
ours() { "$out/bench_hotswap_ours" "$@"; }
upstream() { LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/bench_hotswap_up" "$@"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
values() { awk -v k="$1" '$1 == k {print $2}' "$2"; }
cat "$work"/* "$data"/variants/* "$data"/small/* >/dev/null

# 1. No-change poll.
: >"$out/poll.txt"
for _ in $(seq "$RUNS"); do ours poll "$m_small_first" "$POLL_CALLS" >>"$out/poll.txt"; done
poll=$(values poll_ms "$out/poll.txt" | median)
stat_floor=$(values stat_ms "$out/poll.txt" | median)

# 2. Reloads of the 64 MiB tensor (one process, RUNS rounds after a warm-up round), then full
#    reloads, ours and upstream interleaved, a fresh process each.
original
ours reload "$first" "$shard" "$m_variants" "$m_tensor" "$m_offset" "$m_nbytes" "$RUNS" \
    >"$out/reload.txt"
pread=$(values pread_ms "$out/reload.txt" | median)
inplace=$(values inplace_ms "$out/reload.txt" | median)
relocate=$(values relocate_ms "$out/reload.txt" | median)
ret=$(values return_ms "$out/reload.txt" | median)
: >"$out/load-us.txt"
: >"$out/load-up.txt"
for _ in $(seq "$RUNS"); do
    original
    upstream load "$first" >>"$out/load-up.txt"
    ours load "$first" >>"$out/load-us.txt"
done
load_up=$(values load_ms "$out/load-up.txt" | median)
load_us=$(values load_ms "$out/load-us.txt" | median)

# 3. RSS across the oscillations.
original
ours oscillate "$first" "$shard" "$m_variants" "$m_tensor" f16a q8_0 "$CYCLES" >"$out/osc1.txt"
original
ours oscillate "$first" "$shard" "$m_variants" "$m_tensor" q8_0 q4_0 "$CYCLES" >"$out/osc2.txt"
original

rss_row() { # FILE LABEL
    local f="$1" label="$2" r1 r10 r100 rn flip
    r1=$(awk '$1=="rss_kib" && $2==1 {print $3}' "$f")
    r10=$(awk '$1=="rss_kib" && $2==10 {print $3}' "$f")
    r100=$(awk '$1=="rss_kib" && $2==100 {print $3}' "$f")
    rn=$(awk -v n="$CYCLES" '$1=="rss_kib" && $2==n {print $3}' "$f")
    flip=$(values flip_ms "$f" | median)
    awk -v l="$label" -v a="${r1:-0}" -v b="${r10:-0}" -v c="${r100:-0}" -v d="${rn:-0}" \
        -v n="$CYCLES" -v t="$m_nbytes" -v fl="$flip" 'BEGIN {
        g = (d - a) * 1024
        printf "| 3 | %s: VmRSS after cycle 1 / 10 / 100 / %d (reload median %.1f ms) | %.0f / %.0f / %.0f / %.0f MiB, growth %+.1f MiB | growth < %.0f MiB (one tensor) | %s |\n",
            l, n, fl, a / 1024, b / 1024, c / 1024, d / 1024, g / 1048576, t / 1048576,
            (g < t) ? "met" : "**missed**" }'
}

echo "Machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r), THP $(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); llama-hotswap $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src 2>/dev/null || echo ' (src modified)'); upstream llama.cpp via llama-cpp-python $UPSTREAM_VERSION"
echo "Models: $m_small_count-shard tiny llama (one tensor per shard); ~$(awk -v b="$m_big_bytes" 'BEGIN {printf "%.2f", b / 1e9}') GB F16 llama split one tensor per shard ($m_big_count shards), swapped tensor $m_tensor F16 [8192, 4096] = 64 MiB in its own shard. CPU only, LLAMA_LOAD_MODE_NONE. Medians of $RUNS runs."
echo
echo "| # | measurement | median | goal | result |"
echo "|---|---|---|---|---|"
awk -v p="$poll" -v n="$m_small_count" 'BEGIN {
    printf "| 1 | no-change poll, %d shard files (`llama_ext_model_reload_changed_tensors`) | %.2f ms | ≤ 2 ms | %s |\n", n, p, (p <= 2) ? "met" : "**missed**" }'
awk -v f="$stat_floor" -v p="$poll" -v n="$m_small_count" 'BEGIN {
    printf "| 1 | floor: one plain `stat(2)` of each of the %d shard files, same process, same rounds | %.2f ms (poll = %.2f× it) | — | — |\n", n, f, p / f }'
awk -v p="$pread" 'BEGIN { printf "| 2 | baseline: `pread` of the 64 MiB from the page cache (warm buffer) | %.1f ms | — | — |\n", p }'
row2() { # LABEL MS
    awk -v l="$1" -v t="$2" -v p="$pread" 'BEGIN {
        printf "| 2 | %s | %.1f ms (%.1f× pread) | ≤ 1.5× pread (%.1f ms) | %s |\n", l, t, t / p, 1.5 * p, (t <= 1.5 * p) ? "met" : "**missed**" }'
}
row2 "reload, same type, new bytes (F16 → F16, reloaded_in_place)" "$inplace"
row2 "reload, type change F16 → Q8_0 (relocated)" "$relocate"
row2 "reload, type change back Q8_0 → F16 (returned_to_original)" "$ret"
slowest=$(printf '%s\n' "$inplace" "$relocate" "$ret" | sort -g | tail -n1)
row_load() { # WHO MS
    awk -v w="$1" -v t="$2" -v a="$inplace" -v b="$relocate" -v c="$ret" -v s="$slowest" 'BEGIN {
        printf "| 2 | full reload, %s: `llama_model_free` + `llama_model_load_from_file` (NONE) | %.0f ms (hot reload faster by %.0f× in place, %.0f× relocate, %.0f× return) | hot reload ≥ 20× faster | %s |\n", w, t, t / a, t / b, t / c, (t >= 20 * s) ? "met" : "**missed**" }'
}
row_load "upstream" "$load_up"
row_load "ours" "$load_us"
rss_row "$out/osc1.txt" "oscillation F16 ↔ Q8_0"
rss_row "$out/osc2.txt" "oscillation Q8_0 ↔ Q4_0"
echo "(the newest run of this benchmark goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
