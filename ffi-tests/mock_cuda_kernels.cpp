// The mock driver's kernel execution (ffi-tests/mock_libcuda.c): the project's CUDA kernels
// (src/kernels/cuda/quant.cuh + kernels.cu, the same text NVRTC compiles) built as host C++
// with cuda_host.h, and a launch run on the CPU with an emulated grid (see cuda_host.h for the
// model). scripts/test-cuda-mock.sh builds it with -I src/kernels/cuda and -I a folder holding
// kernel_names.inc: one KERNEL(name) line per `extern "C" __global__` of kernels.cu.
#include "cuda_host.h"

#include <stdio.h>

#include <cstddef>
#include <type_traits>
#include <utility>

#include "quant.cuh"
#include "kernels.cu"

extern "C" {
// from mock_libcuda.c
int mock_is_device_pointer(const void *p);
}

namespace {

// Argument i of a launch, as the driver copies it from its parameter slot: sizeof(T) bytes.
template <typename T> T load(void *slot) {
    T v;
    memcpy(&v, slot, sizeof(T));
    return v;
}

// Pointer arguments must be null or inside a device allocation of the mock.
template <typename T> void check_argument(void *slot, const char *kernel, int *bad) {
    if constexpr (std::is_pointer_v<T>) {
        T v = load<T>(slot);
        if (v && !mock_is_device_pointer((const void *)v)) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: a pointer argument outside device memory", kernel);
            mock_violation(msg);
            *bad = 1;
        }
    }
}

template <typename... A> int check_args(void (*)(A...), void **params, const char *name) {
    int bad = 0;
    size_t i = 0;
    ((check_argument<A>(params[i++], name, &bad)), ...);
    return bad;
}

template <typename... A, size_t... I> void run_args_at(void (*k)(A...), void **params, std::index_sequence<I...>) {
    k(load<A>(params[I])...);
}

template <typename... A> void run_args(void (*k)(A...), void **params) {
    run_args_at(k, params, std::index_sequence_for<A...>{});
}

struct KernelEntry {
    const char *name;
    int (*check)(void **params); // reads the pointer arguments, 1 if one is outside device memory
    void (*run)(void **params);  // one thread's body
};

#define KERNEL(name) {#name, [](void **p) { return check_args(name, p, #name); }, [](void **p) { run_args(name, p); }},

const KernelEntry KERNELS[] = {
#include "kernel_names.inc"
};

} // namespace

extern "C" {

// The entry of kernel `name`, or null when the kernels hold no such `extern "C" __global__`.
__attribute__((visibility("default"))) const void *mock_kernel_lookup(const char *name) {
    for (const KernelEntry &e : KERNELS)
        if (!strcmp(e.name, name)) return &e;
    return nullptr;
}

// Runs a launch of `entry` to completion on the calling thread: 0, or 1 when a check failed
// (the mock's violation says which).
__attribute__((visibility("default"))) int mock_kernel_run(const void *entry, const unsigned grid[3],
                                                           const unsigned block[3], unsigned shared,
                                                           void **params) {
    const KernelEntry *e = (const KernelEntry *)entry;
    if (shared) {
        mock_violation("dynamic shared memory (not emulated)");
        return 1;
    }
    if (e->check(params)) return 1;
    return cuda_host::run_grid(e->run, params, grid, block);
}

} // extern "C"
