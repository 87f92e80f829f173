// A fake libcuda.so.1 for exercising src/device/cuda.rs without a GPU (scripts/test-cuda-mock.sh): device memory is host
// memory, async copies run on a worker thread per stream after a delay (so reusing a staging
// buffer before its event completes corrupts data), context binding is checked, and kernel
// launches run the project's CUDA source built for the host (mock_cuda_kernels.cpp).
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct ctx { int dev; } *CUcontext;
struct stream;
typedef struct event { struct stream *s; uint64_t target; } *CUevent;
struct op { int kind; void *dst; const void *src; size_t n; uint64_t seq; struct op *next; };
typedef struct stream {
    pthread_t thread; pthread_mutex_t mu; pthread_cond_t cv;
    struct op *head, *tail; uint64_t enqueued, completed; struct stream *next_stream;
} *CUstream;

static struct ctx ctxs[8];
static int retains[8];
static __thread CUcontext stack[32];
static __thread int depth;
static pthread_mutex_t g = PTHREAD_MUTEX_INITIALIZER;
static struct { char *p; size_t n; int pinned; } allocs[4096];
static int nallocs;
static size_t used;
static CUstream streams;
static int inited;
static int violations;

static int env_int(const char *name, int dflt) { const char *v = getenv(name); return v ? atoi(v) : dflt; }
static void violation(const char *what) {
    fprintf(stderr, "MOCK VIOLATION: %s\n", what);
    __atomic_add_fetch(&violations, 1, __ATOMIC_SEQ_CST);
    if (getenv("MOCK_CUDA_ABORT")) abort();
}
__attribute__((destructor)) static void report(void) {
    if (violations) fprintf(stderr, "MOCK: %d violations\n", violations);
    int held = 0; for (int i = 0; i < 8; i++) held += retains[i];
    if (getenv("MOCK_CUDA_VERBOSE")) fprintf(stderr, "MOCK: exit with %d allocations, %zu bytes, %d ctx refs\n", nallocs, used, held);
}
#define NEED_CTX() do { if (!inited) return 3; if (depth == 0 || stack[depth-1] == NULL) { violation("no current context"); return 201; } } while (0)

static int find(const void *p, size_t n, int pinned) {
    pthread_mutex_lock(&g);
    for (int i = 0; i < nallocs; i++) {
        char *a = allocs[i].p;
        if (allocs[i].pinned == pinned && (const char *)p >= a && (const char *)p + n <= a + allocs[i].n) { pthread_mutex_unlock(&g); return 1; }
    }
    pthread_mutex_unlock(&g);
    return 0;
}

