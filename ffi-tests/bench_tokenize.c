/*
 * Tokenizer throughput: bench_tokenize VOCAB.gguf TEXT_FILE RUNS
 * Tokenizes the whole file RUNS times (add_special, no parse_special) and prints the median
 * time, MiB/s, the token count and the process's peak RSS. Compiled on upstream's llama.h;
 * run with upstream's library and ours (scripts/bench-tokenize.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s VOCAB TEXT RUNS\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = 1;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "load failed\n"); return 1; }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n);
    if (fread(text, 1, n, f) != (size_t)n) { perror("read"); return 1; }
    fclose(f);
    int runs = atoi(argv[3]);
    int cap = (int)n + 16;
    llama_token *ids = malloc(sizeof(llama_token) * cap);
    double t[64];
    int k = 0;
    for (int r = 0; r < runs && r < 64; r++) {
        double t0 = now();
        k = llama_tokenize(v, text, (int)n, ids, cap, 1, 0);
        t[r] = now() - t0;
    }
    qsort(t, runs, sizeof(double), cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%.4f %.2f %d %ld\n", t[runs / 2], n / 1048576.0 / t[runs / 2], k, ru.ru_maxrss / 1024);
    llama_model_free(m);
    return 0;
}
