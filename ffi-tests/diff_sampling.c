/*
 * Differential sampler test: compiled against UPSTREAM's llama.h and linked to "libllama.so.0",
 * run twice (LD_LIBRARY_PATH at upstream's build, then at ours); the outputs must be identical.
 *
 * Thousands of seeded random candidate arrays (tiny to 151,936 tokens; ties, -inf, huge
 * magnitudes, pre-sorted input, shuffled ids) go through every built-in sampler, several
 * parameter sets and a few chains, with apply/accept/reset/clone sequences. Each step prints
 * size, selected, sorted, the data offset and a hash of the whole caller buffer (ids, logits
 * and p bit for bit, including the part past `size`, which partial sorts reorder too). Seeded
 * samplers print their picks over many draws. A C-implemented sampler runs inside a chain of
 * the library, and the library's samplers inside a C-implemented chain.
 *
 * usage: diff_sampling VOCAB.gguf [CASES [breakers]]   (env DUMP=<case> prints that case's arrays)
 * With "breakers": DRY with text sequence breakers only (needs tokenization).
 * Empty arrays only go to samplers that upstream handles without aborting.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static uint64_t rng_state;
static uint64_t next_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
static int below(int n) { return (int)(next_u64() % (uint64_t)n); }
static double normal(void) {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static long dump_case = -1;
static long case_no = 0;

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ULL; }
    return h;
}

/* The caller's buffer: base and full length (the array may move its start: XTC). */
static llama_token_data *buf_base;
static size_t buf_len;

static void report(const char *what, const llama_token_data_array *a) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = hash_bytes(h, buf_base, buf_len * sizeof *buf_base);
    long off = (long)(a->data - buf_base);
    printf("c%ld %s size=%zu sel=%lld sorted=%d off=%ld h=%016llx\n", case_no, what, a->size,
           (long long)a->selected, (int)a->sorted, off, (unsigned long long)h);
    if (case_no == dump_case) {
        for (size_t i = 0; i < buf_len; i++)
            printf("  [%zu] id=%d logit=%a p=%a\n", i, buf_base[i].id, buf_base[i].logit, buf_base[i].p);
    }
}

/* Fills the buffer with logits of one of several shapes. */
static void fill(size_t n, int shape, int shuffle) {
    for (size_t i = 0; i < n; i++) {
        float l;
        switch (shape) {
        case 0: l = (float)normal(); break;                          /* N(0,1) */
        case 1: l = (float)(normal() * 5.0); break;                  /* wide */
        case 2: l = (float)below(7) - 3.0f; break;                   /* many ties */
        case 3: l = (float)(normal() * 0.01); break;                 /* flat */
        case 4: l = below(10) == 0 ? -INFINITY : (float)normal() * 3.0f; break; /* masked */
        case 5: l = (float)(normal() * 20.0); break;                 /* outside the buckets */
        case 6: l = below(50) == 0 ? 1e30f : (float)normal(); break; /* huge values */
        case 7: l = below(3) == 0 ? -1e30f : (float)(normal() * 2); break;
        case 8: l = 1.5f; break;                                     /* all equal */
        case 9: l = (float)(below(3) == 0 ? 8.0 + normal() : normal() - 4.0); break; /* peaked */
        default: l = (float)(normal() * 0.1 + (below(2) ? 9.99 : -9.99)); break;  /* bucket edges */
        }
        buf_base[i].id = (llama_token)i;
        buf_base[i].logit = l;
        buf_base[i].p = (float)uniform(); /* stale p values must not leak into results */
    }
    if (n > 0 && buf_base[0].logit == -INFINITY) buf_base[0].logit = 0.0f; /* never all -inf */
    if (shuffle) {
        for (size_t i = n; i > 1; i--) {
            size_t j = (size_t)(next_u64() % i);
            llama_token_data t = buf_base[i - 1]; buf_base[i - 1] = buf_base[j]; buf_base[j] = t;
        }
    }
}

