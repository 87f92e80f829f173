#!/usr/bin/env bash
# The Rust unit and integration tests, in the release profile (cargo test --release): the
# profile of the release library and every other part's cargo call, so the dependencies and
# the crate compile once per CI run, not once per profile. The library logs to stderr
# (hundreds of hot-swap lines), so the whole output goes to a log file: a passing run prints
# cargo's per-binary summaries, a failing one the failures and the end of the log.
. "$(dirname "$0")/test-common.sh"
log="$WORK/test-rust.log"
if cargo test --release >"$log" 2>&1; then
    grep -E '^\s+Running |^\s+Doc-tests |^test result:' "$log" || true
    say "(full output: $log)"
else
    grep -nE 'panicked at|^failures:|FAILED|^error(\[|:)' "$log" | head -n 60 || true
    say "--- last 150 lines of $log"
    tail -n 150 "$log"
    exit 1
fi
