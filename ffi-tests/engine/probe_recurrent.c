/*
 * Recurrent-memory probe: compiled against UPSTREAM's llama.h, run on upstream's library and on
 * ours with a recurrent (or hybrid) model. Prints the model's kind and one line per memory call
 * and decode (return values, positions per sequence), and whether two sequences decoded in one
 * batch give the logits each gives alone; writes every logits row it reads to OUT (int32
 * n_vocab, int32 n_rows, rows of float32). The text must be identical on both libraries, the
 * rows close (compare_logits).
 *
 * usage: probe_recurrent MODEL OUT TOKEN... (at least 6 tokens)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static struct llama_context *ctx;
static FILE *out;
static int n_vocab, n_rows;

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (getenv("PROBE_VERBOSE")) fputs(text, stderr);
    (void) level;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* decodes n tokens with outputs where want[i]; copies output rows into rows (n_vocab each, in
 * batch order) and OUT; prints the code and each output's argmax */
static int decode(const char *label, int n, const llama_token *tok, const llama_pos *pos,
                  const llama_seq_id *seq, const int *want, float *rows) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i];
        b.pos[i] = pos[i];
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seq[i];
        b.logits[i] = want[i];
    }
    b.n_tokens = n;
    int ret = llama_decode(ctx, b);
    llama_batch_free(b);
    printf("decode %s %d", label, ret);
    if (ret == 0) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!want[i]) continue;
            const float *row = llama_get_logits_ith(ctx, i);
            if (!row) { printf(" no-row-%d", i); continue; }
            fwrite(row, sizeof(float), n_vocab, out);
            n_rows++;
            if (rows) memcpy(rows + (size_t) k * n_vocab, row, sizeof(float) * n_vocab);
            printf(" top-%d %d", i, argmax(row, n_vocab));
            k++;
        }
    }
    printf("\n");
    return ret;
}

static void positions(const char *label) {
    llama_memory_t mem = llama_get_memory(ctx);
    printf("pos %s:", label);
    for (int s = 0; s < 3; s++)
        printf(" %d[%d,%d]", s, llama_memory_seq_pos_min(mem, s), llama_memory_seq_pos_max(mem, s));
    printf("\n");
}

static void rm(int seq, int p0, int p1) {
    printf("seq_rm(%d, %d, %d) = %d\n", seq, p0, p1, llama_memory_seq_rm(llama_get_memory(ctx), seq, p0, p1));
}

