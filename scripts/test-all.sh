#!/usr/bin/env bash
# `make test`: installs what the tests need (idempotent, cached), builds the release library
# once, runs every test part given as an argument (scripts/test-<part>.sh), and ends with
# one line: "N passed, N failed[, N skipped]". A part exiting 77 counts as skipped.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
parts=("$@")
[ "${#parts[@]}" -gt 0 ] || { echo "usage: $0 PART..." >&2; exit 2; }
start=$SECONDS

step() {
    local t0=$SECONDS
    echo "--- setup: $1"
    shift
    "$@" || return 1
    echo "    ($((SECONDS - t0)) s)"
}

if ! { step "pinned cbindgen" bash scripts/install-tools.sh \
    && step "python venv" bash scripts/setup-venv.sh \
    && step "upstream llama.cpp sources" bash scripts/fetch-upstream.sh \
    && step "upstream libllama.so (oracle; first time: a few minutes)" bash scripts/build-upstream.sh; }; then
    echo "setup failed: the tests cannot run (see the output above)"
    echo "0 passed, 1 failed, ${#parts[@]} skipped"
    exit 1
fi

echo "--- build: cargo build --release --lib"
if cargo build --release --lib; then
    export LLAMA_HOTSWAP_BUILT=1
else
    echo "the release build failed: parts that need the library will fail"
    export LLAMA_HOTSWAP_BUILD_FAILED=1
fi

passed=0
failed=0
skipped=0
results=()
for part in "${parts[@]}"; do
    t0=$SECONDS
    echo
    echo "=== test-$part"
    rc=0
    bash "scripts/test-$part.sh" || rc=$?
    dt=$((SECONDS - t0))
    case "$rc" in
        0) passed=$((passed + 1)); results+=("$(printf '  %-6s %-18s %4ds' PASS "test-$part" "$dt")") ;;
        77) skipped=$((skipped + 1)); results+=("$(printf '  %-6s %-18s %4ds' SKIP "test-$part" "$dt")") ;;
        *) failed=$((failed + 1)); results+=("$(printf '  %-6s %-18s %4ds' FAIL "test-$part" "$dt")") ;;
    esac
done

echo
echo "=== summary ($((SECONDS - start)) s)"
printf '%s\n' "${results[@]}"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
