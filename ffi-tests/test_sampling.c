/*
 * Samplers, hostile and edge cases: NULL and foreign pointers, samplers freed twice or freed
 * while a chain owns them, chain cycles, out-of-range indices, empty and malformed arrays,
 * uncloneable samplers. Each gets upstream's failure value and a log line naming the
 * function, never a crash (upstream aborts or crashes on most of these). The arithmetic is
 * checked differentially (scripts/test-sampling.sh); here only behaviour upstream leaves
 * undefined, plus names and ownership.
 */
#include "llama.h"

#include "harness.h"
#include "logcap.h"

static llama_token_data buf[64];

static void fill(size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        buf[i].id = (llama_token)i;
        buf[i].logit = (float)((i * 7) % 11) - 5.0f;
        buf[i].p = 0.0f;
    }
}

/* A caller-implemented sampler that counts its calls. */
static int frees, applies, accepts;
static const char *c_name(const struct llama_sampler *s) { (void)s; return "counting"; }
static void c_accept(struct llama_sampler *s, llama_token t) { (void)s; (void)t; accepts++; }
static void c_apply(struct llama_sampler *s, llama_token_data_array *a) {
    (void)s;
    applies++;
    if (a->size > 0) a->data[0].logit += 100.0f;
}
static void c_free(struct llama_sampler *s) { (void)s; frees++; }
static struct llama_sampler_i c_iface = { c_name, c_accept, c_apply, NULL, NULL, c_free,
                                          NULL, NULL, NULL, NULL, NULL, NULL };
static int c_ctx; /* a non-NULL ctx without clone: upstream aborts on clone */

TEST(null_pointers) {
    llama_token_data_array a;
    struct llama_perf_sampler_data perf;
    struct llama_sampler *s = llama_sampler_init_greedy();
    fill(4);
    a.data = buf; a.size = 4; a.selected = -1; a.sorted = false;
    logcap_install();
    /* upstream's explicit no-ops for NULL */
    llama_sampler_accept(NULL, 1);
    llama_sampler_apply(NULL, &a);
    llama_sampler_reset(NULL);
    llama_sampler_free(NULL);
    CHECK(llama_sampler_clone(NULL) == NULL);
    CHECK(llama_sampler_chain_get(NULL, 0) == NULL);
    CHECK_INT(logcap_lines, 0);
    CHECK_INT((long long)a.size, 4);
    /* upstream crashes on these */
    CHECK(llama_sampler_name(NULL) == NULL);
    CHECK(logcap_contains("llama_sampler_name"));
    CHECK_INT(llama_sampler_get_seed(NULL), LLAMA_DEFAULT_SEED);
    CHECK(logcap_contains("llama_sampler_get_seed"));
    CHECK_INT(llama_sampler_chain_n(NULL), -1);
    CHECK(logcap_contains("llama_sampler_chain_n"));
    CHECK(llama_sampler_chain_remove(NULL, 0) == NULL);
    CHECK(logcap_contains("llama_sampler_chain_remove"));
    logcap_clear();
    llama_sampler_chain_add(NULL, s);
    CHECK(logcap_contains("llama_sampler_chain_add"));
    perf = llama_perf_sampler(NULL);
    CHECK_INT(perf.n_sample, 0);
    CHECK(logcap_contains("llama_perf_sampler"));
    logcap_clear();
    perf = llama_perf_sampler(s); /* not a chain: upstream aborts */
    CHECK_INT(perf.n_sample, 0);
    CHECK(logcap_contains("not a chain"));
    llama_perf_sampler_reset(s);
    llama_perf_sampler_print(NULL);
    logcap_clear();
    CHECK_INT(llama_sampler_sample(s, NULL, 0), LLAMA_TOKEN_NULL);
    CHECK(logcap_contains("llama_sampler_sample"));
    logcap_clear();
    llama_sampler_apply(s, NULL);
    CHECK(logcap_contains("cur_p is NULL"));
    logcap_clear();
    /* still the caller's after the refused chain_add: freed without complaint */
    llama_sampler_free(s);
    CHECK_INT(logcap_lines, 0);
    llama_log_set(NULL, NULL);
}

