/*
 * Hot-swap on a recurrent (or hybrid) model, on our library: the model is loaded from a copy
 * in WORKDIR with LLAMA_HOTSWAP_ENABLED=1; the prompt is decoded (logits at every position);
 * the copy is replaced (renamed over) by CHANGED, a file with one tensor's values changed, and
 * llama_reload_changed_tensors picks it up; after llama_memory_clear the prompt's logits must
 * equal, bit for bit, those of a fresh load of CHANGED (and differ from the first ones); the
 * original is put back, reloaded, and the logits must equal the first ones bit for bit.
 *
 * usage: probe_swap ORIGINAL CHANGED WORKDIR TOKEN...
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    (void) level;
    if (getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) { if (a) fclose(a); if (b) fclose(b); return -1; }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) {
        if (fwrite(buf, 1, n, b) != n) { fclose(a); fclose(b); return -1; }
    }
    fclose(a);
    return fclose(b);
}

/* replaces `path` by a copy of `from` (a new file renamed over it, as a writer should) */
static int replace(const char *from, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (copy_file(from, tmp) != 0) return -1;
    return rename(tmp, path);
}

static int n_tok;
static llama_token *toks;

/* decodes the prompt from an empty memory; returns n_tok rows of n_vocab logits */
static float *run(struct llama_context *ctx, int n_vocab) {
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch b = llama_batch_init(n_tok, 0, 1);
    for (int i = 0; i < n_tok; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_tok;
    int ret = llama_decode(ctx, b);
    llama_batch_free(b);
    if (ret != 0) { fprintf(stderr, "decode failed: %d\n", ret); return NULL; }
    float *rows = malloc(sizeof(float) * n_vocab * n_tok);
    for (int i = 0; i < n_tok; i++) memcpy(rows + (size_t) i * n_vocab, llama_get_logits_ith(ctx, i), sizeof(float) * n_vocab);
    return rows;
}

static struct llama_context *context(struct llama_model *m) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.n_ubatch = 64;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    return llama_init_from_model(m, cp);
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: probe_swap ORIGINAL CHANGED WORKDIR TOKEN...\n"); return 2; }
    const char *orig = argv[1], *changed = argv[2], *dir = argv[3];
    n_tok = argc - 4;
    toks = malloc(sizeof(llama_token) * n_tok);
    for (int i = 0; i < n_tok; i++) toks[i] = atoi(argv[4 + i]);
    setenv("LLAMA_HOTSWAP_ENABLED", "1", 1);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    char path[4096];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    if (copy_file(orig, path) != 0) { fprintf(stderr, "cannot copy %s\n", orig); return 1; }
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(path, mp);
    struct llama_model *fresh = llama_model_load_from_file(changed, mp);
    if (!m || !fresh) { fprintf(stderr, "load failed\n"); return 1; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    struct llama_context *ctx = context(m), *ctx_fresh = context(fresh);
    if (!ctx || !ctx_fresh) { fprintf(stderr, "context failed\n"); return 1; }
    size_t bytes = sizeof(float) * n_vocab * n_tok;
    float *before = run(ctx, n_vocab);
    float *want = run(ctx_fresh, n_vocab);
    if (!before || !want) return 1;
    int fails = 0;
    if (memcmp(before, want, bytes) == 0) { printf("FAIL: the changed tensor does not change the logits\n"); fails++; }
    if (replace(changed, path) != 0) { fprintf(stderr, "cannot replace %s\n", path); return 1; }
    int reloaded = llama_reload_changed_tensors(ctx);
    float *swapped = run(ctx, n_vocab);
    if (!swapped) return 1;
    int same_fresh = memcmp(swapped, want, bytes) == 0;
    printf("reload %d, swapped equals a fresh load: %d\n", reloaded, same_fresh);
    if (!reloaded || !same_fresh) fails++;
    if (replace(orig, path) != 0) { fprintf(stderr, "cannot restore %s\n", path); return 1; }
    reloaded = llama_reload_changed_tensors(ctx);
    float *back = run(ctx, n_vocab);
    if (!back) return 1;
    int same_before = memcmp(back, before, bytes) == 0;
    printf("reload back %d, equals the first decode: %d\n", reloaded, same_before);
    if (!reloaded || !same_before) fails++;
    llama_free(ctx);
    llama_free(ctx_fresh);
    llama_model_free(m);
    llama_model_free(fresh);
    free(before); free(want); free(swapped); free(back); free(toks);
    return fails ? 1 : 0;
}
