/*
 * Differential test of state and sessions: compiled against UPSTREAM's llama.h, linked to
 * "libllama.so.0" and run with upstream's library and with ours (scripts/test-differential.sh
 * compares what each writes).
 *
 *   diff_state save MODEL FA DIR   decodes a prompt (F16 KV cache, flash attention FA = 0/1),
 *                                  writes DIR/session.bin (llama_state_save_file),
 *                                  DIR/state.bin (llama_state_get_data), DIR/seq.bin
 *                                  (llama_state_seq_save_file of sequence 0), DIR/partial.bin
 *                                  (llama_state_seq_get_data_ext of sequence 0 with
 *                                  LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), then decodes
 *                                  the next token and writes its logits to DIR/next.f32
 *   diff_state load MODEL FA FILE KIND OUT
 *                                  a fresh context restores FILE (KIND: session, state or
 *                                  seq, the latter into sequence 1 of a two-sequence
 *                                  context with one KV stream; partial: the prompt is decoded
 *                                  first, then the partial state restored over sequence 0),
 *                                  decodes the same next token and writes its logits to OUT
 *   diff_state steps MODEL FA DIR  in a context of two sequences sharing one stream, decodes
 *                                  the prompt into sequence 0, then two batches of two
 *                                  tokens, writes DIR/steps.bin (llama_state_get_data);
 *                                  copies sequence 0 to 1, decodes two more tokens into 0
 *                                  (its cells now shared) and writes DIR/shared.bin
 *   diff_state hostile MODEL FA DIR OTHER STRICT [K_ONLY]
 *                                  decodes the prompt, then offers damaged states (from
 *                                  DIR's files, and a state of the model OTHER) to every
 *                                  restore function and prints each one's return value.
 *                                  STRICT = 1 (our library) also asserts that each failure
 *                                  logged one error line and left the memory as it was (the
 *                                  next token's logits equal DIR/next.f32 bit for bit).
 *                                  K_ONLY = 1 (a state whose first cache holds K
 *                                  rows only, an MLA cache) also offers the state cut where
 *                                  that cache ends (DeepSeek's sparse attention: without
 *                                  the lightning indexer's cache that follows it).
 * With DIFF_RPC=HOST:PORT,... the rpc-servers are registered first (rpc_servers.h) and
 * DIFF_GPU_LAYERS layers (default 999) placed on them (make test-rpc).
 * Every step prints one line; a failure exits non-zero.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "rpc_servers.h"

static const llama_token PROMPT_IDS[] = {1, 504, 3458, 282, 4649, 314, 253, 1345, 28, 1410, 9081, 30, 216, 198};
#define N_PROMPT ((int)(sizeof(PROMPT_IDS) / sizeof(PROMPT_IDS[0])))
/* the ids modulo the model's vocabulary (small random-weight fixtures have small ones) */
static llama_token PROMPT[N_PROMPT];
static llama_token NEXT = 1345;

static int n_errors;

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_ERROR) {
        n_errors++;
        fputs(text, stderr);
    }
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "cannot read %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 16);
    if (fread(b, 1, *n, f) != *n) exit(1);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
    fclose(f);
}

static void put_u32(unsigned char *p, unsigned v) { memcpy(p, &v, 4); }

static struct llama_context *make_ctx(struct llama_model *m, int fa, int n_seq) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.n_ubatch = 64;
    cp.n_seq_max = n_seq;
    cp.kv_unified = n_seq > 1; /* one stream, as the saving context's */
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F16;
    cp.type_v = GGML_TYPE_F16;
    cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); exit(1); }
    return ctx;
}

static void decode_one(struct llama_context *ctx, llama_token t, llama_pos pos, llama_seq_id seq) {
    struct llama_batch b = llama_batch_init(1, 0, 1);
    b.n_tokens = 1;
    b.token[0] = t;
    b.pos[0] = pos;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = seq;
    b.logits[0] = 1;
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); exit(1); }
    llama_batch_free(b);
}

/* two tokens of sequence 0 at pos, pos + 1 in one batch (single-token decodes round some
 * values differently from upstream's, which would hide what the byte comparison checks) */
