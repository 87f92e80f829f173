// The emulated grid of ffi-tests/cuda_host.h: blocks in order on the calling thread, a block's
// threads as fibers switched at synchronization points (see the header for the model and
// what it checks). Linked into the mock driver (mock_cuda_kernels.cpp) and its self-test
// (cuda_host_selftest.cpp); the program provides mock_violation.
#include "cuda_host.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

extern "C" {
// (x86-64, below) saves the callee-saved registers on the current stack, stores the stack
// pointer in *save, switches to `to` and restores its registers (System V: the rest is
// caller-saved)
__attribute__((visibility("hidden"))) void cuda_host_switch(void **save, void *to);
}

namespace cuda_host {

Lane *current;
cuda_host_dim3 block_idx, block_dim, grid_dim;

namespace {

struct Warp {
    int size, arrived, done;
    int op;
    unsigned mask;
};

constexpr size_t STACK_BYTES = 128 << 10; // its lowest page a guard
constexpr int MAX_THREADS = 1024;

Lane *lanes;
int n_lanes;       // threads of the running block
int n_done;        // of them returned
int barrier_count; // of them waiting in __syncthreads
Warp warps[MAX_THREADS / 32];
void (*running_thunk)(void **);
void **running_params;
int launch_failed;

// Stacks: a thread takes one when it starts and gives it back when it returns, so a kernel
// without synchronization runs every thread on the same (cached) stack.
char *stacks;
int free_stacks[MAX_THREADS];
int n_free;
int returned; // the lane that just returned (its stack is freed on the launch's stack)

#if defined(__x86_64__)
void *main_sp;
asm(R"(
    .text
    .p2align 4
    .globl cuda_host_switch
    .hidden cuda_host_switch
    .type cuda_host_switch,@function
cuda_host_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_host_switch, .-cuda_host_switch
)");
#else
ucontext_t main_ctx;
ucontext_t *contexts; // one a stack
#endif

void fiber_entry();

// Gives a lane that has not started a stack and a first frame that enters fiber_entry.
void prepare(Lane *l) {
    if (l->stack >= 0) return;
    int s = free_stacks[--n_free];
    l->stack = s;
    // stack tops staggered by 64-byte lines, so that the threads' frames do not all fall in
    // the same cache sets
    char *top = stacks + (size_t)(s + 1) * STACK_BYTES - (size_t)((s * 13) % 512) * 64;
#if defined(__x86_64__)
    // as if fiber_entry had been called: its return address slot (never used), then the
    // address cuda_host_switch's `ret` jumps to, then six saved registers
    void **sp = (void **)((uintptr_t)top & ~(uintptr_t)15);
    *--sp = nullptr;
    *--sp = (void *)&fiber_entry;
    for (int r = 0; r < 6; r++) *--sp = nullptr;
    l->sp = sp;
#else
    ucontext_t *c = &contexts[s];
    getcontext(c);
    c->uc_stack.ss_sp = stacks + (size_t)s * STACK_BYTES + 4096;
    c->uc_stack.ss_size = (size_t)(top - (char *)c->uc_stack.ss_sp);
    c->uc_link = nullptr;
    makecontext(c, fiber_entry, 0);
#endif
}

void switch_to(Lane *from, Lane *to) {
    prepare(to);
    to->state = RUNNING;
    current = to;
#if defined(__x86_64__)
    cuda_host_switch(&from->sp, to->sp);
#else
    swapcontext(&contexts[from->stack], &contexts[to->stack]);
#endif
}

void switch_to_main(Lane *from) {
    current = nullptr;
#if defined(__x86_64__)
    cuda_host_switch(&from->sp, main_sp);
#else
    swapcontext(&contexts[from->stack], &main_ctx);
#endif
}

void fail(const char *what) {
    mock_violation(what);
    launch_failed = 1;
}

// The next ready lane after lane i0 in round-robin order, or null.
Lane *next_ready(int i0) {
    for (int k = 1; k <= n_lanes; k++) {
        Lane *l = &lanes[(i0 + k) % n_lanes];
        if (l->state == READY) return l;
    }
    return nullptr;
}

// Runs the next ready thread after `me` (which now waits); back to the launch's stack when
// none is ready (a deadlock).
void yield_next(Lane *me) {
    Lane *l = next_ready((int)(me - lanes));
    if (l) {
        switch_to(me, l);
    } else {
        switch_to_main(me);
    }
}

// Completes warp w's operation: every live lane's result from its source lane's value.
void release_warp(Warp &w, int wi, Lane *me) {
    Lane *base = &lanes[wi * 32];
    for (int i = 0; i < w.size; i++) {
        Lane *l = &base[i];
        if (l->state == DONE) continue;
        int width = l->op_width, seg = i & ~(width - 1), src = i;
        switch (w.op) {
        case SHFL_IDX: src = seg + (l->op_arg & (width - 1)); break;
        case SHFL_UP: src = (i - seg) - l->op_arg >= 0 ? i - l->op_arg : i; break;
        case SHFL_DOWN: src = (i - seg) + l->op_arg < width ? i + l->op_arg : i; break;
        case SHFL_XOR: src = i ^ l->op_arg; src = (src & ~(width - 1)) == seg ? src : i; break;
        default: break;
        }
        // a source lane that returned or does not exist: the lane's own value
        l->op_res = src < w.size && base[src].state != DONE ? base[src].op_val : l->op_val;
        if (l != me) l->state = READY;
    }
    w.arrived = 0;
}

// Runs block block_idx to completion (or to a deadlock).
void run_block() {
    unsigned n = block_dim.x * block_dim.y * block_dim.z;
    n_lanes = (int)n;
    n_done = 0;
    barrier_count = 0;
    for (int w = 0; w < (n_lanes + 31) / 32; w++) {
        warps[w].size = n_lanes - 32 * w < 32 ? n_lanes - 32 * w : 32;
        warps[w].arrived = 0;
        warps[w].done = 0;
    }
    for (int i = 0; i < n_lanes; i++) {
        Lane *l = &lanes[i];
        l->idx.x = i % block_dim.x;
        l->idx.y = (i / block_dim.x) % block_dim.y;
        l->idx.z = i / (block_dim.x * block_dim.y);
        l->state = READY;
        l->warp = i / 32;
        l->lane = i % 32;
        l->stack = -1;
    }
    if (n_free != MAX_THREADS) { // first block, or after a deadlock
        n_free = 0;
        for (int s = MAX_THREADS - 1; s >= 0; s--) free_stacks[n_free++] = s;
    }
    int last = n_lanes - 1;
    for (;;) {
        Lane *l = next_ready(last);
        if (!l) break;
        prepare(l);
        l->state = RUNNING;
        current = l;
        returned = -1;
#if defined(__x86_64__)
        cuda_host_switch(&main_sp, l->sp);
#else
        swapcontext(&main_ctx, &contexts[l->stack]);
#endif
        if (returned < 0) break; // no thread ready: a deadlock
        free_stacks[n_free++] = lanes[returned].stack;
        last = returned;
    }
    if (n_done != n_lanes)
        fail("kernel deadlock: threads wait on each other (a barrier or warp operation some never reach)");
}

void fiber_entry() {
    running_thunk(running_params);
    Lane *me = current;
    me->state = DONE;
    n_done++;
    Warp &w = warps[me->warp];
    w.done++;
    if (w.arrived > 0 && w.arrived + w.done == w.size) {
        fail("a lane returned while its warp waits in a shuffle or __syncwarp");
        release_warp(w, me->warp, me);
    }
    if (barrier_count > 0 && barrier_count + n_done == n_lanes) {
        // exited threads count as arrived (as on the hardware)
        for (int i = 0; i < n_lanes; i++)
            if (lanes[i].state == WAIT_BLOCK) lanes[i].state = READY;
        barrier_count = 0;
    }
    returned = (int)(me - lanes);
    switch_to_main(me);
    abort(); // a returned thread is never resumed
}

} // namespace

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    Lane *me = current;
    Warp &w = warps[me->warp];
    unsigned live = w.size == 32 ? 0xffffffffu : (1u << w.size) - 1;
    bool width_ok = width > 0 && width <= 32 && !(width & (width - 1));
    if ((mask & live) != live) fail("a warp operation with a partial mask (not emulated)");
    if (!width_ok) fail("a shuffle width that is not a power of two <= 32");
    if (w.arrived == 0) {
        w.op = op;
        w.mask = mask;
    } else if (w.op != (int)op || w.mask != mask) {
        fail("lanes of one warp in different warp operations (divergence)");
    }
    me->op_val = value;
    me->op_arg = arg;
    me->op_width = width_ok ? width : 32;
    w.arrived++;
    if (w.arrived + w.done == w.size) {
        if (w.done) fail("a warp operation with lanes that returned");
        release_warp(w, me->warp, me);
        return me->op_res;
    }
    me->state = WAIT_WARP;
    yield_next(me);
    return me->op_res;
}