static int cmp_desc(const void *a, const void *b) {
    float x = ((const llama_token_data *)a)->logit, y = ((const llama_token_data *)b)->logit;
    if (x > y) return -1;
    if (x < y) return 1;
    return ((const llama_token_data *)a)->id - ((const llama_token_data *)b)->id;
}

/* ---- a sampler implemented by this program (inside the library's chains) ---- */
struct counter { int accepted; float bias; };
static const char *c_name(const struct llama_sampler *s) { (void)s; return "c-counter"; }
static void c_accept(struct llama_sampler *s, llama_token t) { (void)t; ((struct counter *)s->ctx)->accepted++; }
static void c_apply(struct llama_sampler *s, llama_token_data_array *a) {
    struct counter *c = s->ctx;
    for (size_t i = 0; i < a->size; i++)
        if (a->data[i].id % 7 == 0) a->data[i].logit += c->bias;
    a->sorted = false;
}
static void c_reset(struct llama_sampler *s) { ((struct counter *)s->ctx)->accepted = 0; }
static struct llama_sampler *c_clone(const struct llama_sampler *s);
static void c_free(struct llama_sampler *s) { free(s->ctx); }
static struct llama_sampler_i c_iface = { c_name, c_accept, c_apply, c_reset, c_clone, c_free,
                                          NULL, NULL, NULL, NULL, NULL, NULL };
static struct llama_sampler *c_new(float bias) {
    struct counter *c = calloc(1, sizeof *c);
    c->bias = bias;
    return llama_sampler_init(&c_iface, c);
}
static struct llama_sampler *c_clone(const struct llama_sampler *s) {
    struct llama_sampler *r = c_new(((struct counter *)s->ctx)->bias);
    ((struct counter *)r->ctx)->accepted = ((struct counter *)s->ctx)->accepted;
    return r;
}

/* ---- a chain implemented by this program, holding the library's samplers ---- */
struct cchain { struct llama_sampler *items[4]; int n; };
static const char *cc_name(const struct llama_sampler *s) { (void)s; return "c-chain"; }
static void cc_accept(struct llama_sampler *s, llama_token t) {
    struct cchain *c = s->ctx;
    for (int i = 0; i < c->n; i++) llama_sampler_accept(c->items[i], t);
}
static void cc_apply(struct llama_sampler *s, llama_token_data_array *a) {
    struct cchain *c = s->ctx;
    for (int i = 0; i < c->n; i++) llama_sampler_apply(c->items[i], a);
}
static void cc_reset(struct llama_sampler *s) {
    struct cchain *c = s->ctx;
    for (int i = 0; i < c->n; i++) llama_sampler_reset(c->items[i]);
}
static void cc_free(struct llama_sampler *s) {
    struct cchain *c = s->ctx;
    for (int i = 0; i < c->n; i++) llama_sampler_free(c->items[i]);
    free(c);
}
static struct llama_sampler_i cc_iface = { cc_name, cc_accept, cc_apply, cc_reset, NULL, cc_free,
                                           NULL, NULL, NULL, NULL, NULL, NULL };

/* ---- sampler factory ---- */
enum { K_GREEDY, K_DIST, K_TOP_K, K_TOP_P, K_MIN_P, K_TYPICAL, K_TEMP, K_TEMP_EXT, K_XTC,
       K_TOP_N_SIGMA, K_MIROSTAT, K_MIROSTAT_V2, K_PENALTIES, K_DRY, K_LOGIT_BIAS, K_INFILL,
       K_ADAPTIVE_P, K_CHAIN, K_CUSTOM, N_KINDS };
static const char *kind_names[N_KINDS] = { "greedy", "dist", "top_k", "top_p", "min_p", "typical",
    "temp", "temp_ext", "xtc", "top_n_sigma", "mirostat", "mirostat_v2", "penalties", "dry",
    "logit_bias", "infill", "adaptive_p", "chain", "custom" };

static const struct llama_vocab *g_vocab;
static int32_t g_n_vocab;

