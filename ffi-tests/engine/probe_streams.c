/*
 * KV stream probe: compiled against UPSTREAM's llama.h, run on upstream's library and on ours
 * with kv_unified = false (upstream's default: one KV stream per sequence) or true. Three
 * sequences decoded in interleaved batches (greedy steps of all three in one batch, in an
 * order that is not the sequences'), then memory operations between decodes (seq_rm,
 * seq_cp, seq_keep, seq_rm + seq_add context shift, seq_div), then a small context whose
 * per-sequence stream fills up (decode returns 1 while another stream has room), a token
 * in two sequences, and batches with out-of-range sequence ids.
 *
 * Writes every logits row it reads to OUT (int32 n_vocab, int32 n_rows, rows of float32)
 * and one line per event to stdout (context sizes, return codes, positions per sequence,
 * whether llama_get_logits holds the rows in batch order): the text must be identical on
 * both libraries, and the rows before the line "exact N" bit-identical where our kernels are.
 *
 * usage: probe_streams MODEL OUT TOKEN... [env PROBE_UNIFIED=0|1, PROBE_THREADS,
 *        PROBE_HOSTILE=1: memory calls with sequence ids upstream aborts on (ours only)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static struct llama_context *ctx;
static FILE *out;
static int n_vocab, n_rows;

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("PROBE_VERBOSE")) fputs(text, stderr);
}

/* decodes n tokens (all outputs unless out_last: only the last), prints the code, writes
 * the output rows in batch order and checks that llama_get_logits holds them in that order */
static int decode(const char *label, int n, const llama_token *tok, const llama_pos *pos,
                  const llama_seq_id *seq, int out_last, llama_token *next) {
    struct llama_batch b = llama_batch_init(n, 0, 2);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i];
        b.pos[i] = pos[i];
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq[i];
        b.logits[i] = !out_last || i == n - 1;
    }
    b.n_tokens = n;
    int ret = llama_decode(ctx, b);
    llama_batch_free(b);
    printf("decode %s %d", label, ret);
    if (ret == 0) {
        const float *all = llama_get_logits(ctx);
        int k = 0, ordered = 1;
        for (int i = 0; i < n; i++) {
            if (out_last && i != n - 1) continue;
            const float *row = llama_get_logits_ith(ctx, i);
            if (!row) { printf(" no-row-%d", i); continue; }
            if (memcmp(row, all + (size_t) k * n_vocab, sizeof(float) * n_vocab) != 0) ordered = 0;
            fwrite(row, sizeof(float), n_vocab, out);
            n_rows++;
            if (next) next[i] = argmax(row, n_vocab);
            k++;
        }
        printf(" rows %d%s", k, ordered ? "" : " NOT-IN-BATCH-ORDER");
    }
    printf("\n");
    return ret;
}

static void positions(const char *label, int n_seq) {
    llama_memory_t mem = llama_get_memory(ctx);
    printf("pos %s:", label);
    for (int s = 0; s < n_seq; s++)
        printf(" %d[%d,%d]", s, llama_memory_seq_pos_min(mem, s), llama_memory_seq_pos_max(mem, s));
    printf("\n");
}

static struct llama_context *new_ctx(struct llama_model *model, int n_ctx, int n_seq, int unified) {
    struct llama_context_params cp = llama_context_default_params();
    const char *env;
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    cp.n_ubatch = (env = getenv("PROBE_UBATCH")) ? atoi(env) : 512;
    cp.n_seq_max = n_seq;
    cp.kv_unified = unified;
    cp.n_threads = cp.n_threads_batch = (env = getenv("PROBE_THREADS")) ? atoi(env) : 2;
    struct llama_context *c = llama_init_from_model(model, cp);
    if (!c) { fprintf(stderr, "context failed\n"); exit(1); }
    printf("context n_ctx %u n_ctx_seq %u n_seq_max %u can_shift %d\n", llama_n_ctx(c), llama_n_ctx_seq(c),
           llama_n_seq_max(c), llama_memory_can_shift(llama_get_memory(c)));
    return c;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s MODEL OUT TOKEN... (at least 6 tokens)\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    const char *env;
    int unified = (env = getenv("PROBE_UNIFIED")) && atoi(env);
    int hostile = (env = getenv("PROBE_HOSTILE")) && atoi(env);
    int n_prompt = argc - 3;
    llama_token *prompt = malloc(sizeof(llama_token) * n_prompt);
    for (int i = 0; i < n_prompt; i++) prompt[i] = atoi(argv[3 + i]);

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    out = fopen(argv[2], "wb");
    fwrite(&n_vocab, 4, 1, out);
    fwrite(&n_rows, 4, 1, out);

