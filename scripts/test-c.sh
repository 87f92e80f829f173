#!/usr/bin/env bash
# The C harness (ffi-tests/), built and run several ways:
#   ours      each test against include/llama.h, linked with -lllama (rpath to target/release);
#             ffi-tests/ext_*.c (llama_ext_* extensions) are built this way only
#   upstream  each test against UPSTREAM's llama.h (+ ggml headers), linked to our library:
#             C code written for llama.cpp compiles and runs unchanged (the drop-in check)
#   dlopen    the library loaded at run time, all upstream names resolved with dlsym
#   diff      one upstream-header program run against upstream's libllama and ours
#             (LD_LIBRARY_PATH), outputs compared
#   install   `make install PREFIX=…`, then a test built from the installed header, library
#             and llama.pc
# Environment: SANITIZE="-fsanitize=…" builds everything with it (scripts/test-asan.sh).
. "$(dirname "$0")/test-common.sh"
need_upstream_source
need_library

# Every ffi-tests/test_*.c is a harness test, except the dlopen one (built separately).
TESTS=()
for f in ffi-tests/test_*.c; do
    t="$(basename "$f" .c)"
    [ "$t" = test_dlopen ] || TESTS+=("$t")
done
mode="${SANITIZE:+asan}"
mode="${mode:-plain}"
out="$WORK/c-$mode"
rm -rf "$out"
mkdir -p "$out/gen"
python3 scripts/upstream_api.py names-c >"$out/gen/upstream_fns.h"

read -r -a san <<<"${SANITIZE:-}"
cflags=(-std=c11 -g -O1 -Wall -Wextra -Werror "${san[@]}" -I ffi-tests)
link_ours=(-L "$RELEASE_DIR" -lllama "-Wl,-rpath,$RELEASE_DIR" -lm)
passed=0
failed=0
failures=()

# run_case LABEL COMMAND...: runs a test binary, shows its summary line (all output on failure).
run_case() {
    local label="$1"
    shift
    local log="$out/$(echo "$label" | tr ' /' '__').log"
    local rc=0
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        printf '  ok    %-28s %s\n' "$label" "$(tail -n 1 "$log")"
    else
        failed=$((failed + 1))
        failures+=("$label")
        printf '  FAIL  %-28s (exit %s)\n' "$label" "$rc"
        sed 's/^/        | /' "$log" | tail -n 60
    fi
}

# build LABEL OUTPUT COMPILER-ARGS...: compiles; a compile error counts as a failed case.
build() {
    local label="$1"
    shift
    if ! "$CC" "$@" 2>"$out/build.log"; then
        failed=$((failed + 1))
        failures+=("$label (build)")
        printf '  FAIL  %-28s does not compile:\n' "$label"
        sed 's/^/        | /' "$out/build.log" | head -n 40
        return 1
    fi
}

say "C tests ($mode): library $(realpath --relative-to="$ROOT" "$LIB")"
for t in "${TESTS[@]}"; do
    if build "ours/$t" "${cflags[@]}" -pedantic -I include "ffi-tests/$t.c" -o "$out/$t-ours" \
        "${link_ours[@]}" -lpthread; then
        run_case "ours/$t" "$out/$t-ours"
    fi
    if build "upstream-header/$t" "${cflags[@]}" "${UPSTREAM_INCLUDES[@]}" "ffi-tests/$t.c" \
        -o "$out/$t-upstream" "${link_ours[@]}" -lpthread; then
        run_case "upstream-header/$t" "$out/$t-upstream"
    fi
done

# Extension tests (ffi-tests/ext_*.c) use llama_ext_* functions, which upstream's header lacks:
# built against our header only.
for f in ffi-tests/ext_*.c; do
    [ -e "$f" ] || continue
    t="$(basename "$f" .c)"
    if build "ours/$t" "${cflags[@]}" -pedantic -I include "$f" -o "$out/$t-ours" \
        "${link_ours[@]}" -lpthread; then
        run_case "ours/$t" "$out/$t-ours"
    fi
done

if build "dlopen" "${cflags[@]}" -pedantic -I include -I "$out/gen" ffi-tests/test_dlopen.c \
    -o "$out/test_dlopen" -ldl; then
    run_case "dlopen" "$out/test_dlopen" "$LIB"
fi

# Differential: the same binary, two libraries. Skipped under sanitizers (upstream's library
# is not built with them); the plain run covers it.
if [ "$mode" = plain ]; then
    need_upstream_lib
    if build "differential-basics" "${cflags[@]}" "${UPSTREAM_INCLUDES[@]}" ffi-tests/differential.c \
        -o "$out/differential" -L "$RELEASE_DIR" -lllama -ldl; then
        differential() {
            LD_LIBRARY_PATH="$UPSTREAM_BUILD/bin" "$out/differential" >"$out/diff-upstream.txt" \
                2>"$out/diff-upstream.err" || { echo "crashed against upstream"; return 1; }
            LD_LIBRARY_PATH="$RELEASE_DIR" "$out/differential" >"$out/diff-ours.txt" \
                2>"$out/diff-ours.err" || { echo "crashed against ours"; return 1; }
            grep -q "^library: $UPSTREAM_BUILD/bin/" "$out/diff-upstream.err" \
                || { echo "upstream run did not load upstream's library:"; cat "$out/diff-upstream.err"; return 1; }
            grep -q "^library: $RELEASE_DIR/" "$out/diff-ours.err" \
                || { echo "our run did not load our library:"; cat "$out/diff-ours.err"; return 1; }
            diff -u --label upstream --label ours "$out/diff-upstream.txt" "$out/diff-ours.txt" \
                || return 1
            echo "$(wc -l <"$out/diff-ours.txt") lines identical (upstream vs ours)"
        }
        run_case "differential-basics" differential
    fi

    install_check() {
        local prefix="$out/prefix"
        make --no-print-directory -s install PREFIX="$prefix" >/dev/null || return 1
        [ -L "$prefix/lib/libllama.so" ] || { echo "lib/libllama.so is not a symlink"; return 1; }
        [ "$(readlink "$prefix/lib/libllama.so")" = libllama.so.0 ] \
            || { echo "lib/libllama.so does not point to libllama.so.0"; return 1; }
        # Flags from the installed llama.pc (pkg-config when present, else read directly).
        local pc_flags
        if command -v pkg-config >/dev/null; then
            pc_flags="$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs llama)"
        else
            pc_flags="$(python3 scripts/pc_flags.py "$prefix/lib/pkgconfig/llama.pc")"
        fi
        echo "llama.pc: $pc_flags"
        read -r -a pcf <<<"$pc_flags"
        "$CC" "${cflags[@]}" -pedantic ffi-tests/test_library.c "${pcf[@]}" -o "$out/installed" \
            || return 1
        LD_LIBRARY_PATH="$prefix/lib" "$out/installed"
    }
    run_case "install+pkgconfig" install_check
fi

say "C tests ($mode): $passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then
    say "failed: ${failures[*]}"
    exit 1
fi