static void decode_two(struct llama_context *ctx, const llama_token *t, llama_pos pos) {
    struct llama_batch b = llama_batch_init(2, 0, 1);
    b.n_tokens = 2;
    for (int i = 0; i < 2; i++) {
        b.token[i] = t[i];
        b.pos[i] = pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == 1;
    }
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed\n"); exit(1); }
    llama_batch_free(b);
}

static void write_logits(struct llama_context *ctx, const char *path) {
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    float *l = llama_get_logits_ith(ctx, -1);
    FILE *f = fopen(path, "wb");
    if (!l || !f || fwrite(l, sizeof(float), n_vocab, f) != (size_t)n_vocab) { fprintf(stderr, "logits\n"); exit(1); }
    fclose(f);
}

static int strict;
static struct llama_context *hctx;
/* the positions sequence 0 spans after the prompt (a recurrent state holds only its last) */
static int base_p0, base_p1;

/* One hostile call's result; in strict mode, the failure logged one line and the memory is
 * as the prompt left it. */
static void report(const char *name, long long ret, int failed) {
    printf("%s ret=%lld\n", name, ret);
    if (!strict) return;
    llama_memory_t mem = llama_get_memory(hctx);
    int p0 = llama_memory_seq_pos_min(mem, 0), p1 = llama_memory_seq_pos_max(mem, 0);
    if (failed && n_errors != 1) { fprintf(stderr, "%s: %d error lines, want 1\n", name, n_errors); exit(1); }
    if (p0 != base_p0 || p1 != base_p1) { fprintf(stderr, "%s: memory changed (%d..%d)\n", name, p0, p1); exit(1); }
}

#define CALL(name, failed, expr) do { n_errors = 0; long long r_ = (long long)(expr); report(name, r_, failed); } while (0)

