#!/usr/bin/env bash
# make bench-rpc: what a device on upstream's rpc-server costs, on this machine (one server on
# 127.0.0.1, CPU backend: the network is the loopback, so the figures are the protocol's and the
# graph split's overhead, not a real network's). Two parts, ours and upstream's library in the
# same run, interleaved, a fresh process per measurement, medians:
#   1. prompt processing (one batch of BENCH_PP=128 tokens) and token generation (BENCH_TG=32
#      steps) of SmolLM2-135M (Q4_1 as shipped), every layer on the server (n_gpu_layers 999)
#      vs all on the local CPU (ffi-tests/bench_decode.c with BENCH_RPC), BENCH_THREADS=1
#      thread on the client, 1 on the server, BENCH_REPS=5 rounds, the order rotating;
#   2. hot-swap of one 64 MiB tensor (bench-hotswap's ~2.2 GB F16 model split one tensor per
#      shard, blk.0.ffn_down.weight) with every layer on the server vs local: reload of new
#      bytes in place, F16 -> Q8_0 (relocated: a new remote buffer), Q8_0 -> F16 (back), RUNS=5
#      rounds each (ffi-tests/bench_hotswap.c with BENCH_RPC; ours only: upstream has no
#      hot-swap).
# Prints the machine and two Markdown tables (also written to target/bench/bench-rpc.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
REPS=${BENCH_REPS:-5}
PP=${BENCH_PP:-128}
TG=${BENCH_TG:-32}
THREADS=${BENCH_THREADS:-1}
RUNS=${RUNS:-5}
bash scripts/build-upstream.sh >/dev/null
bin="$(bash scripts/build-upstream-tools.sh ggml-rpc-server)"
cargo build --release --lib --quiet
ln -sf libllama.so target/release/libllama.so.0
out=target/bench/rpc
mkdir -p "$out"
table=target/bench/bench-rpc.md
cc -std=c11 -O2 -I"$UPSTREAM_LLAMA/include" -I"$UPSTREAM_LLAMA/ggml/include" ffi-tests/bench_decode.c \
    -L"$UPSTREAM_BUILD/bin" -lllama -lpthread -ldl -o "$out/bench_decode"
cc -std=c11 -O2 -DBENCH_OURS -Iinclude ffi-tests/bench_hotswap.c \
    -Ltarget/release -lllama "-Wl,-rpath,$PWD/target/release" -o "$out/bench_hotswap_ours"
ours="$PWD/target/release"
upstream="$UPSTREAM_BUILD/bin"
model="$(bash scripts/fetch-models.sh)"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin/ggml-rpc-server" --device CPU --host 127.0.0.1 --port "$port" -t 1 >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
ep="127.0.0.1:$port"

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
values() { awk -v k="$1" '$1 == k {print $2}' "$2"; }

# 1. pp / tg, local and remote, both libraries
for f in up-local up-rpc us-local us-rpc; do : >"$out/$f.txt"; done
for r in $(seq "$REPS"); do
    case $((r % 4)) in
        1) order="up-local up-rpc us-local us-rpc" ;; 2) order="us-rpc up-local up-rpc us-local" ;;
        3) order="us-local us-rpc up-local up-rpc" ;; *) order="up-rpc us-local us-rpc up-local" ;;
    esac
    for who in $order; do
        lib=$upstream; [ "${who%%-*}" = us ] && lib=$ours
        rpc=; [ "${who#*-}" = rpc ] && rpc=$ep
        BENCH_RPC="$rpc" LD_LIBRARY_PATH="$lib" "$out/bench_decode" "$model" "$THREADS" "$PP" "$TG" \
            >>"$out/$who.txt" 2>"$out/$who.err" || { echo "$who failed: $(tail -2 "$out/$who.err")" >&2; exit 1; }
    done
