#!/usr/bin/env bash
# make bench-load: llama_model_load_from_file on the ~2 GB F16 model, ours vs upstream in the
# same run, interleaved, a fresh process each, median of RUNS (default 5); warm page cache and
# cold (posix_fadvise DONTNEED on the file first). Prints a Markdown table: medians of each
# library's time, peak RSS, minor page faults (getrusage ru_minflt) and CPU time (user +
# system) of each load process; the ratio is the median of the per-round ratios (paired).
# MODES / CACHES restrict the rows (e.g. MODES=none CACHES=warm). NONE rows are followed by
# three "floor" rows timed in the same rounds without any model library
# (ffi-tests/bench_floor.c): fresh anonymous memory of the file's size faulted in, that plus a
# pread of the file, and the pread after faulting the memory in by
# madvise(MADV_POPULATE_WRITE) (as the loader does without its page copier), and the memory
# filled by userfaultfd's UFFDIO_COPY from a shared mapping of the file (as the loader does
# where the kernel allows: no page zeroed first); "ours" columns hold the floor. A row before
# them times ours with the page copier off (LLAMA_HOTSWAP_NO_PAGE_COPY=1) in the same rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
RUNS=${RUNS:-5}
MODES=${MODES:-mmap none dio}
CACHES=${CACHES:-warm cold}
bash scripts/build-upstream.sh >/dev/null
cargo build --release --lib --quiet
# bench_load is linked with -lllama, so it asks for the SONAME; cargo writes only libllama.so.
ln -sf libllama.so target/release/libllama.so.0
out=target/bench && mkdir -p "$out"
model="$LLAMA_HOTSWAP_CACHE/bench-f16-2GB.gguf"
cargo run --release --quiet --example write_large -- "$model"
cc -std=c11 -O2 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/bench_load.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/bench_load"
cc -std=c11 -O2 -pthread ffi-tests/bench_floor.c -o "$out/bench_floor"
drop_cache() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)" "$model"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# ratio A: the median over the rounds of A's time / upstream's time in the same round (paired,
# as bench-decode does: upstream's own load time drifts by 30% between rounds on a shared VM,
# and pairing cancels the drift that a ratio of two medians keeps)
paired() { paste -d' ' "$out/$1.txt" "$out/up.txt" | awk '{ print $1 / $5 }' | median; }
echo "| mode | cache | upstream ms | ours ms | ratio | upstream peak RSS MiB | ours peak RSS MiB | upstream minor faults | ours minor faults | upstream CPU ms | ours CPU ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for mode in $MODES; do
    for cache in $CACHES; do
        # In NONE mode the same rounds also time the floor under any owned load (bench_floor).
        # ours-read: ours with the page copier off (LLAMA_HOTSWAP_NO_PAGE_COPY=1), the way
        # owned loads filled their arena before it.
        runners="up us"; [ "$mode" = none ] && runners="up us ours-read touch read populate copy"
        rm -f "$out"/up.txt "$out"/us.txt "$out"/ours-read.txt "$out"/touch.txt "$out"/read.txt \
            "$out"/populate.txt "$out"/copy.txt
        for who in $runners; do : > "$out/$who.txt"; done
        cat "$model" > /dev/null
        for _ in $(seq "$RUNS"); do
            for who in $runners; do
                if [ "$cache" = cold ]; then drop_cache; fi
                case $who in
                    up) LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/bench_load" "$model" "$mode" ;;
                    us) LD_LIBRARY_PATH="$PWD/target/release" "$out/bench_load" "$model" "$mode" ;;
                    ours-read) LLAMA_HOTSWAP_NO_PAGE_COPY=1 LD_LIBRARY_PATH="$PWD/target/release" \
                        "$out/bench_load" "$model" "$mode" ;;
                    *) "$out/bench_floor" "$model" "$who" ;;
                esac >> "$out/$who.txt"
            done
        done
        up_ms=$(cut -d' ' -f1 "$out/up.txt" | median); us_ms=$(cut -d' ' -f1 "$out/us.txt" | median)
        up_rss=$(cut -d' ' -f2 "$out/up.txt" | median); us_rss=$(cut -d' ' -f2 "$out/us.txt" | median)
        up_flt=$(cut -d' ' -f3 "$out/up.txt" | median); us_flt=$(cut -d' ' -f3 "$out/us.txt" | median)
        up_cpu=$(cut -d' ' -f4 "$out/up.txt" | median); us_cpu=$(cut -d' ' -f4 "$out/us.txt" | median)
        awk -v m="$mode" -v c="$cache" -v a="$up_ms" -v b="$us_ms" -v ra="$up_rss" -v rb="$us_rss" \
            -v fa="$up_flt" -v fb="$us_flt" -v ca="$up_cpu" -v cb="$us_cpu" -v r="$(paired us)" \
            'BEGIN {printf "| %s | %s | %.1f | %.1f | %.2fx | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", m, c, a, b, r, ra/1024, rb/1024, fa, fb, ca, cb}'
        for floor in ours-read touch read populate copy; do
            [ -s "$out/$floor.txt" ] || continue
            f_ms=$(cut -d' ' -f1 "$out/$floor.txt" | median); f_rss=$(cut -d' ' -f2 "$out/$floor.txt" | median)
            f_flt=$(cut -d' ' -f3 "$out/$floor.txt" | median); f_cpu=$(cut -d' ' -f4 "$out/$floor.txt" | median)
            label="floor: $floor"; [ "$floor" = ours-read ] && label="none, ours without the page copier"
            awk -v m="$label" -v c="$cache" -v a="$up_ms" -v b="$f_ms" -v ra="$up_rss" -v rb="$f_rss" \
                -v fa="$up_flt" -v fb="$f_flt" -v ca="$up_cpu" -v cb="$f_cpu" -v r="$(paired "$floor")" \
                'BEGIN {printf "| %s | %s | %.1f | %.1f | %.2fx | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", m, c, a, b, r, ra/1024, rb/1024, fa, fb, ca, cb}'
        done
    done
done
echo "(the newest run of this benchmark goes into docs/benchmarks.md with its date, commit and CPU; the run it replaces moves to docs/benchmarks/history.md)"
