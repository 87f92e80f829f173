#!/usr/bin/env bash
# ffi-tests/valgrind_loop.c (every operation available without a model, many rounds) under
# valgrind: memory errors and definite leaks fail. Set LLAMA_HOTSWAP_TEST_MODEL=FILE.gguf to
# include model load/free.
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_library
if ! command -v valgrind >/dev/null; then
    say "valgrind is not installed: skipped"
    exit 77
fi
out="$WORK/valgrind"
mkdir -p "$out"
# Compiled against upstream's header: it declares the functions still to come, which the
# loop references weakly and skips while they are missing.
"$CC" -std=c11 -g -O1 -Wall -Wextra -Werror "${UPSTREAM_INCLUDES[@]}" ffi-tests/valgrind_loop.c \
    -o "$out/valgrind_loop" -L "$RELEASE_DIR" -lllama "-Wl,-rpath,$RELEASE_DIR" \
    || fail "valgrind_loop.c does not compile"
# A small model for the load/free operations (NONE and MMAP modes), unless one is given.
if [ -z "${LLAMA_HOTSWAP_TEST_MODEL:-}" ]; then
    cargo run --release --quiet --example diff_fixtures -- "$out/fixtures" > "$out/fixtures.txt" \
        || fail "cannot write the fixture model"
    export LLAMA_HOTSWAP_TEST_MODEL="$(grep 'llama-q8_0' "$out/fixtures.txt")"
fi
rounds="${VALGRIND_ROUNDS:-200}"
if valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1 \
    --log-file="$out/valgrind.log" "$out/valgrind_loop" "$rounds" >"$out/stdout.txt" \
    2>"$out/stderr.txt"; then
    # The library's log lines (stderr) are kept in a file, shown only on failure.
    cat "$out/stdout.txt"
    say "valgrind: no memory errors, no definite leaks (library log: $out/stderr.txt)"
else
    cat "$out/stdout.txt"
    tail -n 60 "$out/stderr.txt"
    cat "$out/valgrind.log"
    fail "valgrind reported errors (log: $out/valgrind.log)"
fi
