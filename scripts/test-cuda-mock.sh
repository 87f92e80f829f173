#!/usr/bin/env bash
# The CUDA code path without a GPU: compiles every CUDA kernel to PTX with NVRTC (from PyPI),
# builds ffi-tests/mock_libcuda.c as a fake libcuda.so.1
# (host memory as device memory, delayed asynchronous copies, context-binding checks; kernel
# launches run the same CUDA source built as host C++ with an emulated grid,
# ffi-tests/mock_cuda_kernels.cpp) and runs tests/cuda.rs and tests/cuda_model.rs against it
# with LD_LIBRARY_PATH, once with one device and once with two, then the CUDA executor against
# the CPU engine on the emulated kernels (tests/cuda_compute.rs, emulated_*).
# This checks our use of the driver API (ordering, events, ranges, fallbacks), the CUDA
# executor's set-up, launch-failure path and numbers; on a machine with an NVIDIA driver the
# same driver tests then run on the real GPU.
. "$(dirname "$0")/test-common.sh"
out="$WORK/cuda-mock"
rm -rf "$out"
mkdir -p "$out"
# the kernels' host build (one KERNEL(name) per `extern "C" __global__` of kernels.cu) on the
# emulated grid, which first checks itself (shuffles, barriers, indices, reported misuse)
sed -n 's/^extern "C" __global__ void \([A-Za-z_0-9]*\).*/KERNEL(\1)/p' src/kernels/cuda/kernels.cu >"$out/kernel_names.inc"
cxx="c++ -std=gnu++17 -O2 -g -Wall -Wno-unknown-pragmas -fno-strict-aliasing -ffp-contract=off -fvisibility=hidden -fPIC"
cc -std=gnu11 -O1 -g -Wall -fPIC -c -o "$out/mock_libcuda.o" ffi-tests/mock_libcuda.c
$cxx -c -o "$out/cuda_host.o" ffi-tests/cuda_host.cpp
$cxx -Isrc/kernels/cuda -I"$out" -c -o "$out/mock_cuda_kernels.o" ffi-tests/mock_cuda_kernels.cpp
c++ -shared -o "$out/libcuda.so.1" "$out/mock_libcuda.o" "$out/mock_cuda_kernels.o" "$out/cuda_host.o" -lpthread
$cxx -o "$out/cuda_host_selftest" ffi-tests/cuda_host_selftest.cpp "$out/cuda_host.o" -lpthread
status=0
echo "--- the emulated CUDA grid's self-test"
if ! "$out/cuda_host_selftest" >"$out/selftest.log" 2>&1; then
    cat "$out/selftest.log"
    echo "the emulated grid's self-test failed"
    status=1
else
    echo "$(grep -c '^PASS ' "$out/selftest.log") checks passed"
fi
# NVRTC from PyPI (scripts/setup-venv.sh): every kernel must compile to PTX for sm_80 and sm_90.
venv="$(bash scripts/setup-venv.sh | tail -n 1)"
nvrtc="$(ls "$venv"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12 2>/dev/null | head -n 1)"
export LLAMA_HOTSWAP_NVRTC="$nvrtc" LLAMA_HOTSWAP_REQUIRE_NVRTC=1
echo "--- CUDA kernels through NVRTC ($nvrtc)"
if ! cargo test --release --test cuda_kernels >"$out/kernels.log" 2>&1; then
    tail -n 60 "$out/kernels.log"
    echo "CUDA kernels did not compile to PTX (see $out/kernels.log)"
    status=1
else
    grep -E "test result" "$out/kernels.log"
fi
for devices in 1 2; do
    echo "--- mock CUDA driver, $devices device(s)"
    LLAMA_HOTSWAP_NO_CUDA= MOCK_CUDA_DEVICES=$devices MOCK_CUDA_ABORT=1 LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        cargo test --release --test cuda --test cuda_model -- --test-threads=1 >"$out/run-$devices.log" 2>&1 || true
    grep -E "test result|skipping" "$out/run-$devices.log" || true
    if ! grep -q "test result: ok" "$out/run-$devices.log" || grep -q "skipping:" "$out/run-$devices.log"; then
        grep -nE 'panicked at|^failures:|FAILED' "$out/run-$devices.log" | head -n 40 || true
        tail -n 80 "$out/run-$devices.log"
        echo "mock CUDA run with $devices device(s) failed or skipped (see $out/run-$devices.log)"
        status=1
    fi
done
echo "--- mock CUDA driver: the CUDA executor on the kernels' host build against the CPU engine"
if ! LLAMA_HOTSWAP_NO_CUDA= MOCK_CUDA_DEVICES=1 MOCK_CUDA_ABORT=1 LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    cargo test --release --test cuda_compute emulated_ -- --nocapture --test-threads=1 >"$out/emulated.log" 2>&1 ||
    grep -q "skipping:" "$out/emulated.log" || ! grep -q "test result: ok. 1 passed" "$out/emulated.log"; then
    grep -nE '^FAIL |panicked at|MOCK VIOLATION|skipping' "$out/emulated.log" | head -n 40 || true
    tail -n 40 "$out/emulated.log"
    echo "the CUDA executor on the emulated kernels failed or skipped (see $out/emulated.log)"
    status=1
else
    echo "$(grep -c '^PASS ' "$out/emulated.log") checks passed (max KL per model: grep '^PASS' $out/emulated.log)"
    grep -E "test result" "$out/emulated.log"
fi
# On a machine with an NVIDIA driver, the same tests against the real GPU.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "--- real CUDA driver: $(nvidia-smi -L | head -n 1)"
    if ! LLAMA_HOTSWAP_NO_CUDA= cargo test --release --test cuda --test cuda_model -- --test-threads=1 \
        >"$out/run-real.log" 2>&1 || grep -q "skipping:" "$out/run-real.log"; then
        grep -nE 'panicked at|^failures:|FAILED|skipping' "$out/run-real.log" | head -n 40 || true
        echo "CUDA tests on the real GPU failed or skipped (see $out/run-real.log)"
        status=1
    else
        grep -E "test result" "$out/run-real.log"
    fi
fi
exit $status
