#!/usr/bin/env bash
# ABI parity: sizeof/alignof/offsetof of every public struct, every enum constant, #define
# and typedef, printed by one generated probe compiled against our header and upstream's.
# Any difference in the two outputs fails.
. "$(dirname "$0")/test-common.sh"
need_upstream_source

dir="$WORK/abi"
rm -rf "$dir"
mkdir -p "$dir"
python3 scripts/abi_probe.py include/llama.h "$dir"

flags=(-std=c11 -Wall -Wextra -Werror -Wno-type-limits)
"$CC" "${flags[@]}" -include "$dir/have_upstream.h" "${UPSTREAM_INCLUDES[@]}" \
    "$dir/probe.c" -o "$dir/probe-upstream" || fail "the probe does not compile against upstream's header"
"$dir/probe-upstream" >"$dir/upstream.txt"
if ! "$CC" "${flags[@]}" -include "$dir/have_ours.h" -I include \
    "$dir/probe.c" -o "$dir/probe-ours" 2>"$dir/ours-compile.log"; then
    grep -E 'error' "$dir/ours-compile.log" | head -40 >&2
    fail "the probe does not compile against our include/llama.h (a struct member or constant of upstream's API is missing or misnamed)"
fi
"$dir/probe-ours" >"$dir/ours.txt"

status=0
lines=$(wc -l <"$dir/upstream.txt")
if ! grep -qx 'struct llama_model_params size=80 align=8' "$dir/ours.txt"; then
    say "llama_model_params is not 80 bytes / 8-aligned in our header:"
    grep '^struct llama_model_params ' "$dir/ours.txt" || true
    status=1
fi
if [ -s "$dir/missing.txt" ]; then
    say "Missing from include/llama.h ($(wc -l <"$dir/missing.txt")):"
    sed 's/^/  /' "$dir/missing.txt"
    status=1
fi
if ! diff -u --label upstream --label ours "$dir/upstream.txt" "$dir/ours.txt" >"$dir/diff.txt"; then
    say "ABI differences (- upstream, + ours):"
    # Lines of items reported missing above are left out: the list says it already.
    sed -n 's/^\(struct\|enum\|typedef\|#define\) \([A-Za-z_0-9]*\) MISSING$/\1 \2/p' "$dir/ours.txt" \
        >"$dir/missing-prefixes.txt"
    grep -E '^[-+][^-+]' "$dir/diff.txt" | grep -v ' MISSING$' \
        | grep -v -F -f <(sed 's/^\(.*\)$/-\1/' "$dir/missing-prefixes.txt") | head -200 || true
    status=1
fi
if [ "$status" = 0 ]; then
    say "ABI parity: $lines layout lines identical (upstream vs ours)"
else
    say "ABI parity FAILED (outputs in $dir)"
fi
exit "$status"
