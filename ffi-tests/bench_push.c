/* make bench-push: what pushing a whole model's full-precision weights into a loaded model
 * (`llama_ext_tensors_push`, each tensor quantized to its current type and stored as one
 * transaction) costs next to quantizing the same weights into a file (`llama_model_quantize`),
 * the goal being push <= 1.2x quantize. Same process, interleaved, ROUNDS rounds; prints per
 * round the wall and CPU milliseconds of each, then the medians of the per-round ratios.
 * usage: bench_push SOURCE_F16.gguf BASE.gguf FTYPE OUT_TMP.gguf ROUNDS THREADS
 *   BASE is SOURCE quantized with llama-quantize FTYPE (so push and quantize write the same
 *   types); needs LLAMA_HOTSWAP_ENABLED=1. */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void) l; (void) t; (void) u; }

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3
         + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t) n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The tensor names of the placement report (`"tensors":[{"name":"..."`). */
static int tensor_names(const struct llama_model *m, char ***names) {
    int32_t len = llama_ext_model_placement_json(m, NULL, 0);
    char *json = malloc((size_t) len + 1);
    llama_ext_model_placement_json(m, json, (size_t) len + 1);
    char *p = strstr(json, "\"tensors\":");
    int n = 0;
    *names = NULL;
    while (p && (p = strstr(p, "{\"name\":\"")) != NULL) {
        p += 9;
        char *end = strchr(p, '"');
        *names = realloc(*names, sizeof(char *) * (size_t) (n + 1));
        (*names)[n++] = strndup(p, (size_t) (end - p));
        p = end;
    }
    free(json);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_push SOURCE BASE FTYPE OUT ROUNDS THREADS\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    int ftype = atoi(argv[3]), rounds = atoi(argv[5]), threads = atoi(argv[6]);
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *src = llama_model_load_from_file(argv[1], mp);
    struct llama_model *base = llama_model_load_from_file(argv[2], mp);
    if (!src || !base) { fprintf(stderr, "load failed\n"); return 1; }

    char **names;
    int n = tensor_names(base, &names);
    struct llama_ext_tensor_push *items = calloc((size_t) n, sizeof *items);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        struct llama_ext_tensor_info info;
        if (llama_ext_tensor_info(src, names[i], &info) != 0) { fprintf(stderr, "no %s in the source\n", names[i]); return 1; }
        void *data = malloc(info.nbytes);
        if (llama_ext_tensor_read(src, names[i], data, info.nbytes) < 0) { fprintf(stderr, "read %s\n", names[i]); return 1; }
        items[i] = (struct llama_ext_tensor_push) {
            .name = names[i], .src_type = info.type, .data = data, .size = info.nbytes,
            .dst_type = -1, .imatrix = NULL, .n_imatrix = 0,
        };
        total += info.nbytes;
    }
    llama_model_free(src);

    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = (enum llama_ftype) ftype;
    qp.nthread = threads;
    double *rw = malloc(sizeof(double) * (size_t) rounds), *rc = malloc(sizeof(double) * (size_t) rounds);
    printf("round push_wall_ms push_cpu_ms quantize_wall_ms quantize_cpu_ms\n");
    for (int r = 0; r < rounds; r++) {
        double w0 = wall_ms(), c0 = cpu_ms();
        int32_t got = llama_ext_tensors_push(base, items, (size_t) n, threads);
        double w1 = wall_ms(), c1 = cpu_ms();
        if (got != n) { fprintf(stderr, "push returned %d of %d\n", got, n); return 1; }
        if (llama_model_quantize(argv[1], argv[4], &qp) != 0) { fprintf(stderr, "quantize failed\n"); return 1; }
        double w2 = wall_ms(), c2 = cpu_ms();
        printf("%d %.1f %.1f %.1f %.1f\n", r, w1 - w0, c1 - c0, w2 - w1, c2 - c1);
        rw[r] = (w1 - w0) / (w2 - w1);
        rc[r] = (c1 - c0) / (c2 - c1);
    }
    remove(argv[4]);
    printf("tensors %d, source bytes %zu, threads %d\n", n, total, threads);
    printf("median push/quantize: wall %.3fx, cpu %.3fx (goal <= 1.2x)\n", median(rw, rounds), median(rc, rounds));
    llama_model_free(base);
    return 0;
}