done
col() { cut -d' ' -f"$2" "$out/$1.txt" | median; }
# per-round ratio of column C of file A over file B, median over the rounds
ratio() { paste -d' ' "$out/$2.txt" "$out/$3.txt" | awk -v c="$1" 'NF == 8 && $(c + 4) > 0 { print $c / $(c + 4) }' | median; }

# 2. hot-swap of the 64 MiB tensor, local and remote (ours)
data="$LLAMA_HOTSWAP_CACHE/bench-hotswap"
cargo run --release --quiet --example write_shards -- "$data" >"$out/models.txt"
eval "$(grep -E '^[a-z_0-9]+=[^ ]*$' "$out/models.txt" | sed 's/^/m_/')"
work="$data/work-rpc.$$"
rm -rf "$work"
cp -al "$data/big" "$work"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
first="$work/$(basename "$m_big_first")"
shard="$work/$(basename "$m_big_shard")"
export LLAMA_HOTSWAP_ENABLED=1
for where in local rpc; do
    ln -f "$m_variants/f16a.gguf" "$shard"
    rpc=; [ "$where" = rpc ] && rpc=$ep
    BENCH_RPC="$rpc" "$out/bench_hotswap_ours" reload "$first" "$shard" "$m_variants" "$m_tensor" \
        "$m_offset" "$m_nbytes" "$RUNS" >"$out/reload-$where.txt" 2>"$out/reload-$where.err" \
        || { echo "reload ($where) failed: $(tail -2 "$out/reload-$where.err")" >&2; exit 1; }
done

{
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), llama-hotswap $(git rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; one upstream rpc-server (CPU backend, 1 thread) on 127.0.0.1; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "SmolLM2-135M Q4_1, $THREADS client thread(s); pp = one batch of $PP tokens, tg = $TG steps, tok/s, median of $REPS rounds; remote/local and ours/upstream: medians of per-round ratios"
    echo
    echo "| library | pp local | pp on the server | pp remote/local | tg local | tg on the server | tg remote/local |"
    echo "|---|---|---|---|---|---|---|"
    for who in up us; do
        awk -v l="$([ $who = up ] && echo upstream || echo ours)" -v pl="$(col $who-local 1)" -v pr="$(col $who-rpc 1)" \
            -v tl="$(col $who-local 2)" -v tr="$(col $who-rpc 2)" -v rp="$(ratio 1 $who-rpc $who-local)" \
            -v rt="$(ratio 2 $who-rpc $who-local)" 'BEGIN {
            printf "| %s | %.1f | %.1f | %.2f× | %.1f | %.1f | %.2f× |\n", l, pl, pr, rp, tl, tr, rt }'
    done
    awk -v p="$(ratio 1 us-rpc up-rpc)" -v t="$(ratio 2 us-rpc up-rpc)" 'BEGIN {
        printf "| ours / upstream, layers on the server | | | pp %.2f× | | | tg %.2f× |\n", p, t }'
    echo
    echo "Hot-swap of $m_tensor (F16 [8192, 4096], 64 MiB) in a ~$(awk -v b="$m_big_bytes" 'BEGIN {printf "%.1f", b / 1e9}') GB model, every layer on the server vs local; ms, median of $RUNS"
    echo
    echo "| reload | local | on the server | remote/local |"
    echo "|---|---|---|---|"
    for k in inplace:"new bytes, same type (in place)" relocate:"F16 → Q8_0 (relocated)" return:"Q8_0 → F16 (returned)"; do
        key=${k%%:*}
        awk -v l="${k#*:}" -v a="$(values "${key}_ms" "$out/reload-local.txt" | median)" \
            -v b="$(values "${key}_ms" "$out/reload-rpc.txt" | median)" 'BEGIN {
            printf "| %s | %.1f | %.1f | %.1f× |\n", l, a, b, b / a }'
    done
    awk -v p="$(values pread_ms "$out/reload-local.txt" | median)" 'BEGIN {
        printf "| baseline: pread of the 64 MiB from the page cache | %.1f | | |\n", p }'
} | tee "$table"
