// Self-test of the emulated grid (ffi-tests/cuda_host.h, cuda_host.cpp) that the mock driver
// runs the project's kernels on: warp shuffles (idx, up, down, xor, widths) give CUDA's lane
// values, __syncthreads orders shared-memory writes before reads, thread and block indices
// cover 3-D grids, and divergent warp operations, deadlocks and shuffles with returned lanes
// are reported. scripts/test-cuda-mock.sh builds and runs it; exit status 0 when all hold.
#include "cuda_host.h"

#include <stdio.h>
#include <string.h>

static int violations;
static char last_violation[256];
extern "C" void mock_violation(const char *what) {
    violations++;
    snprintf(last_violation, sizeof last_violation, "%s", what);
}

// out[5 * t + k]: shuffle k of thread t's value 1000 * warp + lane
__global__ void k_shuffles(int *out) {
    int t = threadIdx.x, lane = t % 32;
    int v = 1000 * (t / 32) + lane;
    out[5 * t + 0] = __shfl_sync(0xffffffffu, v, 7);
    out[5 * t + 1] = __shfl_up_sync(0xffffffffu, v, 5);
    out[5 * t + 2] = __shfl_down_sync(0xffffffffu, v, 3);
    out[5 * t + 3] = __shfl_xor_sync(0xffffffffu, v, 6);
    out[5 * t + 4] = __shfl_down_sync(0xffffffffu, v, 3, 8);
}

// a block tree sum in shared memory, and each thread reading its neighbour's write
__global__ void k_barrier(int *out) {
    __shared__ int part[256];
    __shared__ int seen[256];
    int t = threadIdx.x;
    seen[t] = 3 * t + 1 + (int)blockIdx.x;
    part[t] = t + (int)blockIdx.x;
    __syncthreads();
    int neighbour = seen[(t + 1) % 256];
    for (int o = 128; o > 0; o >>= 1) {
        if (t < o) part[t] += part[t + o];
        __syncthreads();
    }
    out[blockIdx.x * 512 + t] = neighbour;
    if (t == 0) out[blockIdx.x * 512 + 256] = part[0];
}

__global__ void k_indices(int *out) {
    int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = tx + blockDim.x * (ty + blockDim.y * tz);
    out[b * blockDim.x * blockDim.y * blockDim.z + t] =
        tx | ty << 4 | tz << 8 | blockIdx.x << 12 | blockIdx.y << 16 | blockIdx.z << 20;
}

__global__ void k_divergent(int *out) {
    int lane = threadIdx.x;
    if (lane < 16) out[lane] = __shfl_xor_sync(0xffffffffu, lane, 1);
    else __syncwarp();
}

__global__ void k_deadlock(int *out) {
    int lane = threadIdx.x;
    if (lane < 16) __syncthreads();
    else out[lane] = __shfl_down_sync(0xffffffffu, lane, 1);
}

__global__ void k_returned_lane(int *out) {
    int lane = threadIdx.x;
    if (lane == 0) return;
    out[lane] = __shfl_down_sync(0xffffffffu, lane, 1);
}

template <typename K> static int launch(K k, int *out, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz) {
    static int *slot;
    static void (*kernel)(int *);
    slot = out;
    kernel = k;
    void *params[] = {&slot};
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return cuda_host::run_grid([](void **p) { kernel(*(int **)p[0]); }, params, grid, block);
}

static int failures;
static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    if (!ok) failures++;
}

int main() {
    static int out[8192];

    int rc = launch(k_shuffles, out, 1, 1, 1, 80, 1, 1); // two full warps and one of 16
    bool ok = rc == 0 && violations == 0;
    for (int t = 0; t < 80; t++) {
        int w = t / 32, lane = t % 32, size = t < 64 ? 32 : 16;
        auto val = [&](int l) { return l < size ? 1000 * w + l : 1000 * w + lane; };
        int want[5] = {val(7), lane >= 5 ? val(lane - 5) : val(lane), lane + 3 < 32 ? val(lane + 3) : val(lane),
                       val(lane ^ 6), lane % 8 + 3 < 8 ? val(lane + 3) : val(lane)};
        for (int k = 0; k < 5; k++) ok = ok && out[5 * t + k] == want[k];
    }
    // (in the last warp of 16 lanes, a source lane beyond the block gives the lane's own value)
    check(ok, "shuffles idx/up/down/xor/width 8 give CUDA's lane values (warps of 32 and 16)");

    memset(out, 0, sizeof out);
    rc = launch(k_barrier, out, 3, 1, 1, 256, 1, 1);
    ok = rc == 0 && violations == 0;
    for (int b = 0; b < 3; b++) {
        for (int t = 0; t < 256; t++) ok = ok && out[b * 512 + t] == 3 * ((t + 1) % 256) + 1 + b;
        ok = ok && out[b * 512 + 256] == 255 * 256 / 2 + 256 * b;
    }
    check(ok, "__syncthreads orders shared-memory writes before reads (3 blocks of 256)");

    memset(out, 0xff, sizeof out);
    rc = launch(k_indices, out, 3, 2, 2, 4, 3, 2);
    ok = rc == 0 && violations == 0;
    for (int bz = 0; bz < 2; bz++)
        for (int by = 0; by < 2; by++)
            for (int bx = 0; bx < 3; bx++)
                for (int tz = 0; tz < 2; tz++)
                    for (int ty = 0; ty < 3; ty++)
                        for (int tx = 0; tx < 4; tx++) {
                            int b = bx + 3 * (by + 2 * bz), t = tx + 4 * (ty + 3 * tz);
                            ok = ok && out[b * 24 + t] == (tx | ty << 4 | tz << 8 | bx << 12 | by << 16 | bz << 20);
                        }
    check(ok, "threadIdx/blockIdx/blockDim/gridDim over a 3x2x2 grid of 4x3x2 blocks");

    rc = launch(k_divergent, out, 1, 1, 1, 32, 1, 1);
    check(rc == 1 && strstr(last_violation, "divergence"), "lanes of a warp in different warp operations: reported");
    violations = 0;

    rc = launch(k_deadlock, out, 1, 1, 1, 32, 1, 1);
    check(rc == 1 && strstr(last_violation, "deadlock"), "a deadlock (barrier against shuffle): reported");
    violations = 0;

    rc = launch(k_returned_lane, out, 1, 1, 1, 32, 1, 1);
    check(rc == 1 && strstr(last_violation, "returned"), "a shuffle with a returned lane: reported");
    violations = 0;

    // the emulation still runs after failed launches
    memset(out, 0, sizeof out);
    rc = launch(k_barrier, out, 1, 1, 1, 256, 1, 1);
    check(rc == 0 && out[256] == 255 * 256 / 2, "a launch after failed ones runs");
    return failures ? 1 : 0;
}