    /* three sequences: the prompt, the prompt with another first token, its first 5 tokens
     * with another first token; interleaved round-robin in one batch */
    ctx = new_ctx(model, 768, 3, unified);
    llama_memory_t mem = llama_get_memory(ctx);
    int len[3] = { n_prompt, n_prompt, 5 };
    llama_token toks[3][64];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < len[s] && i < 64; i++) toks[s][i] = prompt[i];
    toks[1][0] = prompt[n_prompt - 1];
    toks[2][0] = prompt[1];
    llama_token bt[192], nt[192];
    llama_pos bp[192];
    llama_seq_id bs[192];
    int n = 0;
    for (int i = 0; i < n_prompt; i++)
        for (int s = 0; s < 3; s++)
            if (i < len[s]) { bt[n] = toks[s][i]; bp[n] = i; bs[n] = s; n++; }
    if (decode("prompts", n, bt, bp, bs, 0, nt) != 0) return 1;
    llama_token last[3];
    llama_pos next_pos[3];
    for (int i = 0; i < n; i++) { last[bs[i]] = nt[i]; next_pos[bs[i]] = bp[i] + 1; }
    positions("after prompts", 3);

    /* greedy steps of the three sequences in one batch, in the order 2, 0, 1 */
    for (int step = 0; step < 4; step++) {
        const llama_seq_id order[3] = { 2, 0, 1 };
        for (int k = 0; k < 3; k++) {
            bs[k] = order[k];
            bt[k] = last[order[k]];
            bp[k] = next_pos[order[k]]++;
        }
        if (decode("step", 3, bt, bp, bs, 0, nt) != 0) return 1;
        for (int k = 0; k < 3; k++) last[bs[k]] = nt[k];
    }
    positions("after steps", 3);

    /* seq_rm of sequence 1's tail, decoded again beside a step of sequence 0 */
    printf("seq_rm %d\n", llama_memory_seq_rm(mem, 1, 5, -1));
    positions("after seq_rm", 3);
    n = 0;
    for (int i = 5; i < n_prompt; i++) { bt[n] = toks[1][i]; bp[n] = i; bs[n] = 1; n++; }
    bt[n] = last[0]; bp[n] = next_pos[0]++; bs[n] = 0; n++;
    if (decode("redo", n, bt, bp, bs, 0, nt) != 0) return 1;
    last[1] = nt[n - 2]; next_pos[1] = n_prompt;
    last[0] = nt[n - 1];

    /* seq_cp of the whole sequence 0 over sequence 2, then a step of both */
    llama_memory_seq_cp(mem, 0, 2, -1, -1);
    positions("after seq_cp", 3);
    last[2] = last[0];
    next_pos[2] = next_pos[0];
    for (int k = 0; k < 2; k++) {
        bs[k] = 2 - 2 * k;
        bt[k] = last[bs[k]];
        bp[k] = next_pos[bs[k]]++;
    }
    if (decode("on-copy", 2, bt, bp, bs, 0, nt) != 0) return 1;
    last[2] = nt[0]; last[0] = nt[1];

    /* seq_keep(0): the other sequences go (unified) or keep their streams (not unified) */
    llama_memory_seq_keep(mem, 0);
    positions("after seq_keep", 3);
    n = 0;
    bt[n] = last[0]; bp[n] = next_pos[0]++; bs[n] = 0; n++;
    bt[n] = last[1]; bp[n] = llama_memory_seq_pos_max(mem, 1) + 1; bs[n] = 1; n++;
    if (decode("after-keep", n, bt, bp, bs, 0, nt) != 0) return 1;
    last[0] = nt[0];

    /* context shift of sequence 0 */
    llama_memory_seq_rm(mem, 0, 2, 6);
    llama_memory_seq_add(mem, 0, 6, -1, -4);
    positions("after seq_add", 3);
    bt[0] = last[0]; bp[0] = llama_memory_seq_pos_max(mem, 0) + 1; bs[0] = 0;
    if (decode("shifted", 1, bt, bp, bs, 0, nt) != 0) return 1;
    /* seq_div: positions only (upstream re-rotates the divided keys the wrong way, which
     * ours does not copy, so the logits after it are not compared) */
    llama_memory_seq_div(mem, 0, 4, -1, 2);
    positions("after seq_div", 3);
    llama_free(ctx);
    /* rows before here must be bit-identical where the kernels are; later rows attend to
     * more than 256 cells or come from 64-token micro-batches, where upstream's CPU flash
     * attention takes its tiled and split-KV paths (another summation order) */
    printf("exact %d\n", n_rows);

    /* a small context: 2 sequences in 512 cells (two streams of 256 when not unified) */
    ctx = new_ctx(model, 512, 2, unified);
    mem = llama_get_memory(ctx);
    static llama_token ft[512];
    static llama_pos fp[512];
    static llama_seq_id fs[512];
    for (int i = 0; i < 512; i++) ft[i] = prompt[i % n_prompt];
    int p0 = 0, p1 = 0;
