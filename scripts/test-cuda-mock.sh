#!/usr/bin/env bash
# The CUDA code path without a GPU: builds ffi-tests/mock_libcuda.c as a fake libcuda.so.1
# (host memory as device memory, delayed asynchronous copies, context-binding checks) and runs
# tests/cuda.rs and tests/cuda_model.rs against it with LD_LIBRARY_PATH, once with one device and once with two.
# This checks our use of the driver API (ordering, events, ranges, fallbacks); real hardware
# is checked by the same tests on a GPU machine.
. "$(dirname "$0")/test-common.sh"
out="$WORK/cuda-mock"
rm -rf "$out"
mkdir -p "$out"
cc -std=gnu11 -O1 -g -Wall -shared -fPIC -o "$out/libcuda.so.1" ffi-tests/mock_libcuda.c -lpthread
status=0
for devices in 1 2; do
    echo "--- mock CUDA driver, $devices device(s)"
    MOCK_CUDA_DEVICES=$devices MOCK_CUDA_ABORT=1 LD_LIBRARY_PATH="$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        cargo test --release --test cuda --test cuda_model -- --test-threads=1 >"$out/run-$devices.log" 2>&1 || true
    grep -E "test result|skipping" "$out/run-$devices.log" || true
    if ! grep -q "test result: ok" "$out/run-$devices.log" || grep -q "skipping:" "$out/run-$devices.log"; then
        grep -nE 'panicked at|^failures:|FAILED' "$out/run-$devices.log" | head -n 40 || true
        tail -n 80 "$out/run-$devices.log"
        echo "mock CUDA run with $devices device(s) failed or skipped (see $out/run-$devices.log)"
        status=1
    fi
done
exit $status