TEST(malformed_arrays) {
    llama_token_data_array a;
    struct llama_sampler *s = llama_sampler_init_top_k(2);
    logcap_install();
    a.data = NULL; a.size = 5; a.selected = 3; a.sorted = false;
    llama_sampler_apply(s, &a);
    CHECK(logcap_contains("cur_p->data is NULL"));
    CHECK_INT((long long)a.size, 5);
    CHECK_INT(a.selected, 3);
    llama_sampler_free(s);
    llama_log_set(NULL, NULL);
}

TEST(double_free_and_foreign) {
    struct llama_sampler fake;
    llama_token_data_array a;
    struct llama_sampler *s = llama_sampler_init_dist(1);
    fill(4);
    a.data = buf; a.size = 4; a.selected = -1; a.sorted = false;
    logcap_install();
    llama_sampler_free(s);
    CHECK_INT(logcap_lines, 0);
    llama_sampler_free(s); /* twice: refused, nothing touched */
    CHECK(logcap_contains("llama_sampler_free"));
    CHECK(logcap_contains("not a live sampler"));
    /* a struct the library never allocated: usable through its iface (llama-cpp-python's
       CustomSampler is built this way), never freed by the library */
    fake.iface = &c_iface;
    fake.ctx = &c_ctx;
    frees = applies = 0;
    logcap_clear();
    llama_sampler_apply(&fake, &a);
    CHECK_INT(applies, 1);
    CHECK_STR(llama_sampler_name(&fake), "counting");
    CHECK_INT(logcap_lines, 0);
    llama_sampler_free(&fake);
    CHECK(logcap_contains("not a live sampler"));
    CHECK_INT(frees, 0);
    llama_log_set(NULL, NULL);
}

TEST(chain_ownership) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    struct llama_sampler *inner = llama_sampler_chain_init(cp);
    struct llama_sampler *greedy = llama_sampler_init_greedy();
    struct llama_sampler *custom = llama_sampler_init(&c_iface, &c_ctx);
    struct llama_sampler *removed, *other;
    frees = 0;
    logcap_install();
    llama_sampler_chain_add(chain, custom);
    llama_sampler_chain_add(chain, greedy);
    CHECK_INT(llama_sampler_chain_n(chain), 2);
    CHECK_INT(logcap_lines, 0);
    /* freeing a sampler the chain owns: refused (upstream frees it twice later) */
    llama_sampler_free(greedy);
    CHECK(logcap_contains("belongs to a chain"));
    logcap_clear();
    llama_sampler_chain_add(chain, greedy); /* already in this chain */
    CHECK(logcap_contains("already in this chain"));
    logcap_clear();
    llama_sampler_chain_add(inner, greedy); /* in another chain */
    CHECK(logcap_contains("already belongs to a chain"));
    CHECK_INT(llama_sampler_chain_n(chain), 2);
    CHECK_INT(llama_sampler_chain_n(inner), 0);
    logcap_clear();
    llama_sampler_chain_add(chain, chain); /* itself */
    CHECK(logcap_contains("llama_sampler_chain_add"));
    llama_sampler_chain_add(chain, inner);
    logcap_clear();
    llama_sampler_chain_add(inner, chain); /* a cycle through its parent */
    CHECK(logcap_contains("contains it"));
    CHECK_INT(llama_sampler_chain_n(inner), 0);
    other = llama_sampler_init_greedy();
    llama_sampler_chain_add(greedy, other); /* not a chain */
    CHECK(logcap_contains("not a chain"));
    llama_sampler_free(other);
    /* indices */
    logcap_clear();
    CHECK(llama_sampler_chain_get(chain, -1) == chain);
    CHECK(llama_sampler_chain_get(chain, 0) == custom);
    CHECK(llama_sampler_chain_get(chain, 3) == NULL);
    CHECK(llama_sampler_chain_get(chain, -2) == NULL);
    CHECK(llama_sampler_chain_remove(chain, 3) == NULL);
    CHECK(llama_sampler_chain_remove(chain, -1) == NULL);
    CHECK(logcap_contains("out of range"));
    CHECK_INT(llama_sampler_chain_n(chain), 3);
    removed = llama_sampler_chain_remove(chain, 1);
    CHECK(removed == greedy);
    CHECK_INT(llama_sampler_chain_n(chain), 2);
    logcap_clear();
    llama_sampler_free(removed); /* the caller's again */
    CHECK_INT(logcap_lines, 0);
    /* the chain frees what it owns, once: the custom sampler's free runs once */
    llama_sampler_free(chain);
    CHECK_INT(frees, 1);
    CHECK_INT(logcap_lines, 0);
    llama_sampler_free(inner); /* freed with its chain */
    CHECK(logcap_contains("not a live sampler"));
    llama_log_set(NULL, NULL);
}

