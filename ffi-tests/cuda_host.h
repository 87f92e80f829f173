// CUDA's builtins for a host build of the project's kernels (src/kernels/cuda/*.cu[h]), used by
// the mock driver (ffi-tests/mock_cuda_kernels.cpp) to execute launches on the CPU.
//
// Model: one launch runs its blocks one after another on the calling OS thread; the threads
// of a block are fibers (own stacks, switched by hand) that run until they reach a
// synchronization point (__syncthreads, a warp shuffle, __syncwarp) or return, in a fixed
// round-robin order, so a launch computes the same bits every time. A warp operation completes
// when every live lane of the warp has reached it (the last lane to arrive computes every
// lane's result); __syncthreads when every live thread of the block has. Between those points
// a thread runs alone: writes are seen at once by the others (no caches, no reordering), so a
// race a GPU could show is hidden, not found. __shared__ variables are statics, shared by
// the fibers of the running block (blocks and launches never overlap).
//
// Checked, as violations of the mock (MOCK VIOLATION on stderr, abort with MOCK_CUDA_ABORT):
// lanes of one warp in different warp operations (divergence), a warp operation whose mask
// leaves out live lanes (partial masks are not emulated), a lane returning while its warp
// waits in a warp operation, a deadlock (threads waiting on each other), a pointer argument
// outside the mock's device allocations.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" void mock_violation(const char *what);

struct cuda_host_dim3 {
    unsigned x, y, z;
};

namespace cuda_host {

enum LaneState { READY, RUNNING, WAIT_WARP, WAIT_BLOCK, DONE };
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNCWARP };

// One thread of the running block.
struct Lane {
    cuda_host_dim3 idx;
    void *sp;  // saved stack pointer while switched out
    int stack; // its stack, -1 before it starts
    LaneState state;
    int warp, lane;
    // the warp operation this lane waits in
    int op_arg, op_width;
    uint64_t op_val, op_res;
};

extern Lane *current;
extern cuda_host_dim3 block_idx, block_dim, grid_dim;

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
void sync_block();

// Runs `body` (one thread's work; `params` as cuLaunchKernel's) over grid x block: 0, or 1
// when a check failed (reported through mock_violation, which the program provides).
int run_grid(void (*body)(void **), void **params, const unsigned grid[3], const unsigned block[3]);

template <typename T> static inline T warp_shuffle(WarpOp op, unsigned mask, T v, int arg, int width) {
    static_assert(sizeof(T) <= 8, "a shuffle moves up to 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = warp_op(op, mask, bits, arg, width);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}

} // namespace cuda_host

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (cuda_host::current->idx)
#define blockIdx (cuda_host::block_idx)
#define blockDim (cuda_host::block_dim)
#define gridDim (cuda_host::grid_dim)
#define warpSize 32

static inline void __syncthreads() { cuda_host::sync_block(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    cuda_host::warp_op(cuda_host::SYNCWARP, mask, 0, 0, 32);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return cuda_host::warp_shuffle(cuda_host::SHFL_IDX, mask, v, src, width);
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return cuda_host::warp_shuffle(cuda_host::SHFL_UP, mask, v, (int)d, width);
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return cuda_host::warp_shuffle(cuda_host::SHFL_DOWN, mask, v, (int)d, width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    return cuda_host::warp_shuffle(cuda_host::SHFL_XOR, mask, v, m, width);
}

static inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
static inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, 4);
    return i;
}