void sync_block() {
    Lane *me = current;
    barrier_count++;
    if (barrier_count + n_done == n_lanes) {
        for (int i = 0; i < n_lanes; i++)
            if (lanes[i].state == WAIT_BLOCK) lanes[i].state = READY;
        barrier_count = 0;
        return;
    }
    me->state = WAIT_BLOCK;
    yield_next(me);
}

} // namespace cuda_host

namespace cuda_host {

namespace {
pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
}

int run_grid(void (*body)(void **), void **params, const unsigned grid[3], const unsigned block[3]) {
    unsigned n = block[0] * block[1] * block[2];
    if (n == 0 || n > MAX_THREADS || grid[0] == 0 || grid[1] == 0 || grid[2] == 0) {
        mock_violation("a launch with an empty grid or more than 1024 threads a block");
        return 1;
    }
    pthread_mutex_lock(&launch_lock);
    if (!lanes) {
        lanes = (Lane *)calloc(MAX_THREADS, sizeof(Lane));
        // one stack a thread, its lowest page a guard (an overflow faults)
        stacks = (char *)mmap(nullptr, MAX_THREADS * STACK_BYTES, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (!lanes || stacks == MAP_FAILED) abort();
        for (int i = 0; i < MAX_THREADS; i++) mprotect(stacks + (size_t)i * STACK_BYTES, 4096, PROT_NONE);
#if !defined(__x86_64__)
        contexts = (ucontext_t *)calloc(MAX_THREADS, sizeof(ucontext_t));
#endif
    }
    launch_failed = 0;
    running_thunk = body;
    running_params = params;
    block_dim = {block[0], block[1], block[2]};
    grid_dim = {grid[0], grid[1], grid[2]};
    for (unsigned z = 0; z < grid[2] && !launch_failed; z++)
        for (unsigned y = 0; y < grid[1] && !launch_failed; y++)
            for (unsigned x = 0; x < grid[0] && !launch_failed; x++) {
                block_idx = {x, y, z};
                run_block();
            }
    int failed = launch_failed;
    pthread_mutex_unlock(&launch_lock);
    return failed;
}

} // namespace cuda_host
