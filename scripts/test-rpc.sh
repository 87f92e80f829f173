#!/usr/bin/env bash
# Devices on upstream's rpc-server (ggml-rpc): our Rust client against the real server built
# from the pinned sources (tests/rpc_server.rs: HELLO, devices, buffers, set-by-hash with the
# server's cache, graph compute, out of memory, a server killed mid-use), each test on its own
# 127.0.0.1 port with the CPU backend; the hostile fake-server cases (tests/rpc_client.rs)
# run in test-rust. See docs/rpc.md.
. "$(dirname "$0")/test-common.sh"
bin="$(bash "$ROOT/scripts/build-upstream-tools.sh" ggml-rpc-server)"
export LLAMA_HOTSWAP_RPC_SERVER="$bin/ggml-rpc-server"
[ -x "$LLAMA_HOTSWAP_RPC_SERVER" ] || fail "upstream's rpc-server was not built ($LLAMA_HOTSWAP_RPC_SERVER)"
cargo test --release --test rpc_server -- --test-threads=2

# Differential: SmolLM2 (Q4_1 as shipped) with 19 layers and the output layer on two
# rpc-servers (n_gpu_layers 20, tensor_split 1,1), decoded by upstream's library and by ours
# with the same servers (ffi-tests/engine/probe_decode.c, PROBE_RPC: upstream's way of adding
# servers, ours through llama_ext_rpc_add_server): a 9-token prompt and 8 greedy steps.
# Exact mode with flash attention: every row bit-identical; fast mode: KL/top-1 as
# test-engine; flash attention off: both send upstream's op sequence (KQ, SOFT_MAX, V·KQ over
# upstream's padded cell count, which decides ggml's summation order): every row
# bit-identical too.
[ -n "${LLAMA_HOTSWAP_BUILT:-}" ] || cargo build --release --lib --quiet
model="$(bash "$ROOT/scripts/fetch-models.sh")"
out="$WORK/rpc"
mkdir -p "$out"
"$CC" -std=c11 -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/engine/probe_decode.c -L"$UPSTREAM_BUILD/bin" -lllama -lm -o "$out/probe_decode"
"$CC" -std=c11 -O2 ffi-tests/engine/compare_logits.c -lm -o "$out/compare_logits"
ln -sf libllama.so "$RELEASE_DIR/libllama.so.0"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
eps=()
for i in 1 2; do
    port="$(free_port)"
    "$LLAMA_HOTSWAP_RPC_SERVER" --device CPU --host 127.0.0.1 --port "$port" -t 1 >"$out/server$i.log" 2>&1 &
    pids+=($!)
    eps+=("127.0.0.1:$port")
