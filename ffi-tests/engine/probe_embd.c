/*
 * Embeddings differential probe: compiled against UPSTREAM's llama.h, run on upstream's
 * library and on ours.
 *
 * usage:
 *   probe_embd vocab MODEL
 *       vocab_only model: prints whether a context is created and its sizes, whether its
 *       memory is NULL and its pooling type; with PROBE_DECODE=1 also llama_decode's return
 *       value on it (upstream aborts the process there: run on ours only) and with
 *       PROBE_ENCODE=1 llama_encode's.
 *   probe_embd inembd MODEL OUT N_STEPS N_TOKENS
 *       decodes N_TOKENS input embeddings (llama_batch_init(n, n_embd, 1), deterministic
 *       values) with logits at every position, then N_STEPS single-token steps (fixed ids) on
 *       top; writes the logits as probe_decode does (int32 n_vocab, int32 n_rows, rows) and
 *       each row's argmax to stdout.
 *   probe_embd pool MODEL OUT POOLING TOKEN...
 *       embeddings on (cparams.embeddings, or llama_set_embeddings with PROBE_SET_EMBD=1),
 *       pooling POOLING (-1 unspecified, 0 none, 1 mean, 2 cls, 3 last, 4 rank), two
 *       sequences in one batch (sequence 1: the tokens reversed); writes
 *       int32 dim, int32 n_rows, rows: for NONE every token's llama_get_embeddings_ith row,
 *       else llama_get_embeddings_seq(0) and (1) (dim n_cls_out for RANK); prints the
 *       pooling type and llama_get_embeddings_seq(1)'s NULL-ness after a second decode of
 *       sequence 0 alone.
 *   probe_embd encode MODEL
 *       llama_encode on a decoder-only model (upstream crashes: ours only); prints its value.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static struct llama_model *load(const char *path, int vocab_only) {
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    return llama_model_load_from_file(path, mp);
}

static int vocab_mode(const char *path) {
    struct llama_model *model = load(path, 1);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 300;
    cp.n_batch = 128;
    cp.n_ubatch = 64;
    cp.n_seq_max = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    printf("context %s\n", ctx ? "created" : "NULL");
    if (!ctx) return 0;
    printf("n_ctx %u n_ctx_seq %u n_batch %u n_ubatch %u n_seq_max %u\n", llama_n_ctx(ctx),
           llama_n_ctx_seq(ctx), llama_n_batch(ctx), llama_n_ubatch(ctx), llama_n_seq_max(ctx));
    printf("memory %s pooling %d vocab %d\n", llama_get_memory(ctx) ? "set" : "NULL",
           (int) llama_pooling_type(ctx), llama_vocab_n_tokens(llama_model_get_vocab(model)));
    /* the NULL memory is accepted by the memory functions as upstream's */
    llama_memory_clear(llama_get_memory(ctx), true);
    printf("seq_pos_max %d\n", (int) llama_memory_seq_pos_max(llama_get_memory(ctx), 0));
    llama_token toks[3] = {1, 2, 3};
    const char *env;
    if ((env = getenv("PROBE_DECODE")) && atoi(env)) {
        printf("decode %d\n", llama_decode(ctx, llama_batch_get_one(toks, 3)));
        printf("decode empty %d\n", llama_decode(ctx, llama_batch_get_one(toks, 0)));
    }
    if ((env = getenv("PROBE_ENCODE")) && atoi(env))
        printf("encode %d\n", llama_encode(ctx, llama_batch_get_one(toks, 3)));
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static struct llama_context *context(struct llama_model *model, int n_seq, int embeddings, int pooling) {
    const char *env;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = (env = getenv("PROBE_UBATCH")) ? atoi(env) : 512;
    cp.n_seq_max = n_seq;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = embeddings;
    cp.pooling_type = pooling;
    return llama_init_from_model(model, cp);
}