TEST(custom_sampler_inside_chain) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    llama_token_data_array a;
    frees = applies = accepts = 0;
    llama_sampler_chain_add(chain, llama_sampler_init(&c_iface, &c_ctx));
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    fill(8);
    a.data = buf; a.size = 8; a.selected = -1; a.sorted = false;
    llama_sampler_apply(chain, &a);
    CHECK_INT(applies, 1);
    CHECK_INT(a.selected, 0); /* the custom sampler raised token 0 */
    llama_sampler_accept(chain, 0);
    CHECK_INT(accepts, 1);
    CHECK_INT(llama_perf_sampler(chain).n_sample, 1);
    CHECK_STR(llama_sampler_name(llama_sampler_chain_get(chain, 0)), "counting");
    /* clone: the custom sampler cannot be cloned (ctx set, no clone): NULL, no abort */
    logcap_install();
    CHECK(llama_sampler_clone(chain) == NULL);
    CHECK(logcap_contains("does not support cloning"));
    CHECK_INT(frees, 0);
    llama_sampler_free(chain);
    CHECK_INT(frees, 1);
    llama_log_set(NULL, NULL);
}

/* llama-cpp-python's CustomSampler: a struct in the caller's memory, only `apply` set, added
   to a chain, removed before the chain is freed; the chain must never free it. */
TEST(caller_built_sampler_in_chain) {
    struct llama_sampler_i iface;
    struct llama_sampler own;
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp), *other = llama_sampler_chain_init(cp);
    llama_token_data_array a;
    memset(&iface, 0, sizeof iface);
    iface.apply = c_apply;
    own.iface = &iface;
    own.ctx = NULL;
    applies = frees = 0;
    logcap_install();
    llama_sampler_chain_add(chain, &own);
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    CHECK_INT(llama_sampler_chain_n(chain), 2);
    fill(8);
    a.data = buf; a.size = 8; a.selected = -1; a.sorted = false;
    llama_sampler_apply(chain, &a);
    CHECK_INT(applies, 1);
    CHECK_INT(a.selected, 0);
    llama_sampler_accept(chain, 0);
    llama_sampler_reset(chain);
    CHECK_STR(llama_sampler_name(&own), "(null)");
    CHECK_INT(logcap_lines, 0);
    llama_sampler_chain_add(chain, &own); /* twice in one chain: refused */
    CHECK(logcap_contains("already in this chain"));
    /* the way llama-cpp-python frees: remove it, then free the chain */
    CHECK(llama_sampler_chain_remove(chain, 0) == &own);
    llama_sampler_free(chain);
    /* not removed: the chain still does not free it */
    llama_sampler_chain_add(other, &own);
    llama_sampler_free(other);
    CHECK_INT(frees, 0);
    llama_log_set(NULL, NULL);
}