/* whether two rows agree: the same argmax and values within 1e-4 relative to their scale */
static int same(const float *a, const float *b) {
    float scale = 1e-6f, diff = 0.0f;
    for (int i = 0; i < n_vocab; i++) {
        scale = fmaxf(scale, fabsf(a[i]));
        diff = fmaxf(diff, fabsf(a[i] - b[i]));
    }
    return argmax(a, n_vocab) == argmax(b, n_vocab) && diff <= 1e-4f * scale;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: %s MODEL OUT TOKEN... (at least 6 tokens)\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    int n_prompt = argc - 3;
    if (n_prompt > 32) n_prompt = 32;
    llama_token prompt[32];
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
    printf("model recurrent %d hybrid %d diffusion %d\n", llama_model_is_recurrent(model),
           llama_model_is_hybrid(model), llama_model_is_diffusion(model));

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = cp.n_ubatch = 256;
    cp.n_seq_max = 3;
    cp.n_threads = cp.n_threads_batch = 2;
    ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    llama_memory_t mem = llama_get_memory(ctx);
    printf("context n_seq_max %u can_shift %d\n", llama_n_seq_max(ctx), llama_memory_can_shift(mem));

    /* sequence A: the prompt; sequence B: its first 4 tokens reversed */
    int na = n_prompt, nb = 4;
    llama_token ta[32], tb[4];
    llama_pos pa[32], pb[4];
    llama_seq_id sa[32], sb[4];
    int wa[32] = {0}, wb[4] = {0};
    for (int i = 0; i < na; i++) { ta[i] = prompt[i]; pa[i] = i; sa[i] = 0; }
    for (int i = 0; i < nb; i++) { tb[i] = prompt[nb - 1 - i]; pb[i] = i; sb[i] = 1; }
    wa[na - 1] = 1;
    wb[nb - 1] = 1;
    float *alone = malloc(sizeof(float) * n_vocab * 2), *joint = malloc(sizeof(float) * n_vocab * 2);

    /* each sequence alone */
    if (decode("alone-a", na, ta, pa, sa, wa, alone) != 0) return 1;
    llama_memory_clear(mem, true);
    positions("cleared");
    if (decode("alone-b", nb, tb, pb, sb, wb, alone + n_vocab) != 0) return 1;
    llama_memory_clear(mem, false);

    /* both in one batch, interleaved: B's tokens between A's */
    llama_token jt[36];
    llama_pos jp[36];
    llama_seq_id js[36];
    int jw[36] = {0}, n = 0, ia = 0, ib = 0, out_a = -1, out_b = -1;
    while (ia < na || ib < nb) {
        if (ia < na) { jt[n] = ta[ia]; jp[n] = pa[ia]; js[n] = 0; if (ia == na - 1) out_a = n; n++; ia++; }
        if (ib < nb && (ia % 2 == 0 || ia >= na)) { jt[n] = tb[ib]; jp[n] = pb[ib]; js[n] = 1; if (ib == nb - 1) out_b = n; n++; ib++; }
    }
    jw[out_a] = jw[out_b] = 1;
    if (decode("joint", n, jt, jp, js, jw, joint) != 0) return 1;
    /* rows come in batch order: which of A and B is first depends on the interleaving */
    const float *ja = out_a < out_b ? joint : joint + n_vocab;
    const float *jb = out_a < out_b ? joint + n_vocab : joint;
    printf("joint equals alone: a %d b %d\n", same(ja, alone), same(jb, alone + n_vocab));
    positions("joint");

    /* the memory API on a recurrent state */
    rm(0, 2, 4);          /* a middle range: refused */
    rm(0, 1, -1);         /* a tail that cuts the state: refused */
    rm(0, 0, 3);          /* a prefix before the last position */
    rm(0, na, -1);        /* after the last position */
    rm(-1, -1, -1);       /* every sequence */
    rm(5, -1, -1);        /* beyond n_seq_max */
    positions("after-rm");
    llama_memory_seq_cp(mem, 0, 2, -1, -1);
    positions("cp-0-2");
    /* the copy and its source continue with the same token: the same logits */
    llama_token t1[2] = { prompt[0], prompt[0] };
    llama_pos p1[2] = { na, na };
    llama_seq_id s1[2] = { 0, 2 };
    int w1[2] = { 1, 1 };
    float *two = malloc(sizeof(float) * n_vocab * 2);
    if (decode("continue-0-2", 2, t1, p1, s1, w1, two) != 0) return 1;
    printf("copy continues as its source: %d\n", same(two, two + n_vocab));
    positions("continued");
    /* a position that does not continue the sequence */
    llama_token t2[1] = { prompt[1] };
    llama_pos p2[1] = { na + 5 };
    llama_seq_id s2[1] = { 0 };
    int w2[1] = { 1 };
    decode("gap", 1, t2, p2, s2, w2, NULL);
    positions("after-gap");
    /* PROBE_NO_SHIFT: a multi-section rotary model, whose KV cache upstream aborts on in
     * seq_add/seq_div */
    if (!getenv("PROBE_NO_SHIFT")) {
        llama_memory_seq_add(mem, 1, 0, -1, 3);
        positions("add-1-3");
        llama_memory_seq_div(mem, 1, 0, -1, 2);
        positions("div-1-2");
    }
    llama_memory_seq_keep(mem, 2);
    positions("keep-2");
    rm(2, 0, -1);
    positions("rm-2");
    /* a cleared sequence starts from a zero state: as the first decode of A (with one KV
     * stream per sequence, seq_keep left sequence 0's KV cells of a hybrid model) */
    rm(0, -1, -1);
    if (decode("again-a", na, ta, pa, sa, wa, joint) != 0) return 1;
    printf("restart equals alone: %d\n", same(joint, alone));
    llama_memory_clear(mem, true);
    positions("clear");

    fseek(out, 4, SEEK_SET);
    fwrite(&n_rows, 4, 1, out);
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
