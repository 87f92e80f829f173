/*
 * Diffusion-model probe (dream, llada, llada-moe, rnd1: models without memory, whose decode is
 * upstream's encode): compiled against UPSTREAM's llama.h, run on upstream's library and on
 * ours. It does what upstream's diffusion example does, with greedy choices instead of
 * sampling: a context with llama_set_causal_attn(false), a canvas of the prompt followed by
 * mask tokens decoded whole with llama_process(DECODE) on a llama_batch_ext, every position
 * an output; at each step the masked position whose argmax logit is highest is unmasked to
 * that argmax. Then the calls around it: llama_get_memory (NULL), the state size, a classic
 * llama_decode with no output flags (all tokens are outputs anyway), llama_encode (the same
 * logits), two sequences in one batch (each gives its logits alone), a batch that starts at
 * position 5. Prints one line per fact; writes every logits row it reads to OUT (int32
 * n_vocab, int32 n_rows, rows of float32). The text must be identical on both libraries, the
 * rows close (compare_logits).
 *
 * usage: probe_diffusion MODEL OUT MASK_ID STEPS TOKEN... (the prompt)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define CANVAS 24

static FILE *out;
static int n_vocab, n_rows;

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    (void) level;
    if (getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static void emit(const float *row) {
    fwrite(row, sizeof(float), n_vocab, out);
    n_rows++;
}

/* classic batch of n tokens in sequence seq from position p0 with output flags `want`;
 * returns llama_decode's (or llama_encode's) code */
static int run(struct llama_context *ctx, int encode, int n, const llama_token *tok, int p0,
               llama_seq_id seq, int want) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i];
        b.pos[i] = p0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq;
        b.logits[i] = want;
    }
    b.n_tokens = n;
    int ret = encode ? llama_encode(ctx, b) : llama_decode(ctx, b);
    llama_batch_free(b);
    return ret;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s MODEL OUT MASK_ID STEPS TOKEN...\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    llama_token mask = atoi(argv[3]);
    int steps = atoi(argv[4]);
    int n_prompt = argc - 5;
    if (n_prompt >= CANVAS) { fprintf(stderr, "prompt too long\n"); return 2; }
    printf("is_diffusion %d is_recurrent %d\n", llama_model_is_diffusion(model), llama_model_is_recurrent(model));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = cp.n_ubatch = 64;
    cp.n_seq_max = 2;
    cp.n_threads = cp.n_threads_batch = 2;
    const char *env;
    if ((env = getenv("PROBE_FLASH_ATTN"))) cp.flash_attn_type = atoi(env);
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    out = fopen(argv[2], "wb");
    if (!out) return 1;
    fwrite(&n_vocab, 4, 1, out);
    fwrite(&n_rows, 4, 1, out);
    printf("memory NULL %d\n", llama_get_memory(ctx) == NULL);
    llama_set_causal_attn(ctx, false);

    /* the diffusion loop, greedy */
    llama_token canvas[CANVAS];
    for (int i = 0; i < CANVAS; i++) canvas[i] = i < n_prompt ? atoi(argv[5 + i]) : mask;
    struct llama_batch_ext *bx = llama_batch_ext_init(ctx);
    for (int step = 0; step < steps; step++) {
        llama_batch_ext_clear(bx);
        for (int i = 0; i < CANVAS; i++) {
            int idx = llama_batch_ext_add_token(bx, 0, canvas[i]);
            llama_pos p = i;
            llama_batch_ext_set_pos(bx, idx, &p);
            llama_batch_ext_set_output_logits(bx, idx, true);
        }
        int ret = llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, bx);
        if (ret != 0) { printf("step %d process %d\n", step, ret); break; }
        int best_i = -1, best_t = 0;
        float best = 0;
        for (int i = 0; i < CANVAS; i++) {
            const float *row = llama_get_logits_ith(ctx, i);
            if (!row) { printf("step %d no row %d\n", step, i); return 1; }
            emit(row);
            if (canvas[i] != mask) continue;
            int t = argmax(row, n_vocab);
            if (best_i < 0 || row[t] > best) { best_i = i; best_t = t; best = row[t]; }
        }
        if (best_i < 0) break;
        canvas[best_i] = best_t;
        printf("step %d unmask %d -> %d\n", step, best_i, best_t);
    }
    llama_batch_ext_free(bx);
    printf("state size %zu seq state size %zu\n", llama_state_get_size(ctx), llama_state_seq_get_size(ctx, 0));

    /* a classic batch with no output flags: every token is an output */
    int ret = run(ctx, 0, 8, canvas, 0, 0, 0);
    float *alone = malloc(sizeof(float) * (size_t) n_vocab * 8);
    int have = 1;
    for (int i = 0; i < 8 && ret == 0; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row) { have = 0; break; }
        memcpy(alone + (size_t) i * n_vocab, row, sizeof(float) * n_vocab);
        emit(row);
    }
    printf("decode without output flags %d, rows for every token %d\n", ret, ret == 0 && have);
    /* llama_encode: upstream's path for these models, the same logits */
    ret = run(ctx, 1, 8, canvas, 0, 0, 1);
    int same = ret == 0;
    for (int i = 0; i < 8 && same; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        same = row && !memcmp(row, alone + (size_t) i * n_vocab, sizeof(float) * n_vocab);
    }
    printf("encode %d, equals decode %d\n", ret, same);
    /* two sequences in one batch: sequence 1 (canvas 8..15) after sequence 0 (canvas 0..7) */
    struct llama_batch b = llama_batch_init(16, 0, 1);
    for (int i = 0; i < 16; i++) {
        b.token[i] = canvas[i];
        b.pos[i] = i % 8;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = i / 8;
        b.logits[i] = 1;
    }
    b.n_tokens = 16;
    ret = llama_decode(ctx, b);
    llama_batch_free(b);
    same = ret == 0;
    float *both = malloc(sizeof(float) * (size_t) n_vocab * 16);
    for (int i = 0; i < 16 && ret == 0; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row) { same = 0; break; }
        memcpy(both + (size_t) i * n_vocab, row, sizeof(float) * n_vocab);
        emit(row);
    }
    for (int i = 0; i < 8 && same; i++)
        same = !memcmp(both + (size_t) i * n_vocab, alone + (size_t) i * n_vocab, sizeof(float) * n_vocab);
    int ret1 = run(ctx, 0, 8, canvas + 8, 0, 1, 1);
    for (int i = 0; i < 8 && same && ret1 == 0; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        same = row && !memcmp(row, both + (size_t) (8 + i) * n_vocab, sizeof(float) * n_vocab);
        if (row) emit(row);
    }
    printf("two sequences %d, alone %d, each equals alone %d\n", ret, ret1, same && ret1 == 0);
    /* positions need not start at 0 nor continue anything */
    ret = run(ctx, 0, 4, canvas, 5, 0, 1);
    if (ret == 0) for (int i = 0; i < 4; i++) emit(llama_get_logits_ith(ctx, i));
    printf("batch from position 5: %d\n", ret);
    ret = run(ctx, 0, 4, canvas, 3, 0, 1);
    if (ret == 0) for (int i = 0; i < 4; i++) emit(llama_get_logits_ith(ctx, i));
    printf("then from position 3: %d\n", ret);

    fseek(out, 4, SEEK_SET);
    fwrite(&n_rows, 4, 1, out);
    fclose(out);
    free(alone);
    free(both);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