static int inembd_mode(const char *path, const char *out_path, int n_steps, int n_tok) {
    struct llama_model *model = load(path, 0);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int n_embd = llama_model_n_embd(model);
    struct llama_context *ctx = context(model, 1, 0, -1);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    struct llama_batch b = llama_batch_init(n_tok, n_embd, 1);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < n_embd; i++)
            b.embd[(size_t) t * n_embd + i] = 0.05f * sinf(0.37f * i + 1.3f * t) + 0.01f * cosf(0.11f * i * (t + 1));
        b.pos[t] = t;
        b.n_seq_id[t] = 1;
        b.seq_id[t][0] = 0;
        b.logits[t] = 1;
    }
    b.n_tokens = n_tok;
    int ret = llama_decode(ctx, b);
    if (ret != 0) { fprintf(stderr, "embd decode: %d\n", ret); return 1; }
    FILE *out = fopen(out_path, "wb");
    int n_rows = n_tok + n_steps;
    fwrite(&n_vocab, 4, 1, out);
    fwrite(&n_rows, 4, 1, out);
    for (int t = 0; t < n_tok; t++) {
        float *row = llama_get_logits_ith(ctx, t);
        if (!row) { fprintf(stderr, "no logits %d\n", t); return 1; }
        fwrite(row, sizeof(float), n_vocab, out);
    }
    llama_batch_free(b);
    /* fixed tokens on top (random embeddings give flat distributions: greedy choices
     * would part on near-ties); the greedy choice of each row is printed */
    printf("%d ", argmax(llama_get_logits_ith(ctx, -1), n_vocab));
    for (int s = 0; s < n_steps; s++) {
        llama_token tok = (100 + 37 * s) % n_vocab;
        if ((ret = llama_decode(ctx, llama_batch_get_one(&tok, 1))) != 0) {
            fprintf(stderr, "step %d: %d\n", s, ret);
            return 1;
        }
        float *row = llama_get_logits_ith(ctx, -1);
        fwrite(row, sizeof(float), n_vocab, out);
        printf("%d ", argmax(row, n_vocab));
    }
    printf("\n");
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int pool_mode(const char *path, const char *out_path, int pooling, int n_tok, char **tok_args) {
    struct llama_model *model = load(path, 0);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    int n_embd = llama_model_n_embd(model);
    const char *env;
    int set_embd = (env = getenv("PROBE_SET_EMBD")) && atoi(env);
    struct llama_context *ctx = context(model, 2, !set_embd, pooling);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    if (set_embd) llama_set_embeddings(ctx, true);
    int ptype = llama_pooling_type(ctx);
    printf("pooling %d", ptype);
    struct llama_batch b = llama_batch_init(2 * n_tok, 0, 1);
    for (int s = 0; s < 2; s++) {
        for (int t = 0; t < n_tok; t++) {
            int k = s * n_tok + t;
            b.token[k] = atoi(tok_args[s ? n_tok - 1 - t : t]);
            b.pos[k] = t;
            b.n_seq_id[k] = 1;
            b.seq_id[k][0] = s;
            b.logits[k] = 1;
        }
    }
    b.n_tokens = 2 * n_tok;
    int ret = llama_decode(ctx, b);
    printf(" decode %d", ret);
    if (ret != 0) { printf("\n"); return 1; }
    FILE *out = fopen(out_path, "wb");
    int dim, n_rows;
    if (ptype == LLAMA_POOLING_TYPE_NONE) {
        dim = n_embd;
        n_rows = 2 * n_tok;
        fwrite(&dim, 4, 1, out);
        fwrite(&n_rows, 4, 1, out);
        for (int i = 0; i < n_rows; i++) {
            float *row = llama_get_embeddings_ith(ctx, i);
            if (!row) { fprintf(stderr, "no embeddings row %d\n", i); return 1; }
            fwrite(row, sizeof(float), dim, out);
        }
        printf(" seq0 %s", llama_get_embeddings_seq(ctx, 0) ? "set" : "NULL");
    } else {
        dim = ptype == LLAMA_POOLING_TYPE_RANK ? (int) llama_model_n_cls_out(model) : n_embd;
        n_rows = 2;
        fwrite(&dim, 4, 1, out);
        fwrite(&n_rows, 4, 1, out);
        for (int s = 0; s < 2; s++) {
            float *row = llama_get_embeddings_seq(ctx, s);
            if (!row) { fprintf(stderr, "no pooled embedding for sequence %d\n", s); return 1; }
            fwrite(row, sizeof(float), dim, out);
        }
        /* a second decode of sequence 0 alone: sequence 1's pooled embedding is gone */
        llama_token next = atoi(tok_args[0]);
        ret = llama_decode(ctx, llama_batch_get_one(&next, 1));
        printf(" decode2 %d seq0 %s seq1 %s", ret, llama_get_embeddings_seq(ctx, 0) ? "set" : "NULL",
               llama_get_embeddings_seq(ctx, 1) ? "set" : "NULL");
    }
    printf("\n");
    fclose(out);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

static int encode_mode(const char *path) {
    struct llama_model *model = load(path, 0);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    struct llama_context *ctx = context(model, 1, 1, -1);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    llama_token toks[3] = {1, 2, 3};
    printf("encode %d\n", llama_encode(ctx, llama_batch_get_one(toks, 3)));
    /* the context still decodes afterwards */
    printf("decode %d\n", llama_decode(ctx, llama_batch_get_one(toks, 3)));
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int main(int argc, char **argv) {
    llama_log_set(quiet, NULL);
    llama_backend_init();
    if (argc >= 3 && strcmp(argv[1], "vocab") == 0) return vocab_mode(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "encode") == 0) return encode_mode(argv[2]);
    if (argc == 6 && strcmp(argv[1], "inembd") == 0)
        return inembd_mode(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc >= 6 && strcmp(argv[1], "pool") == 0)
        return pool_mode(argv[2], argv[3], atoi(argv[4]), argc - 5, argv + 5);
    fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
    return 2;
}
