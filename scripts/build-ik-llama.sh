#!/usr/bin/env bash
# Benchmark only (never part of make test): builds ik_llama.cpp (github.com/ikawrakow/ik_llama.cpp)
# at a pinned commit, CPU only, for the host CPU (GGML_NATIVE=ON), into the cache, once; its
# llama-bench is the third column of make bench-decode-native.
# The sources come from a local git directory of ik_llama.cpp (a clone or a bare mirror):
#   IK_LLAMA_GIT_DIR=/path/to/ik_llama.cpp/.git (or a bare repo)   IK_LLAMA_COMMIT (pinned below)
# GGML_IQK_FA_ALL_QUANTS=OFF: its flash-attention kernels for the f16 KV cache only (llama-bench's
# default cache type; the others multiply the compile time of the heaviest files).
# Only the paths the CPU tools need are extracted, blob by blob (a partial snapshot may lack
# large unrelated files, such as web UI assets or vocab GGUFs, so checkout/archive can fail).
# Prints the directory of llama-bench; exits 3 with one line when there is neither a build in
# the cache nor IK_LLAMA_GIT_DIR. Usage: build-ik-llama.sh [TARGET...] (default llama-bench)
set -euo pipefail
here="$(dirname "$0")"
. "$here/env.sh"
IK_LLAMA_COMMIT="${IK_LLAMA_COMMIT:-8337e4cd3861406fc04e0854b1409cd1b027fbc9}"
root="$LLAMA_HOTSWAP_CACHE/ik_llama-${IK_LLAMA_COMMIT:0:9}"
build="$root/build"
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(llama-bench)
missing=()
for t in "${targets[@]}"; do [ -x "$build/bin/$t" ] || missing+=("$t"); done
[ "${#missing[@]}" -gt 0 ] || { echo "$build/bin"; exit 0; }
if [ -z "${IK_LLAMA_GIT_DIR:-}" ]; then
    echo "build-ik-llama: no ik_llama.cpp build in the cache and IK_LLAMA_GIT_DIR is not set (a local git directory of ik_llama.cpp holding commit $IK_LLAMA_COMMIT)" >&2
    exit 3
fi
git="git --git-dir=$IK_LLAMA_GIT_DIR"
$git cat-file -e "$IK_LLAMA_COMMIT^{commit}" 2>/dev/null \
    || { echo "build-ik-llama: $IK_LLAMA_GIT_DIR has no commit $IK_LLAMA_COMMIT" >&2; exit 1; }
"$here/setup-venv.sh" >/dev/null
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
src="$root/src"
if [ ! -f "$src/.extracted" ]; then
    rm -rf "$src.tmp" && mkdir -p "$src.tmp"
    # one `git cat-file --batch` for every blob under the paths the CPU build configures
    $git ls-tree -r "$IK_LLAMA_COMMIT" -- ggml src common include cmake examples pocs vendor \
        CMakeLists.txt CMakePresets.json >"$root/tree.txt"
    python3 - "$src.tmp" "$root/tree.txt" "$IK_LLAMA_GIT_DIR" <<'PY'
import os, subprocess, sys, threading
dst, tree, gitdir = sys.argv[1:4]
entries = []
for line in open(tree, encoding="utf-8"):
    meta, path = line.rstrip("\n").split("\t", 1)
    mode, kind, oid = meta.split()
    if kind == "blob":
        entries.append((mode, oid, path))
p = subprocess.Popen(["git", "--git-dir", gitdir, "cat-file", "--batch"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def feed():  # in a thread: the answers fill their pipe long before the questions are written
    p.stdin.write("".join(oid + "\n" for _, oid, _ in entries).encode())
    p.stdin.close()
threading.Thread(target=feed, daemon=True).start()
absent = []
for mode, oid, path in entries:
    header = p.stdout.readline().split()
    if len(header) < 3 or header[1] == b"missing":
        absent.append(path)
        continue
    size = int(header[2])
    data = p.stdout.read(size)
    p.stdout.read(1)
    out = os.path.join(dst, path)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if mode == "120000":
        os.symlink(data.decode(), out)
    else:
        with open(out, "wb") as f:
            f.write(data)
        if mode == "100755":
            os.chmod(out, 0o755)
p.wait()
print(f"build-ik-llama: {len(entries) - len(absent)} files extracted, {len(absent)} absent from the snapshot"
      + (f" (first: {absent[0]})" if absent else ""), file=sys.stderr)
PY
    touch "$src.tmp/.extracted"
    rm -rf "$src" && mv "$src.tmp" "$src"
fi
options=(-DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF -DLLAMA_BUILD_SERVER=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF)
stamp="$build/.llama-hotswap-options"
if [ ! -f "$build/build.ninja" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${options[*]}" ]; then
    mkdir -p "$build"
    "$VENV/bin/cmake" -S "$src" -B "$build" -G Ninja "${options[@]}" >"$build/configure.log" 2>&1 \
        || { tail -20 "$build/configure.log" >&2; exit 1; }
    printf '%s' "${options[*]}" >"$stamp"
fi
"$VENV/bin/cmake" --build "$build" --target "${missing[@]}" -j"$(nproc)" >"$build/build.log" 2>&1 \
    || { tail -30 "$build/build.log" >&2; exit 1; }
echo "$build/bin"