static struct llama_sampler *chain_of(int which, uint32_t seed) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = false;
    struct llama_sampler *c = llama_sampler_chain_init(cp);
    switch (which % 6) {
    case 0: /* llama.cpp's common default order */
        llama_sampler_chain_add(c, llama_sampler_init_penalties(g_n_vocab, 64, 1.1f, 0.0f, 0.0f));
        llama_sampler_chain_add(c, llama_sampler_init_top_k(40));
        llama_sampler_chain_add(c, llama_sampler_init_typical(1.0f, 1));
        llama_sampler_chain_add(c, llama_sampler_init_top_p(0.95f, 1));
        llama_sampler_chain_add(c, llama_sampler_init_min_p(0.05f, 1));
        llama_sampler_chain_add(c, llama_sampler_init_temp(0.8f));
        llama_sampler_chain_add(c, llama_sampler_init_dist(seed));
        break;
    case 1:
        llama_sampler_chain_add(c, llama_sampler_init_temp_ext(0.9f, 0.5f, 1.2f));
        llama_sampler_chain_add(c, llama_sampler_init_xtc(0.7f, 0.05f, 2, seed));
        llama_sampler_chain_add(c, llama_sampler_init_dist(seed + 1));
        break;
    case 2:
        llama_sampler_chain_add(c, llama_sampler_init_top_n_sigma(1.5f));
        llama_sampler_chain_add(c, llama_sampler_init_temp(1.3f));
        llama_sampler_chain_add(c, llama_sampler_init_mirostat_v2(seed, 5.0f, 0.1f));
        break;
    case 3: {
        llama_logit_bias lb[3] = { { 0, 5.0f }, { 3, -INFINITY }, { 11, 2.5f } };
        llama_sampler_chain_add(c, llama_sampler_init_logit_bias(g_n_vocab, 3, lb));
        llama_sampler_chain_add(c, c_new(1.25f)); /* the caller's sampler inside our chain */
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        break;
    }
    case 4:
        llama_sampler_chain_add(c, llama_sampler_init_typical(0.7f, 2));
        llama_sampler_chain_add(c, llama_sampler_init_min_p(0.1f, 3));
        llama_sampler_chain_add(c, llama_sampler_init_adaptive_p(0.4f, 0.9f, seed));
        break;
    default: { /* a chain inside a chain */
        struct llama_sampler *inner = llama_sampler_chain_init(cp);
        llama_sampler_chain_add(inner, llama_sampler_init_top_k(100));
        llama_sampler_chain_add(inner, llama_sampler_init_top_p(0.8f, 1));
        llama_sampler_chain_add(c, inner);
        llama_sampler_chain_add(c, llama_sampler_init_dry(g_vocab, 0.8f, 1.75f, 2, 64, NULL, 0));
        llama_sampler_chain_add(c, llama_sampler_init_dist(seed));
        break;
    }
    }
    return c;
}