static void hostile(struct llama_model *m, int fa, const char *dir, const char *other, int strict_, int k_only) {
    char path[4096], bad[4096];
    strict = strict_;
    hctx = make_ctx(m, fa, 1);
    struct llama_batch b = llama_batch_get_one((llama_token *)PROMPT, N_PROMPT);
    if (llama_decode(hctx, b) != 0) exit(1);
    base_p0 = llama_memory_seq_pos_min(llama_get_memory(hctx), 0);
    base_p1 = llama_memory_seq_pos_max(llama_get_memory(hctx), 0);
    if (base_p1 != N_PROMPT - 1) { fprintf(stderr, "the prompt left positions %d..%d\n", base_p0, base_p1); exit(1); }
    llama_token toks[64];
    size_t n_tok = 99;
    size_t n_sess, n_state, n_seq;
    snprintf(path, sizeof path, "%s/session.bin", dir);
    unsigned char *sess = slurp(path, &n_sess);
    snprintf(path, sizeof path, "%s/state.bin", dir);
    unsigned char *state = slurp(path, &n_state);
    snprintf(path, sizeof path, "%s/seq.bin", dir);
    unsigned char *seq = slurp(path, &n_seq);
    snprintf(bad, sizeof bad, "%s/bad.bin", dir);

    /* before any restore: upstream empties the cache on some failed restores below */
    unsigned char *small = malloc(100);
    CALL("state_get_data_small_buffer", 1, llama_state_get_data(hctx, small, 100));
    free(small);

    /* session files */
    CALL("session_missing", 1, llama_state_load_file(hctx, "/nonexistent/x.bin", toks, 64, &n_tok));
    spit(bad, sess, n_sess / 2);
    CALL("session_truncated_half", 1, llama_state_load_file(hctx, bad, toks, 64, &n_tok));
    spit(bad, sess, 10);
    CALL("session_truncated_header", 1, llama_state_load_file(hctx, bad, toks, 64, &n_tok));
    unsigned char *t = malloc(n_sess + 16);
    memcpy(t, sess, n_sess);
    put_u32(t, 0x12345678);
    spit(bad, t, n_sess);
    CALL("session_wrong_magic", 1, llama_state_load_file(hctx, bad, toks, 64, &n_tok));
    memcpy(t, sess, n_sess);
    put_u32(t + 4, LLAMA_SESSION_VERSION - 1);
    spit(bad, t, n_sess);
    CALL("session_wrong_version", 1, llama_state_load_file(hctx, bad, toks, 64, &n_tok));
    spit(bad, sess, n_sess);
    CALL("session_over_capacity", 1, llama_state_load_file(hctx, bad, toks, 4, &n_tok));
    memcpy(t, sess, n_sess);
    memset(t + n_sess, 0, 16);
    spit(bad, t, n_sess + 16);
    CALL("session_trailing_data", 1, llama_state_load_file(hctx, bad, toks, 64, &n_tok));
    if (n_tok != 99 && strict) { fprintf(stderr, "n_token_count_out written on failure\n"); exit(1); }

    /* state buffers: arch string, then n_stream, cell_count, cells, v_trans, n_layer, K type */
    unsigned arch_len;
    memcpy(&arch_len, state, 4);
    size_t at_stream = 4 + arch_len, at_cells = at_stream + 4;
    unsigned n_cells;
    memcpy(&n_cells, state + at_cells, 4);
    size_t at_cell0 = at_cells + 4, at_vtrans = at_cell0 + (size_t)n_cells * 12;
    size_t at_nlayer = at_vtrans + 4, at_ktype = at_nlayer + 4;
    unsigned char *u = malloc(n_state);
#define PATCHED(name, off, val) do { memcpy(u, state, n_state); put_u32(u + (off), (val)); \
        CALL(name, 1, llama_state_set_data(hctx, u, n_state)); } while (0)
    CALL("state_truncated", 1, llama_state_set_data(hctx, state, n_state / 2));
    CALL("state_truncated_cells", 1, llama_state_set_data(hctx, state, at_cell0 + 20));
    CALL("state_empty", 1, llama_state_set_data(hctx, state, 0));
    memcpy(u, state, n_state);
    u[4] ^= 0x20; /* 'l' -> 'L' */
    CALL("state_wrong_arch", 1, llama_state_set_data(hctx, u, n_state));
    PATCHED("state_n_stream", at_stream, 2);
    PATCHED("state_cells_over_capacity", at_cells, 100000);
    PATCHED("state_seq_id_out_of_range", at_cell0 + 8, 7);
    PATCHED("state_v_trans", at_vtrans, !(fa == 0));
    PATCHED("state_n_layer", at_nlayer, 31);
    PATCHED("state_k_type", at_ktype, GGML_TYPE_Q8_0);
    PATCHED("state_k_row_size", at_ktype + 4, 7);
    if (k_only) {
        /* the state cut where its first cache ends (K rows only: an MLA cache), so the
         * second one (the lightning indexer's) is missing */
        unsigned n_layer;
        memcpy(&n_layer, state + at_nlayer, 4);
        size_t end = at_ktype;
        for (unsigned il = 0; il < n_layer && end + 12 <= n_state; il++) {
            unsigned long long row;
            memcpy(&row, state + end + 4, 8);
            end += 12 + (size_t)row * n_cells;
        }
        if (end >= n_state) { fprintf(stderr, "the first cache ends at %zu of %zu\n", end, n_state); exit(1); }
        CALL("state_first_cache_only", 1, llama_state_set_data(hctx, state, end));
    }
    /* a state of another model of the same architecture */
    {
        struct llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        struct llama_model *m2 = llama_model_load_from_file(other, mp);
        if (!m2) { fprintf(stderr, "other model failed\n"); exit(1); }
        struct llama_context *c2 = make_ctx(m2, fa, 1);
        llama_token few[4] = {1, 2, 3, 4};
        if (llama_decode(c2, llama_batch_get_one(few, 4)) != 0) exit(1);
        size_t n2 = llama_state_get_size(c2);
        unsigned char *o = malloc(n2);
        if (llama_state_get_data(c2, o, n2) != n2) exit(1);
        llama_free(c2);
        llama_model_free(m2);
        CALL("state_other_model", 1, llama_state_set_data(hctx, o, n2));
        free(o);
    }

    /* sequence states */
    size_t n_sq = llama_state_seq_get_size(hctx, 0);
    unsigned char *sq = malloc(n_sq);
    CALL("seq_get_data", 0, llama_state_seq_get_data(hctx, sq, n_sq, 0) == n_sq);
    CALL("seq_truncated", 1, llama_state_seq_set_data(hctx, sq, n_sq - 1, 0));
    put_u32(sq, 0xdeadbeef);
    CALL("seq_wrong_magic", 1, llama_state_seq_set_data(hctx, sq, n_sq, 0));
    spit(bad, seq, n_seq / 2);
    /* upstream aborts here with flash attention on (GGML_ASSERT(nread <= state_size)) */
    if (strict) CALL("seq_file_truncated", 1, llama_state_seq_load_file(hctx, bad, 0, toks, 64, &n_tok));
    memcpy(t, seq, 12);
    put_u32(t, 0x12345678);
    spit(bad, t, 12);
    CALL("seq_file_wrong_magic", 1, llama_state_seq_load_file(hctx, bad, 0, toks, 64, &n_tok));
    spit(bad, seq, n_seq);
    CALL("seq_file_over_capacity", 1, llama_state_seq_load_file(hctx, bad, 0, toks, 4, &n_tok));
    n_tok = 0;
    CALL("seq_file_count_only", 0, llama_state_seq_load_file(hctx, bad, 0, NULL, 0, &n_tok));
    printf("seq_file_count_only n_tok=%zu\n", n_tok);
    memcpy(t, seq, n_seq);
    put_u32(t + 8, 1000000);
    spit(bad, t, n_seq);
    CALL("seq_file_count_past_end", 1, llama_state_seq_load_file(hctx, bad, 0, NULL, 0, &n_tok));
    free(sq);

    if (strict) {
        /* the memory's rows too are as the prompt left them */
        decode_one(hctx, NEXT, N_PROMPT, 0);
        int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
        size_t n_ref;
        snprintf(path, sizeof path, "%s/next.f32", dir);
        unsigned char *ref = slurp(path, &n_ref);
        if (n_ref != n_vocab * sizeof(float) || memcmp(ref, llama_get_logits_ith(hctx, -1), n_ref) != 0) {
            fprintf(stderr, "the next token's logits changed after the hostile restores\n");
            exit(1);
        }
        printf("memory unchanged after every failed restore\n");
        free(ref);
    }
    free(t);
    free(u);
    free(sess);
    free(state);
    free(seq);
    llama_free(hctx);
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: see the file's comment\n"); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    const char *rpc = getenv("DIFF_RPC");
    if (rpc && *rpc) {
        if (add_rpc_servers(rpc) != 0) return 1;
        mp.n_gpu_layers = getenv("DIFF_GPU_LAYERS") ? atoi(getenv("DIFF_GPU_LAYERS")) : 999;
    }
    struct llama_model *m = llama_model_load_from_file(argv[2], mp);
    if (!m) { fprintf(stderr, "model failed\n"); return 1; }
    int fa = atoi(argv[3]);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    for (int i = 0; i < N_PROMPT; i++) PROMPT[i] = PROMPT_IDS[i] % n_vocab;
    NEXT %= n_vocab;
    char path[4096];
    if (strcmp(argv[1], "save") == 0) {
        struct llama_context *ctx = make_ctx(m, fa, 1);
        struct llama_batch b = llama_batch_get_one((llama_token *)PROMPT, N_PROMPT);
        if (llama_decode(ctx, b) != 0) { fprintf(stderr, "prompt decode failed\n"); return 1; }
        snprintf(path, sizeof path, "%s/session.bin", argv[4]);
        if (!llama_state_save_file(ctx, path, PROMPT, N_PROMPT)) { fprintf(stderr, "save_file\n"); return 1; }
        size_t n = llama_state_get_size(ctx);
        unsigned char *buf = malloc(n);
        size_t got = llama_state_get_data(ctx, buf, n);
        printf("state size %zu, written %zu\n", n, got);
        snprintf(path, sizeof path, "%s/state.bin", argv[4]);
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, got, f);
        fclose(f);
        free(buf);
        size_t seq_n = llama_state_seq_get_size(ctx, 0);
        snprintf(path, sizeof path, "%s/seq.bin", argv[4]);
        size_t seq_file = llama_state_seq_save_file(ctx, path, 0, PROMPT, N_PROMPT);
        printf("seq size %zu, file %zu\n", seq_n, seq_file);
        size_t part_n = llama_state_seq_get_size_ext(ctx, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        unsigned char *part = malloc(part_n + 1);
        size_t part_got = llama_state_seq_get_data_ext(ctx, part, part_n, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        printf("partial size %zu, written %zu\n", part_n, part_got);
        if (part_got != part_n || part_n == 0) { fprintf(stderr, "partial state\n"); return 1; }
        snprintf(path, sizeof path, "%s/partial.bin", argv[4]);
        spit(path, part, part_got);
        free(part);
        decode_one(ctx, NEXT, N_PROMPT, 0);
        snprintf(path, sizeof path, "%s/next.f32", argv[4]);
        write_logits(ctx, path);
        llama_free(ctx);
    } else if (strcmp(argv[1], "steps") == 0) {
        struct llama_context *ctx = make_ctx(m, fa, 2);
        struct llama_batch b = llama_batch_get_one((llama_token *)PROMPT, N_PROMPT);
        if (llama_decode(ctx, b) != 0) { fprintf(stderr, "prompt decode failed\n"); return 1; }
        for (int k = 0; k < 3; k++) {
            if (k == 2) llama_memory_seq_cp(llama_get_memory(ctx), 0, 1, -1, -1);
            decode_two(ctx, PROMPT + 3 + 2 * k, N_PROMPT + 2 * k);
            if (k == 0) continue;
            size_t n = llama_state_get_size(ctx);
            unsigned char *buf = malloc(n);
            size_t got = llama_state_get_data(ctx, buf, n);
            if (got != n) { fprintf(stderr, "state %zu of %zu\n", got, n); return 1; }
            snprintf(path, sizeof path, "%s/%s.bin", argv[4], k == 2 ? "shared" : "steps");
            spit(path, buf, got);
            free(buf);
        }
        llama_free(ctx);
    } else if (strcmp(argv[1], "load") == 0 && argc == 7) {
        const char *kind = argv[5];
        int seq = strcmp(kind, "seq") == 0;
        struct llama_context *ctx = make_ctx(m, fa, seq ? 2 : 1);
        llama_token toks[64];
        size_t n_tok = 0;
        if (strcmp(kind, "session") == 0) {
            if (!llama_state_load_file(ctx, argv[4], toks, 64, &n_tok)) { fprintf(stderr, "load_file\n"); return 1; }
        } else if (strcmp(kind, "state") == 0) {
            FILE *f = fopen(argv[4], "rb");
            static unsigned char buf[1 << 24];
            size_t n = fread(buf, 1, sizeof buf, f);
            fclose(f);
            size_t r = llama_state_set_data(ctx, buf, n);
            if (r != n) { fprintf(stderr, "set_data read %zu of %zu\n", r, n); return 1; }
            n_tok = N_PROMPT;
        } else if (strcmp(kind, "partial") == 0) {
            struct llama_batch b = llama_batch_get_one((llama_token *)PROMPT, N_PROMPT);
            if (llama_decode(ctx, b) != 0) { fprintf(stderr, "prompt decode failed\n"); return 1; }
            size_t n;
            unsigned char *part = slurp(argv[4], &n);
            size_t r = llama_state_seq_set_data_ext(ctx, part, n, 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            free(part);
            if (r != n) { fprintf(stderr, "partial set_data read %zu of %zu\n", r, n); return 1; }
            n_tok = N_PROMPT;
        } else {
            size_t r = llama_state_seq_load_file(ctx, argv[4], 1, toks, 64, &n_tok);
            if (r == 0) { fprintf(stderr, "seq_load_file\n"); return 1; }
        }
        int tokens_kept = strcmp(kind, "session") == 0 || strcmp(kind, "seq") == 0;
        if (n_tok != N_PROMPT || (tokens_kept && memcmp(toks, PROMPT, sizeof PROMPT) != 0)) {
            fprintf(stderr, "tokens differ (%zu)\n", n_tok);
            return 1;
        }
        int s = seq ? 1 : 0;
        printf("restored %s: pos %d..%d\n", kind, llama_memory_seq_pos_min(llama_get_memory(ctx), s),
               llama_memory_seq_pos_max(llama_get_memory(ctx), s));
        decode_one(ctx, NEXT, N_PROMPT, s);
        write_logits(ctx, argv[6]);
        llama_free(ctx);
    } else if (strcmp(argv[1], "hostile") == 0 && (argc == 7 || argc == 8)) {
        hostile(m, fa, argv[4], argv[5], atoi(argv[6]), argc == 8 && atoi(argv[7]));
    } else {
        return 2;
    }
    llama_model_free(m);
    return 0;
}