#define FILL(label, count, seq, pos_var) do { \
        for (int i = 0; i < (count); i++) { fp[i] = (pos_var) + i; fs[i] = (seq); } \
        if (decode(label, (count), ft, fp, fs, 1, NULL) == 0) (pos_var) += (count); \
    } while (0)
    FILL("fill-250-seq0", 250, 0, p0);
    FILL("more-10-seq0", 10, 0, p0);
    positions("fill", 2);
    FILL("first-10-seq1", 10, 1, p1);
    /* seq 0 needs 7 cells beside seq 1's 1 */
    for (int i = 0; i < 7; i++) { fp[i] = p0 + i; fs[i] = 0; }
    fp[7] = p1; fs[7] = 1;
    if (decode("mixed-7-1", 8, ft, fp, fs, 1, NULL) == 0) { p0 += 7; p1 += 1; }
    positions("mixed", 2);
    FILL("exact-6-seq0", 6, 0, p0);
    FILL("one-more-seq0", 1, 0, p0);
    FILL("seq1-still-fits", 4, 1, p1);
    positions("full", 2);

    /* a token in two sequences: one stream cannot hold it for both */
    llama_memory_clear(mem, true);
    {
        struct llama_batch b = llama_batch_init(1, 0, 2);
        b.token[0] = prompt[0];
        b.pos[0] = 0;
        b.n_seq_id[0] = 2;
        b.seq_id[0][0] = 0;
        b.seq_id[0][1] = 1;
        b.logits[0] = 1;
        b.n_tokens = 1;
        int ret = llama_decode(ctx, b);
        printf("decode coupled %d\n", ret);
        if (ret == 0) { fwrite(llama_get_logits_ith(ctx, 0), sizeof(float), n_vocab, out); n_rows++; }
        llama_batch_free(b);
    }
    positions("coupled", 2);

    /* sequence ids out of range in a batch: refused on both settings */
    {
        llama_token t[2] = { prompt[1], prompt[2] };
        llama_pos p[2] = { 5, 5 };
        llama_seq_id s[2] = { 0, 2 };
        decode("seq-id-n_seq_max", 2, t, p, s, 0, NULL);
        s[1] = -1;
        decode("seq-id-negative", 2, t, p, s, 0, NULL);
    }
    positions("hostile batches", 2);

    /* memory calls on id n_seq_max: a unified cache accepts ids below 256 there (upstream
     * maps them all to its one stream); with one stream per sequence upstream aborts, ours
     * logs and refuses (PROBE_HOSTILE, ours only) */
    if (unified || hostile) {
        llama_memory_seq_rm(mem, -1, -1, -1);
        bt[0] = prompt[0]; bp[0] = 0; bs[0] = 0;
        decode("seed", 1, bt, bp, bs, 0, NULL);
        llama_memory_seq_cp(mem, 0, 2, -1, -1);
        printf("id2 after seq_cp: [%d,%d]\n", llama_memory_seq_pos_min(mem, 2), llama_memory_seq_pos_max(mem, 2));
        llama_memory_seq_add(mem, 2, -1, -1, 3);
        llama_memory_seq_div(mem, 2, -1, -1, 2);
        printf("id2 after seq_add/div: [%d,%d]\n", llama_memory_seq_pos_min(mem, 2), llama_memory_seq_pos_max(mem, 2));
        printf("id2 seq_rm %d\n", llama_memory_seq_rm(mem, 2, -1, -1));
        llama_memory_seq_keep(mem, 2);
        positions("after id2", 2);
        if (hostile) {
            /* ids upstream aborts on with either setting */
            printf("id256 seq_rm %d pos_max %d\n", llama_memory_seq_rm(mem, 256, -1, -1),
                   llama_memory_seq_pos_max(mem, 256));
            llama_memory_seq_cp(mem, -3, 0, -1, -1);
            if (!unified) {
                /* a bounded range across streams */
                llama_memory_seq_cp(mem, 0, 1, 0, 5);
                positions("bounded seq_cp", 2);
            }
            bt[0] = prompt[3]; bp[0] = llama_memory_seq_pos_max(mem, 0) + 1; bs[0] = 0;
            decode("still-decodes", 1, bt, bp, bs, 0, NULL);
        }
    }

    fseek(out, 4, SEEK_SET);
    fwrite(&n_rows, 4, 1, out);
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    free(prompt);
    return 0;
}
