/*
 * Backend sampling (llama_set_sampler, llama_get_sampled_*_ith), differentially: the same calls
 * on upstream's library and ours, printing what a program sees. Chains are attached to
 * sequence 0 and generate 4 tokens each the way common does (llama_sampler_sample, which
 * returns the decode's token or continues from its candidates); each step prints the sampled
 * token, the four counts, the first candidates and their probabilities/logits, and the
 * token llama_sampler_sample returns. Then hostile cases (bad sequence ids, bad indices, a
 * token without output, too many outputs for a sequence, a second sequence without a chain,
 * params.samplers with a chain and with a bare sampler). Integers must match exactly; floats
 * within the tolerance scripts/test-sampling.sh applies.
 *
 * usage: diff_backend_sampling MODEL [ours-only]
 *   ours-only: also the cases where upstream crashes or aborts (a bare sampler attached, a
 *   chain attached twice, a chain freed while attached), run on our library only.
 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static struct llama_model *model;
static const struct llama_vocab *vocab;
static int n_vocab;
static llama_token prompt[64];
static int n_prompt;

static struct llama_context *new_ctx(int n_seq_max, struct llama_sampler_seq_config *cfg, size_t n_cfg) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.n_ubatch = 64;
    cp.n_seq_max = n_seq_max;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.samplers = cfg;
    cp.n_samplers = n_cfg;
    return llama_init_from_model(model, cp);
}

static void print_row(const char *label, struct llama_context *ctx, int i) {
    const llama_token tok = llama_get_sampled_token_ith(ctx, i);
    const uint32_t np = llama_get_sampled_probs_count_ith(ctx, i);
    const uint32_t nl = llama_get_sampled_logits_count_ith(ctx, i);
    const uint32_t nc = llama_get_sampled_candidates_count_ith(ctx, i);
    const float *probs = llama_get_sampled_probs_ith(ctx, i);
    const float *logits = llama_get_sampled_logits_ith(ctx, i);
    const llama_token *cand = llama_get_sampled_candidates_ith(ctx, i);
    printf("%s: token %d probs %s/%u logits %s/%u candidates %u", label, tok, probs ? "set" : "NULL", np,
           logits ? "set" : "NULL", nl, nc);
    if (nc == 0 && cand) {
        int full = 1;
        for (int k = 0; full && k < n_vocab; k++) full = cand[k] == k;
        printf(" (%s)", full ? "full vocab" : "other");
    }
    // the first 4 entries, and where probabilities exist the largest one and the sampled
    // token's (positions: the candidates' order)
    const uint32_t n = np ? np : nl;
    for (uint32_t k = 0; k < n && k < 4; k++) {
        printf(" [%d", cand ? cand[k] : (int)k);
        if (logits) printf(" l=%.6g", logits[k]);
        if (probs) printf(" p=%.6g", probs[k]);
        printf("]");
    }
    if (probs && np > 0) {
        uint32_t best = 0;
        double sum = 0;
        for (uint32_t k = 0; k < np; k++) {
            sum += probs[k];
            if (probs[k] > probs[best]) best = k;
        }
        printf(" argmax_p %d p=%.6g sum=%.6g", cand[best], probs[best], sum);
    }
    if (logits && nl > 0) {
        uint32_t n_inf = 0;
        for (uint32_t k = 0; k < nl; k++) n_inf += logits[k] == -__builtin_inff();
        printf(" masked %u", n_inf);
    }
    // llama_get_logits_ith gives the sampled logits for a row with a chain
    const float *all = llama_get_logits_ith(ctx, i);
    printf(" logits_ith %s\n", all == NULL ? "NULL" : all == logits ? "sampled" : "raw");
}

static void names(const char *label, struct llama_sampler *chain) {
    printf("%s: names", label);
    for (int k = 0; k < llama_sampler_chain_n(chain); k++) printf(" %s", llama_sampler_name(llama_sampler_chain_get(chain, k)));
    printf("\n");
}

// Attaches `chain` to sequence 0 of a fresh context and generates 4 tokens.
static int run_chain(const char *label, struct llama_sampler *chain) {
    struct llama_context *ctx = new_ctx(1, NULL, 0);
    if (!ctx) return 1;
    printf("%s: set_sampler %d\n", label, llama_set_sampler(ctx, 0, chain));
    names(label, chain);
    if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) != 0) return 1;
    for (int step = 0; step < 4; step++) {
        char l[96];
        snprintf(l, sizeof l, "%s step %d", label, step);
        print_row(l, ctx, -1);
        llama_token t = llama_sampler_sample(chain, ctx, -1);
        printf("%s step %d: sample -> %d\n", label, step, t);
        if (t < 0 || t >= n_vocab) t = 0; // the top-k + greedy quirk answers positions
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
    }
    printf("%s: detach %d\n", label, llama_set_sampler(ctx, 0, NULL));
    llama_free(ctx);
    llama_sampler_free(chain);
    return 0;
}

static struct llama_sampler *chain_of(int n, struct llama_sampler **s) {
    struct llama_sampler *c = llama_sampler_chain_init(llama_sampler_chain_default_params());
    for (int k = 0; k < n; k++) llama_sampler_chain_add(c, s[k]);
    return c;
}

#define CHAIN(...) chain_of(sizeof((struct llama_sampler *[]){__VA_ARGS__}) / sizeof(struct llama_sampler *), \
                            (struct llama_sampler *[]){__VA_ARGS__})

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const int ours_only = argc > 2 && strcmp(argv[2], "ours-only") == 0;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    vocab = llama_model_get_vocab(model);
    n_vocab = llama_vocab_n_tokens(vocab);
    const char *text = "The capital of France is";
    n_prompt = llama_tokenize(vocab, text, (int)strlen(text), prompt, 64, true, false);

    const llama_logit_bias bias[2] = {{1234, 50.0f}, {99, -3.0f}};
    int rc = 0;
    rc |= run_chain("greedy", CHAIN(llama_sampler_init_greedy()));
    rc |= run_chain("dist42", CHAIN(llama_sampler_init_dist(42)));
    rc |= run_chain("topk40-temp0.8-dist7",
                    CHAIN(llama_sampler_init_top_k(40), llama_sampler_init_temp(0.8f), llama_sampler_init_dist(7)));
    rc |= run_chain("topp0.9-minp0.05-temp0.7-dist11",
                    CHAIN(llama_sampler_init_top_p(0.9f, 1), llama_sampler_init_min_p(0.05f, 1),
                          llama_sampler_init_temp(0.7f), llama_sampler_init_dist(11)));
    rc |= run_chain("penalties-greedy",
                    CHAIN(llama_sampler_init_penalties(n_vocab, 64, 1.5f, 0.5f, 0.5f), llama_sampler_init_greedy()));
    rc |= run_chain("penalties-topk20-dist3",
                    CHAIN(llama_sampler_init_penalties(n_vocab, 64, 1.3f, 0.1f, 0.2f), llama_sampler_init_top_k(20),
                          llama_sampler_init_dist(3)));
    rc |= run_chain("topk40-typical-dist5",
                    CHAIN(llama_sampler_init_top_k(40), llama_sampler_init_typical(0.9f, 1), llama_sampler_init_dist(5)));
    rc |= run_chain("typical-greedy", CHAIN(llama_sampler_init_typical(0.9f, 1), llama_sampler_init_greedy()));
    rc |= run_chain("temp0-dist1", CHAIN(llama_sampler_init_temp(0.0f), llama_sampler_init_dist(1)));
    rc |= run_chain("tempext-dist9", CHAIN(llama_sampler_init_temp_ext(0.8f, 0.5f, 1.0f), llama_sampler_init_dist(9)));
    rc |= run_chain("bias-greedy", CHAIN(llama_sampler_init_logit_bias(n_vocab, 2, bias), llama_sampler_init_greedy()));
    rc |= run_chain("topk10-greedy", CHAIN(llama_sampler_init_top_k(10), llama_sampler_init_greedy()));
    rc |= run_chain("empties-greedy", CHAIN(llama_sampler_init_top_k(0), llama_sampler_init_temp(1.0f),
                                            llama_sampler_init_greedy()));
    if (rc) { printf("FAILED: a decode failed\n"); return 1; }

    // Hostile cases on one context with two sequences.
    struct llama_context *ctx = new_ctx(2, NULL, 0);
    if (!ctx) return 1;
    struct llama_sampler *empty = llama_sampler_chain_init(llama_sampler_chain_default_params());
    printf("empty chain: set_sampler %d\n", llama_set_sampler(ctx, 0, empty));
    printf("NULL on a sequence without one: %d\n", llama_set_sampler(ctx, 1, NULL));
    struct llama_sampler *neg = CHAIN(llama_sampler_init_greedy());
    struct llama_sampler *big = CHAIN(llama_sampler_init_greedy());
    const bool neg_set = llama_set_sampler(ctx, -5, neg);
    printf("seq -5: set_sampler %d, detach %d\n", neg_set, llama_set_sampler(ctx, -5, NULL));
    printf("seq 999: set_sampler %d\n", llama_set_sampler(ctx, 999, big));
    // getters before any decode with a chain attached after creation: no buffers yet
    printf("before decode: token %d logits_count %u probs_count %u candidates_count %u\n",
           llama_get_sampled_token_ith(ctx, 0), llama_get_sampled_logits_count_ith(ctx, 0),
           llama_get_sampled_probs_count_ith(ctx, 0), llama_get_sampled_candidates_count_ith(ctx, 0));
    struct llama_sampler *g = CHAIN(llama_sampler_init_top_k(5), llama_sampler_init_dist(4));
    printf("seq 0: set_sampler %d\n", llama_set_sampler(ctx, 0, g));
    // a batch: the prompt on sequence 0 (last token output), its last 2 tokens on sequence 1
    // (last output): one output per sequence
    struct llama_batch b = llama_batch_init(64, 0, 1);
    for (int k = 0; k < n_prompt; k++) {
        b.token[b.n_tokens] = prompt[k]; b.pos[b.n_tokens] = k; b.n_seq_id[b.n_tokens] = 1;
        b.seq_id[b.n_tokens][0] = 0; b.logits[b.n_tokens] = k == n_prompt - 1; b.n_tokens++;
    }
    for (int k = 0; k < 2; k++) {
        b.token[b.n_tokens] = prompt[n_prompt - 2 + k]; b.pos[b.n_tokens] = k; b.n_seq_id[b.n_tokens] = 1;
        b.seq_id[b.n_tokens][0] = 1; b.logits[b.n_tokens] = k == 1; b.n_tokens++;
    }
    printf("two sequences: decode %d\n", llama_decode(ctx, b));
    print_row("seq 0 row", ctx, n_prompt - 1);
    print_row("seq 1 row (no chain)", ctx, b.n_tokens - 1);
    const float *raw1 = llama_get_logits_ith(ctx, b.n_tokens - 1);
    printf("seq 1 raw logits: %.6g %.6g\n", raw1 ? raw1[0] : 0.0f, raw1 ? raw1[1] : 0.0f);
    print_row("index -1", ctx, -1);
    print_row("index 0 (no output)", ctx, 0);
    print_row("index 1000", ctx, 1000);
    print_row("index -1000", ctx, -1000);
    // two outputs for sequence 0, which has a chain: upstream's limit (1 per sequence)
    struct llama_batch b2 = llama_batch_init(4, 0, 1);
    for (int k = 0; k < 2; k++) {
        b2.token[k] = prompt[k]; b2.pos[k] = n_prompt + k; b2.n_seq_id[k] = 1; b2.seq_id[k][0] = 0; b2.logits[k] = 1;
    }
    b2.n_tokens = 2;
    printf("two outputs on seq 0: decode %d\n", llama_decode(ctx, b2));
    // the same batch on sequence 1 (no chain) decodes
    b2.seq_id[0][0] = 1; b2.seq_id[1][0] = 1; b2.pos[0] = 2; b2.pos[1] = 3;
    printf("two outputs on seq 1: decode %d\n", llama_decode(ctx, b2));
    print_row("after seq-1 batch, row 0", ctx, 0);
    const bool detach0 = llama_set_sampler(ctx, 0, NULL);
    printf("detach all: %d %d\n", detach0, llama_set_sampler(ctx, 999, NULL));
    // after detaching, the next decode has no buffers: upstream's answers without chains
    b2.pos[0] = 4; b2.pos[1] = 5;
    printf("decode without chains: %d\n", llama_decode(ctx, b2));
    print_row("no chains, row 1", ctx, 1);
    // a detached chain still skips its backend prefix on the CPU (upstream's is_init stays)
    {
        llama_token_data d[3] = {{0, 1.0f, 0}, {1, 3.0f, 0}, {2, 2.0f, 0}};
        llama_token_data_array a = {d, 3, -1, false};
        llama_sampler_apply(g, &a);
        printf("detached chain apply: size %zu selected %ld\n", a.size, (long)a.selected);
    }
    llama_batch_free(b);
    llama_batch_free(b2);
    llama_free(ctx);
    llama_sampler_free(g);
    llama_sampler_free(neg);
    llama_sampler_free(big);
    llama_sampler_free(empty);

    // params.samplers: a chain (attached at creation), and a bare sampler (context refused)
    {
        struct llama_sampler *c = CHAIN(llama_sampler_init_greedy());
        struct llama_sampler_seq_config cfg = {0, c};
        struct llama_context *pc = new_ctx(1, &cfg, 1);
        printf("params.samplers chain: context %s\n", pc ? "created" : "NULL");
        if (pc) {
            printf("params.samplers before decode: token %d logits_count %u\n", llama_get_sampled_token_ith(pc, -1),
                   llama_get_sampled_logits_count_ith(pc, -1));
            if (llama_decode(pc, llama_batch_get_one(prompt, n_prompt)) != 0) return 1;
            print_row("params.samplers", pc, -1);
            llama_free(pc);
        }
        llama_sampler_free(c);
        struct llama_sampler *bare = llama_sampler_init_greedy();
        cfg.sampler = bare;
        pc = new_ctx(1, &cfg, 1);
        printf("params.samplers bare sampler: context %s\n", pc ? "created" : "NULL");
        if (pc) llama_free(pc);
        llama_sampler_free(bare);
    }

    if (ours_only) {
        // where upstream crashes (a bare sampler read as a chain) or aborts (a chain attached
        // twice); a chain freed while attached is detached at the next decode
        struct llama_context *oc = new_ctx(2, NULL, 0);
        struct llama_sampler *bare = llama_sampler_init_greedy();
        printf("ours: bare sampler: set_sampler %d\n", llama_set_sampler(oc, 0, bare));
        struct llama_sampler *c = CHAIN(llama_sampler_init_greedy());
        const bool first = llama_set_sampler(oc, 0, c);
        const bool again = llama_set_sampler(oc, 0, c);
        printf("ours: chain: set_sampler %d, again %d, on seq 1 %d\n", first, again, llama_set_sampler(oc, 1, c));
        llama_sampler_free(c);
        printf("ours: decode after freeing the attached chain: %d\n",
               llama_decode(oc, llama_batch_get_one(prompt, n_prompt)));
        print_row("ours: freed chain row", oc, -1);
        llama_sampler_free(bare);
        llama_free(oc);
    }
    llama_model_free(model);
    printf("done\n");
    return 0;
}