TEST(empty_arrays) {
    struct llama_sampler *list[20];
    llama_token_data_array a;
    int n = 0, i;
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.9f, 1));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(3));
    list[n++] = llama_sampler_init_greedy();
    list[n++] = llama_sampler_init_dist(1);
    list[n++] = llama_sampler_init_top_k(3);
    list[n++] = llama_sampler_init_top_p(0.5f, 1);
    list[n++] = llama_sampler_init_min_p(0.1f, 1);
    list[n++] = llama_sampler_init_typical(0.5f, 1);
    list[n++] = llama_sampler_init_temp(0.5f);
    list[n++] = llama_sampler_init_temp_ext(0.5f, 0.5f, 1.0f);
    list[n++] = llama_sampler_init_xtc(1.0f, 0.1f, 1, 2);
    list[n++] = llama_sampler_init_top_n_sigma(1.0f);
    list[n++] = llama_sampler_init_mirostat(100, 4, 5.0f, 0.1f, 100);
    list[n++] = llama_sampler_init_mirostat_v2(5, 5.0f, 0.1f);
    list[n++] = llama_sampler_init_penalties(100, 8, 1.2f, 0.1f, 0.1f);
    list[n++] = llama_sampler_init_dry(NULL, 0.8f, 1.75f, 2, 16, NULL, 0);
    list[n++] = llama_sampler_init_adaptive_p(0.5f, 0.9f, 6);
    list[n++] = chain;
    for (i = 0; i < n; i++) {
        CHECK(list[i] != NULL);
        if (list[i] == NULL) continue;
        a.data = buf; a.size = 0; a.selected = -1; a.sorted = false;
        llama_sampler_apply(list[i], &a);
        CHECK_INT((long long)a.size, 0);
        a.data = NULL; a.size = 0;
        llama_sampler_apply(list[i], &a);
        llama_sampler_accept(list[i], 0);
        llama_sampler_reset(list[i]);
        llama_sampler_free(list[i]);
    }
}

TEST(names) {
    struct { struct llama_sampler *s; const char *name; } cases[] = {
        { llama_sampler_init_greedy(), "greedy" },
        { llama_sampler_init_dist(1), "dist" },
        { llama_sampler_init_top_k(4), "top-k" },
        { llama_sampler_init_top_k(0), "?top-k" },
        { llama_sampler_init_top_p(0.5f, 1), "top-p" },
        { llama_sampler_init_top_p(1.0f, 1), "?top-p" },
        { llama_sampler_init_min_p(0.1f, 1), "min-p" },
        { llama_sampler_init_min_p(0.0f, 1), "?min-p" },
        { llama_sampler_init_typical(0.5f, 1), "typical" },
        { llama_sampler_init_temp(0.7f), "temp" },
        { llama_sampler_init_temp(1.0f), "?temp" },
        { llama_sampler_init_temp_ext(1.0f, 0.0f, 1.0f), "?temp-ext" },
        { llama_sampler_init_temp_ext(0.8f, 0.0f, 1.0f), "temp-ext" },
        { llama_sampler_init_xtc(0.5f, 0.1f, 1, 1), "xtc" },
        { llama_sampler_init_xtc(0.5f, 0.6f, 1, 1), "?xtc" },
        { llama_sampler_init_top_n_sigma(1.0f), "top-n-sigma" },
        { llama_sampler_init_mirostat(10, 1, 5.0f, 0.1f, 100), "mirostat" },
        { llama_sampler_init_mirostat_v2(1, 5.0f, 0.1f), "mirostat-v2" },
        { llama_sampler_init_penalties(10, 64, 1.1f, 0.0f, 0.0f), "penalties" },
        { llama_sampler_init_penalties(10, 0, 1.1f, 0.0f, 0.0f), "?penalties" },
        { llama_sampler_init_dry(NULL, 0.0f, 1.75f, 2, 16, NULL, 0), "?dry" },
        { llama_sampler_init_logit_bias(10, 0, NULL), "?logit-bias" },
        { llama_sampler_init_adaptive_p(0.5f, 0.9f, 1), "adaptive-p" },
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(cases[i].s != NULL);
        if (cases[i].s == NULL) continue;
        CHECK_STR(llama_sampler_name(cases[i].s), cases[i].name);
        llama_sampler_free(cases[i].s);
    }
}

