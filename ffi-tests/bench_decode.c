/* One decode measurement, for `make bench-decode` (scripts/bench-decode.sh). Built once against
 * UPSTREAM's llama.h and run on either library via LD_LIBRARY_PATH, a fresh process each time.
 *
 * usage: bench_decode MODEL THREADS N_PP N_TG
 *   Loads MODEL (mmap, CPU; owned memory, no mmap, when BENCH_NO_MMAP=1), makes a context with
 *   n_threads = n_threads_batch = THREADS, warms up (one batch of N_PP tokens and one
 *   single-token step, the memory cleared after each, as llama-bench warms up), then times
 *   prompt processing (one batch of N_PP tokens, logits for the last) and, from an empty
 *   memory again, token generation (N_TG single-token steps), as llama-bench's pp/tg tests do.
 *   Tokens are fixed pseudo-random ids (BOS first when the vocab adds one).
 *   prints: "<pp tok/s> <tg tok/s> <model bytes> <peak RSS KiB>"
 *   With BENCH_CLOCK=cpu in the environment, pp and tg are timed by the process's CPU time
 *   instead of the wall clock (at 1 thread, what the work costs, without the time other
 *   processes of a shared machine held the core).
 *   With BENCH_RPC=HOST:PORT,... the rpc-servers are registered first (rpc_servers.h) and
 *   BENCH_GPU_LAYERS (default 999) layers are placed on them (make bench-rpc).
 *
 * usage: bench_decode --bandwidth THREADS MIB
 *   Read bandwidth of this machine: THREADS threads sum disjoint slices of a MIB MiB buffer
 *   (faulted in first), best of 15 passes. prints: "<GB/s> <GB/s on CPU>": bytes over the wall
 *   time, and over the longest thread's CPU time (what the memory delivers while the threads
 *   run; on a shared machine the wall-clock figure also counts time other processes held the
 *   cores).
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "llama.h"
#include "rpc_servers.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (level >= GGML_LOG_LEVEL_ERROR || getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

static bool no_dots(float p, void *u) { (void) p; (void) u; return true; }

struct slice { const uint64_t *p; size_t n; uint64_t sum; double cpu_s; };

static void *sum_slice(void *arg) {
    struct slice *s = arg;
    /* four independent accumulators so the loop is bound by loads, not by one add chain */
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b += s->p[i + 1];
        c += s->p[i + 2];
        d += s->p[i + 3];
    }
    s->sum = a + b + c + d;
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    s->cpu_s = t.tv_sec + t.tv_nsec * 1e-9;
    return NULL;
}

static int bandwidth(int threads, size_t mib) {
    if (threads < 1 || threads > 64 || mib < 1) return 2;
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) { fprintf(stderr, "out of memory\n"); return 1; }
    for (size_t i = 0; i < words; i++) buf[i] = i;
    double best = 1e30, best_cpu = 1e30;
    uint64_t total = 0;
    for (int pass = 0; pass < 15; pass++) {
        pthread_t tid[64];
        struct slice sl[64];
        size_t per = words / threads;
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            sl[t] = (struct slice) { buf + t * per, per, 0 };
            pthread_create(&tid[t], NULL, sum_slice, &sl[t]);
        }
        double cpu = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            total += sl[t].sum;
            if (sl[t].cpu_s > cpu) cpu = sl[t].cpu_s;
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
        if (cpu < best_cpu) best_cpu = cpu;
    }
    /* the checksum keeps the reads from being optimized away */
    if (total == 42) fputs("", stderr);
    printf("%.2f %.2f\n", bytes / best / 1e9, bytes / best_cpu / 1e9);
    free(buf);
    return 0;
}

static int decode_ok(struct llama_context *ctx, struct llama_batch batch, const char *what) {
    int ret = llama_decode(ctx, batch);
    if (ret != 0) {
        fprintf(stderr, "%s: llama_decode returned %d\n", what, ret);
        return 0;
    }
    llama_synchronize(ctx);
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--bandwidth") == 0) return bandwidth(atoi(argv[2]), (size_t) atol(argv[3]));
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL THREADS N_PP N_TG | --bandwidth THREADS MIB\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]), n_pp = atoi(argv[3]), n_tg = atoi(argv[4]);
    if (threads < 1 || n_pp < 1 || n_tg < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    const char *clock_env = getenv("BENCH_CLOCK");
    if (clock_env && strcmp(clock_env, "cpu") == 0) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    const char *rpc = getenv("BENCH_RPC");
    if (rpc && *rpc) {
        if (add_rpc_servers(rpc) != 0) return 1;
        mp.n_gpu_layers = getenv("BENCH_GPU_LAYERS") ? atoi(getenv("BENCH_GPU_LAYERS")) : 999;
    }
    mp.progress_callback = no_dots;
    if (getenv("BENCH_NO_MMAP") && strcmp(getenv("BENCH_NO_MMAP"), "1") == 0) mp.load_mode = LLAMA_LOAD_MODE_NONE;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) ((n_pp > n_tg ? n_pp : n_tg) + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t) n_pp;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    llama_memory_t mem = llama_get_memory(ctx);

    int n_tok = n_pp > n_tg ? n_pp : n_tg;
    llama_token *tokens = malloc(sizeof(llama_token) * n_tok);
    uint32_t rng = 12345;
    for (int i = 0; i < n_tok; i++) {
        rng = rng * 1664525u + 1013904223u;
        tokens[i] = (llama_token) ((rng >> 8) % (uint32_t) n_vocab);
    }
    if (llama_vocab_get_add_bos(vocab) && llama_vocab_bos(vocab) >= 0) tokens[0] = llama_vocab_bos(vocab);

    /* warm-up: weights paged in, thread pool up, buffers sized and touched; the batch is the
     * measured one's size, as llama-bench's warm-up runs the whole prompt test once */
    if (!decode_ok(ctx, llama_batch_get_one(tokens, n_pp), "warm-up batch")) return 1;
    llama_memory_clear(mem, true);
    if (!decode_ok(ctx, llama_batch_get_one(tokens, 1), "warm-up step")) return 1;
    llama_memory_clear(mem, true);

    double t0 = now_s();
    if (!decode_ok(ctx, llama_batch_get_one(tokens, n_pp), "pp batch")) return 1;
    double pp_s = now_s() - t0;
    llama_memory_clear(mem, true);

    t0 = now_s();
    for (int i = 0; i < n_tg; i++) {
        if (!decode_ok(ctx, llama_batch_get_one(tokens + i, 1), "tg step")) return 1;
    }
    double tg_s = now_s() - t0;
    if (!llama_get_logits_ith(ctx, -1)) { fprintf(stderr, "no logits after the last step\n"); return 1; }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%.3f %.3f %llu %ld\n", n_pp / pp_s, n_tg / tg_s, (unsigned long long) llama_model_size(model),
           ru.ru_maxrss);
    free(tokens);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