static struct llama_sampler *make(int kind, int variant, uint32_t seed) {
    static const float ps[] = { 0.05f, 0.3f, 0.5f, 0.9f, 0.95f, 0.999f, 1.0f, 0.0f };
    static const size_t keeps[] = { 0, 1, 3, 10 };
    float p = ps[variant % 8];
    size_t mk = keeps[(variant / 8) % 4];
    switch (kind) {
    case K_GREEDY: return llama_sampler_init_greedy();
    case K_DIST: return llama_sampler_init_dist(seed);
    case K_TOP_K: { static const int ks[] = { 1, 2, 5, 40, 128, 129, 200, 1000, 5000, 0 };
                    return llama_sampler_init_top_k(ks[variant % 10]); }
    case K_TOP_P: return llama_sampler_init_top_p(p, mk);
    case K_MIN_P: return llama_sampler_init_min_p(p * 0.5f, mk);
    case K_TYPICAL: return llama_sampler_init_typical(p, mk);
    case K_TEMP: { static const float ts[] = { 0.0f, -1.0f, 0.5f, 0.8f, 1.5f, 1.0f };
                   return llama_sampler_init_temp(ts[variant % 6]); }
    case K_TEMP_EXT: { static const float ds[] = { 0.0f, 0.25f, 0.5f, 2.0f };
                       return llama_sampler_init_temp_ext(0.5f + 0.25f * (variant % 4), ds[(variant / 4) % 4],
                                                          0.5f + (variant % 3)); }
    case K_XTC: return llama_sampler_init_xtc(variant % 5 == 0 ? 1.0f : 0.5f, 0.02f * (variant % 7), mk, seed);
    case K_TOP_N_SIGMA: return llama_sampler_init_top_n_sigma(0.25f * (variant % 9));
    case K_MIROSTAT: return llama_sampler_init_mirostat(g_n_vocab, seed, 3.0f + variant % 4, 0.1f, 2 + variant % 100);
    case K_MIROSTAT_V2: return llama_sampler_init_mirostat_v2(seed, 2.0f + variant % 5, 0.05f + 0.05f * (variant % 3));
    case K_PENALTIES: return llama_sampler_init_penalties(g_n_vocab, (variant % 4) * 16, 1.0f + 0.1f * (variant % 3),
                                                           0.1f * (variant % 2), 0.25f * (variant % 3 == 1));
    case K_DRY: return llama_sampler_init_dry(g_vocab, 0.8f * (variant % 3), 1.0f + 0.5f * (variant % 4),
                                              variant % 4, 16 + 16 * (variant % 3), NULL, 0);
    case K_LOGIT_BIAS: {
        llama_logit_bias lb[6];
        int n = variant % 6;
        for (int i = 0; i < n; i++) { lb[i].token = below(300) - 5; lb[i].bias = (float)normal() * 4.0f; }
        if (n == 5) lb[4].bias = -INFINITY;
        return llama_sampler_init_logit_bias(g_n_vocab, n, lb);
    }
    case K_INFILL: return llama_sampler_init_infill(g_vocab);
    case K_ADAPTIVE_P: return llama_sampler_init_adaptive_p(variant % 5 == 0 ? -1.0f : 0.1f * (variant % 9),
                                                             0.1f * (variant % 11), seed);
    case K_CHAIN: return chain_of(variant, seed);
    default: { /* the library's samplers inside a chain written in C */
        struct cchain *c = calloc(1, sizeof *c);
        c->items[c->n++] = llama_sampler_init_top_k(50);
        c->items[c->n++] = llama_sampler_init_temp(0.7f);
        c->items[c->n++] = llama_sampler_init_dist(seed);
        return llama_sampler_init(&cc_iface, c);
    }
    }
}

/* Samplers that upstream aborts on for an empty array. */
static int empty_ok(int kind) {
    switch (kind) {
    case K_TOP_P: case K_TYPICAL: case K_MIROSTAT: case K_MIROSTAT_V2: case K_ADAPTIVE_P:
    case K_INFILL: case K_CHAIN: case K_CUSTOM: return 0;
    default: return 1;
    }
}

