# Sourced by the scripts/test-*.sh parts: repository root, cache paths, and idempotent
# "make sure X exists" helpers, so every part also works on its own from a fresh clone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/env.sh"

# The parts compare our library with upstream's CPU build, so a real GPU must not take layers
# that upstream keeps on the CPU: CUDA is off unless the caller set the variable. The CUDA part
# (test-cuda-mock.sh) turns it back on for the mock driver and, where one exists, a real GPU.
export LLAMA_HOTSWAP_NO_CUDA="${LLAMA_HOTSWAP_NO_CUDA-1}"

# The parts compare our library with upstream's portable build bit for bit where it is today:
# they run our exact kernel mode unless the caller chose (scripts/test-engine.sh compares the
# fast mode, our default, with it).
export LLAMA_HOTSWAP_EXACT="${LLAMA_HOTSWAP_EXACT-1}"

RELEASE_DIR="$ROOT/target/release"
LIB="$RELEASE_DIR/libllama.so"
# Scratch space for generated sources and binaries (ignored by git, removed by cargo clean).
WORK="$ROOT/target/ffi-tests"
mkdir -p "$WORK"

UPSTREAM_INCLUDES=(-I "$UPSTREAM_LLAMA/include" -I "$UPSTREAM_LLAMA/ggml/include")
CC="${CC:-gcc}"
CXX="${CXX:-g++}"

say() { printf '%s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

need_upstream_source() { bash "$ROOT/scripts/fetch-upstream.sh" >/dev/null; }
need_venv() { bash "$ROOT/scripts/setup-venv.sh" >/dev/null; }
need_upstream_lib() { bash "$ROOT/scripts/build-upstream.sh" >/dev/null; }
need_tools() { bash "$ROOT/scripts/install-tools.sh"; }

# Builds the release library unless the test runner already did (LLAMA_HOTSWAP_BUILT=1).
need_library() {
    if [ "${LLAMA_HOTSWAP_BUILD_FAILED:-0}" = 1 ]; then
        fail "the release build failed (see its output above)"
    fi
    if [ "${LLAMA_HOTSWAP_BUILT:-0}" != 1 ]; then
        if ! cargo build --release --lib >"$WORK/cargo-build.log" 2>&1; then
            tail -n 40 "$WORK/cargo-build.log" >&2
            fail "cargo build --release failed"
        fi
    fi
    [ -f "$LIB" ] || fail "$LIB is missing (the release build failed?)"
    # Programs linked with -lllama record the SONAME, libllama.so.0; cargo only writes
    # libllama.so, so give the loader the SONAME next to it (as `make install` does).
    ln -sf libllama.so "$RELEASE_DIR/libllama.so.0"
}