TEST(constructor_refusals) {
    const char *breakers[2] = { "\n", ":" };
    logcap_install();
    CHECK(llama_sampler_init_logit_bias(10, 3, NULL) == NULL);
    CHECK(logcap_contains("llama_sampler_init_logit_bias"));
    logcap_clear();
    CHECK(llama_sampler_init_infill(NULL) == NULL);
    CHECK(logcap_contains("llama_sampler_init_infill"));
    logcap_clear();
    /* breakers need a vocabulary (upstream dereferences NULL) */
    CHECK(llama_sampler_init_dry(NULL, 0.8f, 1.75f, 2, 16, (const char **)breakers, 2) == NULL);
    CHECK(logcap_contains("llama_sampler_init_dry"));
    llama_log_set(NULL, NULL);
}

TEST(seeds_and_copy) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    struct llama_sampler *chain = llama_sampler_chain_init(cp);
    struct llama_sampler *a = llama_sampler_init_dist(1234);
    struct llama_sampler *b = llama_sampler_init_dist(99);
    struct llama_sampler *g = llama_sampler_init_greedy();
    struct llama_sampler *r;
    llama_token_data_array x, y;
    int i, same = 1;
    CHECK_INT(llama_sampler_get_seed(a), 1234);
    CHECK_INT(llama_sampler_get_seed(g), LLAMA_DEFAULT_SEED);
    llama_sampler_chain_add(chain, llama_sampler_init_mirostat_v2(77, 5.0f, 0.1f));
    llama_sampler_chain_add(chain, llama_sampler_init_top_k(5));
    CHECK_INT(llama_sampler_get_seed(chain), 77);
    r = llama_sampler_init_dist(LLAMA_DEFAULT_SEED); /* a random seed, reported */
    CHECK(llama_sampler_get_seed(r) != LLAMA_DEFAULT_SEED);
    llama_sampler_free(r);
    /* copy: b continues a's stream */
    llama_sampler_copy(a, b);
    CHECK_INT(llama_sampler_get_seed(b), 1234);
    for (i = 0; i < 50; i++) {
        fill(16);
        x.data = buf; x.size = 16; x.selected = -1; x.sorted = false;
        llama_sampler_apply(a, &x);
        fill(16);
        y.data = buf; y.size = 16; y.selected = -1; y.sorted = false;
        llama_sampler_apply(b, &y);
        if (x.selected != y.selected) same = 0;
    }
    CHECK(same);
    logcap_install();
    llama_sampler_copy(g, a); /* different types: refused */
    CHECK(logcap_contains("different sampler types"));
    CHECK_STR(llama_sampler_name(a), "dist");
    llama_log_set(NULL, NULL);
    llama_sampler_free(a);
    llama_sampler_free(b);
    llama_sampler_free(g);
    llama_sampler_free(chain);
}

TEST(xtc_moves_the_start) {
    struct llama_sampler *s = llama_sampler_init_xtc(1.0f, 0.01f, 1, 5);
    llama_token_data_array a;
    size_t i;
    for (i = 0; i < 8; i++) { buf[i].id = (llama_token)i; buf[i].logit = 8.0f - (float)i; buf[i].p = 0; }
    a.data = buf; a.size = 8; a.selected = -1; a.sorted = false;
    llama_sampler_apply(s, &a);
    /* the tokens above 1% but the last of them are removed by advancing the data pointer */
    CHECK(a.data > buf);
    CHECK(a.data < buf + 8);
    CHECK_INT((long long)(a.size + (size_t)(a.data - buf)), 8);
    llama_sampler_free(s);
}

int main(void) {
    RUN(null_pointers);
    RUN(malformed_arrays);
    RUN(double_free_and_foreign);
    RUN(chain_ownership);
    RUN(custom_sampler_inside_chain);
    RUN(caller_built_sampler_in_chain);
    RUN(empty_arrays);
    RUN(names);
    RUN(constructor_refusals);
    RUN(seeds_and_copy);
    RUN(xtc_moves_the_start);
    return harness_finish();
}
