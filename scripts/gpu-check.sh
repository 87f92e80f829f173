#!/usr/bin/env bash
# The CUDA executor's checks on a lent GPU machine (no Rust toolchain, no network there): runs
# test binaries built beforehand (scripts/gpu-pack.sh puts them, this script and the model in
# one folder, with upstream's gemma3/qwen3moe fixtures), prints the GPU, the NVRTC used, every
# check's PASS/FAIL line and the figures.
# Usage: bash <folder>/gpu-check.sh   (writes logs to $OUT when set, else /tmp/gpu-check)
# With the device tool: scripts/gpu-pack.sh build/gpu locally, then run
# `bash build/gpu/gpu-check.sh` carrying build/gpu.
set -u
dir="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/gpu-check}"
mkdir -p "$out"
echo "--- $(date -u +%FT%TZ) $(cat "$dir/commit" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nvrtc="$(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' -not -name '*alt*' 2>/dev/null | sort | head -n 1)"
echo "NVRTC: $nvrtc"
export LLAMA_HOTSWAP_NVRTC="$nvrtc" LLAMA_HOTSWAP_REQUIRE_NVRTC=1 LLAMA_HOTSWAP_NO_CUDA=
export LLAMA_HOTSWAP_CACHE=/tmp/gpu-check-cache LLAMA_HOTSWAP_SMOLLM2="$dir/smollm2.gguf"
export LLAMA_HOTSWAP_GPU_FIXTURES="$dir/fixtures"
echo "SmolLM2 cut to $(cat "$dir/smollm2-layers" 2>/dev/null || echo "?") of 30 layers"
chmod +x "$dir"/bin/* 2>/dev/null
status=0
run() { # name, args...
    local name="$1"; shift
    echo "--- $name"
    timeout "${STEP_TIMEOUT:-300}" "$dir/bin/$name" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    grep -E "^(PASS|FAIL|FIGURE|SmolLM2 file|fixtures not)|test result|skipping|panicked|NVRTC [0-9]" "$out/$name.log" | head -n 160
    [ $rc -eq 0 ] || { echo "$name: exit $rc"; tail -n 25 "$out/$name.log"; status=1; }
}
run cuda_kernels --test-threads=1
run cuda_model --test-threads=1
run cuda_compute --test-threads=1 --nocapture cuda_compute_matches_the_cpu_engine
if [ $status -ne 0 ] || [ -n "${TRACE:-}" ]; then
    for case in "Q8_0 0" "F32 0" "Q8_0 1"; do
        set -- $case
        echo "--- trace tiny $1 moe=$2 (first nodes where CUDA parts from CPU)"
        LLAMA_HOTSWAP_EXEC_TRACE=1 LLAMA_HOTSWAP_TRACE_TYPE=$1 LLAMA_HOTSWAP_TRACE_MOE=$2 timeout 120 \
            "$dir/bin/cuda_compute" --ignored --nocapture --test-threads=1 trace_tiny_model >"$out/trace-$1-$2.log" 2>&1
        python3 - "$out/trace-$1-$2.log" <<'PY'
import re, sys
cpu, gpu = {}, {}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"trace (\S+) node (\d+) (\S+) \[(\S+)\]: sum (\S+) abs (\S+)", line)
    if m:
        (cpu if m[1] == "CPU" else gpu)[int(m[2])] = (m[3], m[4], float(m[5]), float(m[6]))
    elif "panicked" in line or "error" in line.lower() or line.startswith("==="):
        print(line.rstrip()[:300])
bad = 0
for i in sorted(cpu):
    if i not in gpu:
        print("node", i, cpu[i][0], "missing on GPU"); bad += 1
    else:
        a, b = cpu[i][3], gpu[i][3]
        if abs(a - b) > 1e-3 * max(abs(a), 1e-6) + 1e-6:
            print("node", i, cpu[i][:2], "cpu abs %.6e sum %.6e | gpu abs %.6e sum %.6e" % (a, cpu[i][2], b, gpu[i][2])); bad += 1
    if bad >= 8: break
print("nodes traced: cpu %d gpu %d, differing shown: %d" % (len(cpu), len(gpu), bad))
PY
    done
fi
echo "--- done: status $status"
exit $status