CUresult cuInit(unsigned flags) { (void)flags; int f = env_int("MOCK_CUDA_INIT_FAIL", 0); if (f) return f; inited = 1; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) {
    switch (e) { case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0; case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; return 0; case 34: *s = "CUDA_ERROR_STUB_LIBRARY"; return 0;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0; case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0; case 500: *s = "CUDA_ERROR_NOT_FOUND"; return 0;
    case 719: *s = "CUDA_ERROR_LAUNCH_FAILED"; return 0; case 801: *s = "CUDA_ERROR_NOT_SUPPORTED"; return 0; }
    *s = NULL; return 1;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
    const char *n; if (cuGetErrorName(e, &n)) { *s = NULL; return 1; }
    *s = e == 34 ? "CUDA driver is a stub library" : "mock error"; return 0;
}
CUresult cuDeviceGetCount(int *n) { if (!inited) return 3; *n = env_int("MOCK_CUDA_DEVICES", 1); return 0; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (!inited) return 3; if (ordinal < 0 || ordinal >= env_int("MOCK_CUDA_DEVICES", 1)) return 101; *d = ordinal; return 0; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { snprintf(name, len, "Mock GPU %d", d); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    switch (attr) { case 50: *v = 0; return 0; case 33: *v = 0xc1 + d; return 0; case 34: *v = 0; return 0;
    case 75: *v = 8; return 0; case 76: *v = 0; return 0; /* compute capability 8.0 */ }
    return 1;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = (size_t)8 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { if (!inited) return 3; ctxs[d].dev = d; retains[d]++; *c = &ctxs[d]; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { retains[d]--; return 0; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { if (depth == 32) return 1; stack[depth++] = c; return 0; }
CUresult cuCtxPopCurrent_v2(CUcontext *c) { if (depth == 0) { violation("pop of empty stack"); return 201; } *c = stack[--depth]; return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { NEED_CTX(); *t = (size_t)8 << 30; *f = *t - used; return 0; }

static void drain_all(void);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    NEED_CTX();
    if (n == 0) return 1;
    if (used + n > ((size_t)8 << 30)) return 2;
    char *m = malloc(n); if (!m) return 2;
    memset(m, 0xAB, n < 4096 ? n : 4096);
    pthread_mutex_lock(&g); allocs[nallocs].p = m; allocs[nallocs].n = n; allocs[nallocs].pinned = 0; nallocs++; used += n; pthread_mutex_unlock(&g);
    *p = (CUdeviceptr)(uintptr_t)m; return 0;
}
static CUresult release(void *p, int pinned) {
    pthread_mutex_lock(&g);
    for (int i = 0; i < nallocs; i++) if (allocs[i].p == p && allocs[i].pinned == pinned) {
        if (!pinned) used -= allocs[i].n;
        allocs[i] = allocs[--nallocs]; pthread_mutex_unlock(&g); free(p); return 0;
    }
    pthread_mutex_unlock(&g); violation("free of unknown pointer"); return 1;
}
CUresult cuMemFree_v2(CUdeviceptr p) { NEED_CTX(); drain_all(); return release((void *)(uintptr_t)p, 0); }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags; NEED_CTX();
    if (getenv("MOCK_CUDA_NO_PINNED")) return 2;
    char *m = malloc(n); if (!m) return 2;
    memset(m, 0xCD, n);
    pthread_mutex_lock(&g); allocs[nallocs].p = m; allocs[nallocs].n = n; allocs[nallocs].pinned = 1; nallocs++; pthread_mutex_unlock(&g);
    *p = m; return 0;
}
CUresult cuMemFreeHost(void *p) { NEED_CTX(); return release(p, 1); }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
    NEED_CTX(); if (!find((void *)(uintptr_t)d, n, 0)) { violation("HtoD outside an allocation"); return 1; }
    drain_all(); memcpy((void *)(uintptr_t)d, s, n); return 0;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr s, size_t n) {
    NEED_CTX(); if (!find((void *)(uintptr_t)s, n, 0)) { violation("DtoH outside an allocation"); return 1; }
    drain_all(); memcpy(dst, (void *)(uintptr_t)s, n); return 0;
}

static void *worker(void *arg) {
    CUstream s = arg; int delay = env_int("MOCK_CUDA_DELAY_US", 300);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head) pthread_cond_wait(&s->cv, &s->mu);
        struct op *o = s->head;
        pthread_mutex_unlock(&s->mu);
        if (o->kind == 0) { if (delay) usleep(delay); memcpy(o->dst, o->src, o->n); }
        if (o->kind == 2) { pthread_mutex_lock(&s->mu); s->head = NULL; pthread_mutex_unlock(&s->mu); return NULL; }
        pthread_mutex_lock(&s->mu);
        s->head = o->next; if (!s->head) s->tail = NULL;
        s->completed = o->seq;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(o);
    }
}
static uint64_t enqueue(CUstream s, int kind, void *dst, const void *src, size_t n) {
    struct op *o = calloc(1, sizeof *o); o->kind = kind; o->dst = dst; o->src = src; o->n = n;
    pthread_mutex_lock(&s->mu);
    o->seq = ++s->enqueued;
    if (s->tail) s->tail->next = o; else s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return o->seq;
}
static void wait_seq(CUstream s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}
static void drain_all(void) {
    pthread_mutex_lock(&g); CUstream s = streams; pthread_mutex_unlock(&g);
    for (; s; s = s->next_stream) { pthread_mutex_lock(&s->mu); uint64_t e = s->enqueued; pthread_mutex_unlock(&s->mu); wait_seq(s, e); }
}
CUresult cuStreamCreate(CUstream *out, unsigned flags) {
    (void)flags; NEED_CTX();
    CUstream s = calloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL); pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->thread, NULL, worker, s);
    pthread_mutex_lock(&g); s->next_stream = streams; streams = s; pthread_mutex_unlock(&g);
    *out = s; return 0;
}
CUresult cuStreamSynchronize(CUstream s) { NEED_CTX(); pthread_mutex_lock(&s->mu); uint64_t e = s->enqueued; pthread_mutex_unlock(&s->mu); wait_seq(s, e); return 0; }
CUresult cuStreamDestroy_v2(CUstream s) { NEED_CTX(); cuStreamSynchronize(s); return 0; /* leaked on purpose: drain_all walks the list */ }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *src, size_t n, CUstream s) {
    NEED_CTX();
    if (!find((void *)(uintptr_t)d, n, 0)) { violation("async HtoD outside an allocation"); return 1; }
    if (!find(src, n, 1)) { violation("async HtoD from pageable memory"); return 1; }
    enqueue(s, 0, (void *)(uintptr_t)d, src, n); return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr s, size_t n, CUstream st) {
    NEED_CTX();
    if (!find((void *)(uintptr_t)s, n, 0)) { violation("async DtoH outside an allocation"); return 1; }
    if (!find(dst, n, 1)) { violation("async DtoH into pageable memory"); return 1; }
    enqueue(st, 0, dst, (const void *)(uintptr_t)s, n); return 0;
}
CUresult cuEventCreate(CUevent *e, unsigned flags) { (void)flags; NEED_CTX(); *e = calloc(1, sizeof **e); return 0; }
CUresult cuEventRecord(CUevent e, CUstream s) { NEED_CTX(); e->s = s; e->target = enqueue(s, 1, NULL, NULL, 0); return 0; }
CUresult cuEventSynchronize(CUevent e) { NEED_CTX(); if (e->s) wait_seq(e->s, e->target); return 0; }
CUresult cuEventDestroy_v2(CUevent e) { NEED_CTX(); free(e); return 0; }