static void run_case(int kind, size_t n, int shape, int variant) {
    uint32_t seed = (uint32_t)next_u64();
    int shuffle = below(3) == 0;
    int presort = !shuffle && below(4) == 0;
    struct llama_sampler *s = make(kind, variant, seed);
    if (!s) { printf("c%ld %s NULL\n", case_no, kind_names[kind]); return; }
    printf("c%ld %s v%d n=%zu shape=%d name=%s seed=%u\n", case_no, kind_names[kind], variant, n, shape,
           llama_sampler_name(s), llama_sampler_get_seed(s) == LLAMA_DEFAULT_SEED ? 0u : 1u);
    int steps = 1 + below(4);
    int repeat = below(2), clen = 3 + below(3), pos = 0;
    llama_token cycle[5];
    for (int r = 0; r < 5; r++) cycle[r] = (llama_token)below(n < 8 ? (n ? (int)n : 1) : 8);
    for (int step = 0; step < steps; step++) {
        fill(n, shape, shuffle);
        int sorted = 0;
        if (presort && n > 0) { qsort(buf_base, n, sizeof *buf_base, cmp_desc); sorted = below(2); }
        llama_token_data_array a = { buf_base, n, -1, sorted };
        if (step == 2 && below(2) && kind != K_CUSTOM) {
            struct llama_sampler *c = llama_sampler_clone(s);
            llama_sampler_free(s);
            s = c;
        }
        if (step == 3) llama_sampler_reset(s);
        llama_sampler_apply(s, &a);
        report(kind_names[kind], &a);
        /* accept the selected token, or a random candidate, or one of recent ones (repeats) */
        llama_token t;
        if (a.selected >= 0 && (size_t)a.selected < a.size) t = a.data[a.selected].id;
        else t = n > 0 ? (llama_token)below((int)(n < 50 ? n : 50)) : 0;
        if (repeat) { /* a cycle, so that DRY and the penalties see repeated sequences */
            for (int r = 0; r < 6; r++, pos++) llama_sampler_accept(s, cycle[pos % clen]);
        } else {
            for (int r = 0; r < 1 + below(6); r++) llama_sampler_accept(s, (llama_token)((t + r * (r % 2)) % (n ? n : 1)));
        }
    }
    llama_sampler_free(s);
}

