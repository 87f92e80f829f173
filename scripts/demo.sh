#!/usr/bin/env bash
# make demo: builds the library and the demo host, then runs it on a freshly written model.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib --quiet
mkdir -p build/demo
cc -std=c11 -Wall -Wextra -O2 -Iinclude ffi-tests/demo/demo.c -Ltarget/release -lllama \
    -Wl,-rpath,"$PWD/target/release" -o build/demo/demo
cd build/demo && ./demo demo-model.gguf 2>demo.log || { cat demo.log >&2; exit 1; }