// Compute: modules are accepted (the PTX must look like NVRTC's output); kernels are looked up
// in, and launches run by, the host build of the same CUDA source (mock_cuda_kernels.cpp: an
// emulated grid, blocks in order, a block's threads as fibers). A launch waits for every
// stream's queued copies (the legacy default stream's ordering) and completes before it
// returns. MOCK_CUDA_REFUSE_LAUNCH=1 refuses launches with CUDA_ERROR_NOT_SUPPORTED instead.
const void *mock_kernel_lookup(const char *name);
int mock_kernel_run(const void *entry, const unsigned grid[3], const unsigned block[3], unsigned shared, void **params);
void mock_violation(const char *what) { violation(what); }
int mock_is_device_pointer(const void *p) { return find(p, 1, 0); }
typedef struct module { int loaded; } *CUmodule;
static int modules;
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    NEED_CTX();
    if (!strstr((const char *)image, ".entry")) return 218;
    *m = calloc(1, sizeof **m); (*m)->loaded = 1; __atomic_add_fetch(&modules, 1, __ATOMIC_SEQ_CST); return 0;
}
CUresult cuModuleGetFunction(void **f, CUmodule m, const char *name) {
    NEED_CTX(); if (!m || !m->loaded) { violation("function of an unloaded module"); return 1; }
    const void *entry = mock_kernel_lookup(name);
    if (!entry) return 500; /* CUDA_ERROR_NOT_FOUND */
    *f = (void *)entry; return 0;
}
CUresult cuModuleUnload(CUmodule m) { NEED_CTX(); if (!m || !m->loaded) { violation("double unload"); return 1; } m->loaded = 0; free(m); __atomic_sub_fetch(&modules, 1, __ATOMIC_SEQ_CST); return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
    NEED_CTX();
    if (getenv("MOCK_CUDA_REFUSE_LAUNCH")) return 801;
    if (s != NULL || extra != NULL) { violation("launch on a created stream or with extra (not emulated)"); return 1; }
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    drain_all();
    return mock_kernel_run(f, grid, block, shared, params) ? 719 /* CUDA_ERROR_LAUNCH_FAILED */ : 0;
}
CUresult cuCtxSynchronize(void) { NEED_CTX(); drain_all(); return 0; }