/* Many draws from one distribution with one seed. */
static void draws(int kind, size_t n, int shape, uint32_t seed) {
    struct llama_sampler *s = kind == K_DIST ? llama_sampler_init_dist(seed)
                            : kind == K_MIROSTAT ? llama_sampler_init_mirostat(g_n_vocab, seed, 5.0f, 0.1f, 100)
                            : kind == K_MIROSTAT_V2 ? llama_sampler_init_mirostat_v2(seed, 5.0f, 0.1f)
                            : kind == K_XTC ? llama_sampler_init_xtc(0.5f, 0.1f, 1, seed)
                            : llama_sampler_init_adaptive_p(0.3f, 0.9f, seed);
    printf("c%ld draws %s n=%zu shape=%d seed=%u get_seed=%u\n", case_no, kind_names[kind], n, shape, seed,
           llama_sampler_get_seed(s));
    fill(n, shape, 0);
    llama_token_data *orig = malloc(n * sizeof *orig);
    memcpy(orig, buf_base, n * sizeof *orig);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int d = 0; d < 1000; d++) {
        memcpy(buf_base, orig, n * sizeof *orig);
        llama_token_data_array a = { buf_base, n, -1, false };
        llama_sampler_apply(s, &a);
        long long pick = (a.selected >= 0 && (size_t)a.selected < a.size) ? a.data[a.selected].id : -1;
        h = hash_bytes(h, &pick, sizeof pick);
        if (pick >= 0) llama_sampler_accept(s, (llama_token)pick);
        if (d < 8 || d % 250 == 0) printf("c%ld draw %d pick=%lld\n", case_no, d, pick);
    }
    printf("c%ld draws h=%016llx\n", case_no, (unsigned long long)h);
    free(orig);
    llama_sampler_free(s);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s VOCAB.gguf [CASES]\n", argv[0]); return 2; }
    long cases = argc > 2 ? atol(argv[2]) : 3000;
    if (getenv("DUMP")) dump_case = atol(getenv("DUMP"));
    llama_log_set(NULL, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { printf("load failed\n"); return 1; }
    g_vocab = llama_model_get_vocab(model);
    g_n_vocab = llama_vocab_n_tokens(g_vocab);
    printf("n_vocab %d\n", g_n_vocab);

    static const size_t sizes[] = { 0, 1, 2, 3, 5, 10, 16, 17, 33, 100, 128, 129, 200, 256, 257, 1000,
                                    1024, 1025, 2000, 5000, 32000 };
    const size_t n_sizes = sizeof sizes / sizeof *sizes;
    buf_len = 151936;
    buf_base = malloc(buf_len * sizeof *buf_base);

    rng_state = 42;
    if (argc > 3 && strcmp(argv[3], "breakers") == 0) {
        /* DRY with text sequence breakers (tokenized through the vocabulary) */
        const char *breakers[] = { "\n", ":", "\"", "*", "", NULL, "The quick brown fox jumps over the lazy dog again" };
        struct llama_sampler *s = llama_sampler_init_dry(g_vocab, 0.8f, 1.75f, 2, 64, (const char **)breakers, 7);
        if (!s) { printf("dry-breakers NULL\n"); return 0; }
        for (case_no = 0; case_no < cases; case_no++) {
            size_t n = 1 + (size_t)below(300);
            buf_len = n;
            fill(n, below(11), below(2));
            llama_token_data_array a = { buf_base, n, -1, false };
            llama_sampler_apply(s, &a);
            report("dry-breakers", &a);
            /* accept repeating text (a cycle of 6 tokens, among them ":" = 25 and "\n" = 198,
               breakers) so that repeats build up, are penalized and are cut by breakers */
            static llama_token cycle[6];
            if (case_no % 50 == 0)
                for (int r = 0; r < 6; r++) cycle[r] = (llama_token)(below(4) == 0 ? (below(2) ? 25 : 198) : below(10));
            for (int r = 0; r < 4; r++) llama_sampler_accept(s, cycle[(case_no * 4 + r) % 6]);
            if (case_no % 50 == 49) llama_sampler_reset(s);
        }
        llama_sampler_free(s);
        llama_model_free(model);
        printf("done\n");
        return 0;
    }
    for (case_no = 0; case_no < cases; case_no++) {
        int kind = (int)(case_no % N_KINDS);
        size_t n = sizes[below((int)n_sizes)];
        if (case_no % 97 == 0) n = (size_t)g_n_vocab;       /* the whole vocabulary */
        if (case_no % 389 == 0) n = 151936;                  /* a huge vocabulary */
        if (kind == K_INFILL && n > 2000) n = 2000;          /* pieces are compared pairwise */
        if (kind == K_INFILL && n > (size_t)g_n_vocab) n = (size_t)g_n_vocab;
        if (n == 0 && !empty_ok(kind)) n = 1;
        buf_len = n;
        int shape = below(11);
        int variant = below(64);
        run_case(kind, n, shape, variant);
    }
    /* the same picks for the same seed over many draws */
    static const int draw_kinds[] = { K_DIST, K_MIROSTAT, K_MIROSTAT_V2, K_XTC, K_ADAPTIVE_P };
    for (int i = 0; i < 40; i++, case_no++) {
        size_t n = sizes[1 + below((int)n_sizes - 1)];
        buf_len = n;
        draws(draw_kinds[i % 5], n, below(11), (uint32_t)next_u64());
    }
    /* perf counters exist (times differ between runs; counts do not) */
    struct llama_sampler *c = chain_of(0, 7);
    buf_len = 100;
    for (int i = 0; i < 5; i++) {
        fill(100, 0, 0);
        llama_token_data_array a = { buf_base, 100, -1, false };
        llama_sampler_apply(c, &a);
        llama_sampler_accept(c, a.data[a.selected].id);
    }
    printf("perf n_sample=%d chain_n=%d get_seed=%u\n", llama_perf_sampler(c).n_sample, llama_sampler_chain_n(c),
           llama_sampler_get_seed(c));
    llama_perf_sampler_reset(c);
    printf("perf after reset n_sample=%d t=%f\n", llama_perf_sampler(c).n_sample, llama_perf_sampler(c).t_sample_ms);
    for (int i = -1; i <= llama_sampler_chain_n(c); i++) {
        struct llama_sampler *e = llama_sampler_chain_get(c, i);
        printf("chain_get %d %s\n", i, e ? llama_sampler_name(e) : "NULL");
    }
    struct llama_sampler *removed = llama_sampler_chain_remove(c, 1);
    printf("removed %s n=%d\n", llama_sampler_name(removed), llama_sampler_chain_n(c));
    llama_sampler_free(removed);
    llama_sampler_free(c);
    llama_model_free(model);
    free(buf_base);
    printf("done\n");
    return 0;
}
