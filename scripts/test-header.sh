#!/usr/bin/env bash
# include/llama.h is fresh (what the pinned cbindgen generates from src/ now) and compiles
# cleanly as C11 and C++17 with -Wall -Wextra -pedantic -Werror.
. "$(dirname "$0")/test-common.sh"
need_tools >/dev/null

dir="$WORK/header"
rm -rf "$dir"
mkdir -p "$dir"
status=0

"$LLAMA_HOTSWAP_CACHE/bin/cbindgen" --config cbindgen.toml --quiet --output "$dir/llama.h" . \
    || fail "cbindgen could not generate the header"
if cmp -s "$dir/llama.h" include/llama.h; then
    say "fresh: include/llama.h matches cbindgen $CBINDGEN_VERSION output"
else
    say "STALE: include/llama.h differs from what cbindgen generates from src/ — run \`make header\` and commit it."
    diff -u --label include/llama.h --label generated include/llama.h "$dir/llama.h" | head -60 || true
    status=1
fi

printf '#include "llama.h"\nint main(void) { return 0; }\n' >"$dir/use.c"
cp "$dir/use.c" "$dir/use.cpp"
warn=(-Wall -Wextra -pedantic -Werror)
if "$CC" -std=c11 "${warn[@]}" -I include -c "$dir/use.c" -o "$dir/use-c.o"; then
    say "compiles: C11 $CC ${warn[*]}"
else
    say "include/llama.h does not compile cleanly as C11"
    status=1
fi
if "$CXX" -std=c++17 "${warn[@]}" -I include -c "$dir/use.cpp" -o "$dir/use-cxx.o"; then
    say "compiles: C++17 $CXX ${warn[*]}"
else
    say "include/llama.h does not compile cleanly as C++17"
    status=1
fi
exit "$status"
