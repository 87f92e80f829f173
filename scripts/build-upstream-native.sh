#!/usr/bin/env bash
# Benchmark only (never part of make test): upstream built for the host CPU. The pinned sources
# the cache already holds (scripts/fetch-upstream.sh) are configured a second time, in a build
# tree of their own ($LLAMA_HOTSWAP_CACHE/upstream-native-$UPSTREAM_VERSION), with
# GGML_NATIVE=ON (-march=native) and AMX off: upstream's AMX matmul segfaults on the first
# prompt batch in the Intel VMs this project runs on (docs/benchmarks.md), so the AMX
# instructions are switched off explicitly (-mno-amx-*: an explicit -mno-X wins over what
# -march=native implies, whatever the order); AVX-512/VNNI/BF16 and the rest stay on where the
# CPU has them. On a CPU without AMX those flags change nothing.
# Only the CPU backend is compiled there: in upstream's CMake, GGML_NATIVE adds -march=native to
# libggml-cpu alone (libllama, libggml-base, libggml, common and the programs are compiled
# without architecture flags in both configurations), so the native build is the portable
# tree's libraries and programs (scripts/build-upstream-tools.sh) with this libggml-cpu.so.0.
# Prints a directory holding links to both, to put first on LD_LIBRARY_PATH and run the
# programs from. Cached. Usage: build-upstream-native.sh [PROGRAM...] (default llama-bench)
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
programs=("$@")
[ "${#programs[@]}" -gt 0 ] || programs=(llama-bench)
portable="$(bash "$here/build-upstream-tools.sh" "${programs[@]}")"
build="$LLAMA_HOTSWAP_CACHE/upstream-native-$UPSTREAM_VERSION"
run="$build/run"
mkdir -p "$build"
exec 9>"$build.lock"
flock 9
if [ ! -f "$build/bin/libggml-cpu.so.0" ]; then
    no_amx=""
    for f in -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -mno-amx-fp16 -mno-amx-complex; do
        # only the flags this compiler knows (older ones lack the newer AMX names)
        echo 'int main(void){return 0;}' | cc "$f" -x c - -o /dev/null 2>/dev/null && no_amx="$no_amx $f"
    done
    options=(-DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
        -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
        "-DCMAKE_C_FLAGS=${no_amx# }" "-DCMAKE_CXX_FLAGS=${no_amx# }")
    "$VENV/bin/cmake" -S "$UPSTREAM_LLAMA" -B "$build" -G Ninja "${options[@]}" >"$build/configure.log" 2>&1 \
        || { tail -20 "$build/configure.log" >&2; exit 1; }
    "$VENV/bin/cmake" --build "$build" --target ggml-cpu -j"$(nproc)" >"$build/build.log" 2>&1 \
        || { tail -30 "$build/build.log" >&2; exit 1; }
fi
# the flags the CPU backend was compiled with, for the benchmark's table
grep -m1 -A4 'ggml-cpu.dir/ggml-cpu/ggml-cpu.c.o:' "$build/build.ninja" | grep -m1 'FLAGS =' \
    | sed 's/^ *FLAGS = //' >"$build/cpu-flags.txt"
rm -rf "$run.tmp" && mkdir -p "$run.tmp"
for f in "$portable"/*; do
    case "$(basename "$f")" in libggml-cpu.so*) ;; *) ln -s "$f" "$run.tmp/" ;; esac
done
for f in "$build"/bin/libggml-cpu.so*; do ln -s "$f" "$run.tmp/"; done
rm -rf "$run" && mv "$run.tmp" "$run"
echo "$run"
