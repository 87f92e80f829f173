#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/Cargo.toml) for a short time each (FUZZ_SECONDS, default
# 30) from its committed corpus: libFuzzer with ASan on nightly. Not part of `make test` (the
# instrumented build takes minutes); the harnesses' replays run in `cargo test`
# (tests/tokenizer_fuzz.rs, tests/grammar.rs, tests/gguf_fuzz_corpus.rs, tests/engine_ffi.rs).
# Skips with a reason when cargo-fuzz or the nightly toolchain is missing.
. "$(dirname "$0")/test-common.sh"
if ! command -v cargo-fuzz >/dev/null || ! cargo +nightly --version >/dev/null 2>&1; then
    say "fuzz smoke: SKIPPED (needs cargo-fuzz and the nightly toolchain)"
    exit 0
fi
# The tokenize target also loads the sdist's vocab files when they are in the cache.
export UPSTREAM_LLAMA
seconds="${FUZZ_SECONDS:-30}"
targets=($(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^llama-hotswap-fuzz$'))
out="$WORK/fuzz-smoke"
mkdir -p "$out"
status=0
for t in "${targets[@]}"; do
    corpus="$out/corpus-$t"
    rm -rf "$corpus" && mkdir -p "$corpus"
    [ -d "fuzz/corpus/$t" ] && cp -r "fuzz/corpus/$t/." "$corpus/"
    if (cd fuzz && cargo +nightly fuzz run "$t" "$corpus" -- -max_total_time="$seconds" \
            -max_len=4096 -timeout=10 -rss_limit_mb=2048) >"$out/$t.log" 2>&1; then
        say "ok   fuzz $t: $(grep -o '#[0-9]* *DONE.*' "$out/$t.log" | tail -n 1) (${seconds}s)"
    else
        say "FAIL fuzz $t (log: $out/$t.log; the crashing input is in fuzz/artifacts/$t/)"
        tail -n 30 "$out/$t.log"
        status=1
    fi
done
exit "$status"