done
for ep in "${eps[@]}"; do
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/${ep%:*}/${ep#*:}") 2>/dev/null && break; sleep 0.1; done
done
export PROBE_VERBOSE=1 PROBE_RPC="${eps[0]},${eps[1]}" PROBE_GPU_LAYERS=20 PROBE_TENSOR_SPLIT=1,1 PROBE_THREADS=1
toks="1 504 3458 282 4537 314 260 1345 30"
row() { # NAME FLASH_ATTN EXACT MAX_KL COMPARE_EXACT_ROWS [MODEL]
    local m="${6:-$model}"
    PROBE_FLASH_ATTN=$2 LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/probe_decode" "$m" "$out/up-$1.bin" 8 $toks >"$out/up-$1.txt" 2>"$out/up-$1.log" \
        || fail "upstream's probe with rpc-servers ($1): $(tail -3 "$out/up-$1.log")"
    PROBE_FLASH_ATTN=$2 LLAMA_HOTSWAP_EXACT=$3 LD_LIBRARY_PATH="$RELEASE_DIR:$UPSTREAM_BUILD/bin" "$out/probe_decode" "$m" "$out/ours-$1.bin" 8 $toks >"$out/ours-$1.txt" 2>"$out/ours-$1.log" \
        || fail "our probe with rpc-servers ($1): $(tail -3 "$out/ours-$1.log")"
    for side in up ours; do
        [ "$(grep -c 'RPC.* model buffer size' "$out/$side-$1.log")" -ge 2 ] || fail "rpc $1: $side did not place layers on both servers"
    done
    res="$(COMPARE_EXACT_ROWS=$5 "$out/compare_logits" "$out/up-$1.bin" "$out/ours-$1.bin" "$4" 0.99 0.25)" \
        || fail "rpc $1: logits differ from upstream's with the same servers: $res"
    say "rpc $1: $res"
    cmp -s "$out/up-$1.txt" "$out/ours-$1.txt" || fail "rpc $1: greedy tokens differ: $(cat "$out/up-$1.txt") vs $(cat "$out/ours-$1.txt")"
}
row exact-fa 1 1 1e-6 17
row fast-fa 1 0 1e-2 0
row exact-nofa 0 1 1e-6 17
# The memory operations of the engine test (PROBE_MEMOPS: seq_rm and re-decode, seq_cp, a
# context shift by seq_rm + seq_add) with layers on the servers: the K-shift re-rotates the
# keys the servers hold (read, rotated on the host, written back; upstream rotates there).
PROBE_MEMOPS=1 row memops-exact-fa 1 1 1e-6 22

# MoE on the servers: upstream's qwen3moe fixture (random weights: q/k norms, 8 experts with
# per-expert scales) split across both servers. MUL_MAT_ID runs there with the expert ids
# sent as ggml's I32 (the routing's top-k and the weighted sum on the CPU, as our graph has
# them), the per-expert scales as upstream's build_lora_mm_id applies them: bit-identical to
# upstream's client in exact and fast mode with flash attention (measured: 17 of 17 rows);
# without flash attention too.
moe="$(bash "$ROOT/scripts/upstream-arch-fixtures.sh")/qwen3moe-moe.gguf"
[ -s "$moe" ] || fail "fixture $moe is missing"
toks="1 50 34 22 90 7 11 3 5"
row moe-exact-fa 1 1 1e-6 17 "$moe"
row moe-fast-fa 1 0 1e-6 17 "$moe"
row moe-exact-nofa 0 1 1e-6 17 "$moe"
# gemma2 (attention soft-cap, sliding-window layers, GELU) split across both servers, flash
# attention off and on: the engines' gemma2 rows are close, not bit-identical (test-engine).
gemma2="$(dirname "$moe")/gemma2-dense.gguf"
row gemma2-exact-nofa 0 1 1e-12 0 "$gemma2"
row gemma2-exact-fa 1 1 1e-12 0 "$gemma2"

# Upstream's programs with `--rpc` on our library (docs/rpc.md): the servers they register in
# libggml become our RPC0/RPC1 (libggml readies its devices before our client connects, and
# its later memory queries, e.g. common's memory breakdown at exit, are answered from our
# connection instead of waiting behind it: a hang fails by timeout). llama-completion greedy:
# the same text as upstream's library with the same servers; llama-perplexity: the same final
# PPL; llama-bench runs and prints its table.
tools="$(bash "$ROOT/scripts/build-upstream-tools.sh" llama-completion llama-perplexity llama-bench)"
dl="$out/dropin-lib"
rm -rf "$dl" && mkdir -p "$dl"
ln -s "$RELEASE_DIR/libllama.so" "$dl/libllama.so.0"
for f in "$tools"/libggml*.so.0 "$tools"/libllama-common.so.0 "$tools"/*-impl.so; do ln -s "$f" "$dl/"; done
rpc_args=(-ngl 99 --rpc "${eps[0]},${eps[1]}")  # -ngl first: its handler asks llama_supports_gpu_offload before --rpc registers
for who in up ours; do
    lib="$tools"; [ "$who" = ours ] && lib="$dl"
    LLAMA_HOTSWAP_EXACT=1 LD_LIBRARY_PATH="$lib" timeout 300 "$tools/llama-completion" -m "$model" "${rpc_args[@]}" \
        -p "The capital of France is" -n 16 --temp 0 -no-cnv -v >"$out/completion-$who.txt" 2>"$out/completion-$who.log" \
        || fail "rpc --rpc: llama-completion on $who: $(tail -3 "$out/completion-$who.log")"
    LLAMA_HOTSWAP_EXACT=1 LD_LIBRARY_PATH="$lib" timeout 300 "$tools/llama-perplexity" -m "$model" "${rpc_args[@]}" \
        -f "$ROOT/README.md" -c 128 --chunks 3 >"$out/ppl-$who.log" 2>&1 \
        || fail "rpc --rpc: llama-perplexity on $who: $(tail -3 "$out/ppl-$who.log")"
done
grep -q "offloaded 31/31 layers" "$out/completion-ours.log" || fail "rpc --rpc: our library did not place the layers on the servers"
grep -q "RPC1" "$out/completion-ours.log" || fail "rpc --rpc: our library did not use the second server"
cmp -s "$out/completion-up.txt" "$out/completion-ours.txt" \
    || fail "rpc --rpc: llama-completion's text differs: $(cat "$out/completion-up.txt") vs $(cat "$out/completion-ours.txt")"
ppl_up="$(grep -o 'Final estimate: PPL = [0-9.]*' "$out/ppl-up.log")"
ppl_ours="$(grep -o 'Final estimate: PPL = [0-9.]*' "$out/ppl-ours.log")"
[ -n "$ppl_up" ] && [ "$ppl_up" = "$ppl_ours" ] || fail "rpc --rpc: llama-perplexity: '$ppl_up' (upstream) vs '$ppl_ours' (ours)"
LD_LIBRARY_PATH="$dl" timeout 300 "$tools/llama-bench" -m "$model" -rpc "${eps[0]},${eps[1]}" -ngl 99 -p 16 -n 4 -r 1 \
    >"$out/bench-ours.txt" 2>&1 || fail "rpc --rpc: llama-bench on ours: $(tail -3 "$out/bench-ours.txt")"
grep -q "| *RPC *| *99 | *tg4 |" "$out/bench-ours.txt" || fail "rpc --rpc: llama-bench printed no RPC table: $(tail -4 "$out/bench-ours.txt")"
say "rpc --rpc: upstream's llama-completion (same text), llama-perplexity (${ppl_ours#Final estimate: } on both) and llama-bench on our library with both servers"

# State and sessions with the KV rows on the servers (ffi-tests/diff_state.c with DIFF_RPC:
# SmolLM2 with 20 layers on the two servers): each library saves a session file, a whole
# state and a sequence state after the same prompt, the bytes must be equal; each restores
# the other's into a fresh context and the next token's logits equal the saver's bit for bit.
"$CC" -std=c11 -O1 "${UPSTREAM_INCLUDES[@]}" ffi-tests/diff_state.c -L"$UPSTREAM_BUILD/bin" -lllama -o "$out/diff_state"
st="$out/state"
rm -rf "$st" && mkdir -p "$st/up" "$st/ours"
export DIFF_RPC="${eps[0]},${eps[1]}" DIFF_GPU_LAYERS=20
LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/diff_state" save "$model" 1 "$st/up" >"$st/save-up.log" 2>&1 \
    || fail "rpc state: upstream's save: $(tail -3 "$st/save-up.log")"
LD_LIBRARY_PATH="$RELEASE_DIR:$UPSTREAM_BUILD/bin" "$out/diff_state" save "$model" 1 "$st/ours" >"$st/save-ours.log" 2>&1 \
    || fail "rpc state: our save: $(tail -3 "$st/save-ours.log")"
for f in session.bin state.bin seq.bin partial.bin next.f32; do
    cmp -s "$st/up/$f" "$st/ours/$f" || fail "rpc state: $f differs from upstream's"
done
for kind in session state seq; do
    for pair in "ours:up" "up:ours"; do
        who=${pair%%:*} from=${pair#*:}
        lib="$UPSTREAM_BUILD/bin"; [ "$who" = ours ] && lib="$RELEASE_DIR:$UPSTREAM_BUILD/bin"
        LD_LIBRARY_PATH="$lib" "$out/diff_state" load "$model" 1 "$st/$from/$kind.bin" $kind "$st/$who-from-$from-$kind.f32" \
            >"$st/load-$who-$kind.log" 2>&1 || fail "rpc state: $who loading $from's $kind: $(tail -3 "$st/load-$who-$kind.log")"
        cmp -s "$st/$who-from-$from-$kind.f32" "$st/$from/next.f32" || fail "rpc state: $who restoring $from's $kind: other next logits"
    done
done
say "rpc state: session, state, sequence and partial states byte-identical to upstream's with 20 layers on the servers; each library restores the other's (next logits bit-identical)"
