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
