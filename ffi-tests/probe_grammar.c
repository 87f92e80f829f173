/* Differential probe for grammar samplers: built once against upstream's llama.h and run on
 * both libraries (LD_LIBRARY_PATH) with a vocab-only model. For each grammar it creates the
 * sampler, applies it to all tokens (logit 0), prints which stay finite (count, FNV-1a hash
 * of the ids, the first ids), accepts one of them (a seeded pseudo-random pick) and repeats;
 * then reset and clone are checked. Outputs must be identical.
 *
 * usage: probe_grammar MODEL files GBNF...   each file's grammar (root "root")
 *        probe_grammar MODEL builtin         grammars of upstream's integration tests, token
 *                                            references, lazy samplers
 *        probe_grammar MODEL invalid         grammars upstream refuses without aborting
 *        probe_grammar MODEL hostile         input upstream aborts or crashes on (ours only):
 *                                            every line must say NULL */
#include "llama.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 24

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void) level; (void) text; (void) ud; }

static const struct llama_vocab *vocab;
static int32_t n_vocab;
static llama_token_data *cand;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t next_rand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t) (rng >> 33);
}

/* Applies `smpl` to all tokens; prints the finite ones; returns how many, ids in `out`. */
static int32_t apply_all(struct llama_sampler *smpl, const char *tag, llama_token *out) {
    for (int32_t i = 0; i < n_vocab; i++) cand[i] = (llama_token_data){ i, 0.0f, 0.0f };
    llama_token_data_array arr = { cand, (size_t) n_vocab, -1, false };
    llama_sampler_apply(smpl, &arr);
    uint64_t h = 1469598103934665603ull;
    int32_t n = 0;
    for (size_t i = 0; i < arr.size; i++) {
        if (arr.data[i].logit > -1e30f) {
            out[n++] = arr.data[i].id;
            h = (h ^ (uint64_t) (uint32_t) arr.data[i].id) * 1099511628211ull;
        }
    }
    printf("  %s: size %zu allowed %d hash %016llx first", tag, arr.size, n, (unsigned long long) h);
    for (int32_t i = 0; i < n && i < 6; i++) printf(" %d", out[i]);
    printf("\n");
    return n;
}

/* The random walk: apply, pick an allowed token (not end-of-generation while others exist),
 * accept it; then reset (must equal step 0) and clone (must equal the original). */
static void walk(struct llama_sampler *smpl, const llama_token *prefix, int n_prefix) {
    llama_token *allowed = malloc(sizeof(llama_token) * (size_t) n_vocab);
    char tag[32];
    for (int i = 0; i < n_prefix; i++) {
        snprintf(tag, sizeof tag, "prefix %d", i);
        apply_all(smpl, tag, allowed);
        llama_sampler_accept(smpl, prefix[i]);
        printf("  accept %d\n", prefix[i]);
    }
    for (int step = 0; step < STEPS; step++) {
        snprintf(tag, sizeof tag, "step %d", step);
        int32_t n = apply_all(smpl, tag, allowed);
        if (n == 0) break;
        int32_t n_plain = 0;
        for (int32_t i = 0; i < n; i++) if (!llama_vocab_is_eog(vocab, allowed[i])) allowed[n_plain++] = allowed[i];
        if (n_plain == 0) { printf("  only end-of-generation left\n"); break; }
        llama_token pick = allowed[next_rand() % (uint32_t) n_plain];
        llama_sampler_accept(smpl, pick);
        printf("  accept %d\n", pick);
        if (step == 5) {
            struct llama_sampler *copy = llama_sampler_clone(smpl);
            apply_all(copy, "clone", allowed);
            apply_all(smpl, "original", allowed);
            llama_sampler_free(copy);
        }
    }
    llama_sampler_reset(smpl);
    apply_all(smpl, "after reset", allowed);
    free(allowed);
}

static void run_grammar(const char *name, const char *text) {
    struct llama_sampler *smpl = llama_sampler_init_grammar(vocab, text, "root");
    printf("grammar %s: %s\n", name, smpl ? "ok" : "NULL");
    if (!smpl) return;
    printf("  name %s\n", llama_sampler_name(smpl));
    walk(smpl, NULL, 0);
    llama_sampler_free(smpl);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t) n + 1);
    size_t got = fread(buf, 1, (size_t) n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

/* Token id whose vocab text is exactly `text` (GPT-2 byte encoding for BPE: plain ASCII
 * letters and punctuation are themselves), or -1. */
static llama_token find_token(const char *text) {
    for (llama_token i = 0; i < n_vocab; i++) {
        const char *t = llama_vocab_get_text(vocab, i);
        if (t && strcmp(t, text) == 0) return i;
    }
    return -1;
}

/* Grammars of upstream's test-grammar-integration.cpp (the ones not generated from schemas)
 * and a few more constructs. */
static const char *builtin[][2] = {
    { "simple", "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= number\nnumber ::= [0-9]+" },
    { "complex",
      "root ::= expression\n"
      "expression ::= term ws ((\"+\"|\"-\") ws term)*\n"
      "term ::= factor ws ((\"*\"|\"/\") ws factor)*\n"
      "factor ::= number | variable | \"(\" expression \")\" | function-call\n"
      "number ::= [0-9]+\n"
      "variable ::= [a-zA-Z_][a-zA-Z0-9_]*\n"
      "function-call ::= variable ws \"(\" (expression (\",\" ws expression)*)? \")\"\n"
      "ws ::= [ \\t\\n\\r]?" },
    { "special", "root ::= ... \"abc\" ..." },
    { "star", "root ::= \"a\"*" },
    { "plus", "root ::= \"a\"+" },
    { "optional", "root ::= \"a\"?" },
    { "mixed", "root ::= cons+ vowel* cons? (vowel cons)*\nvowel ::= [aeiouy]\ncons ::= [bcdfghjklmnpqrstvwxyz]" },
    { "exact", "root ::= [ab]{4}" },
    { "min", "root ::= [ab]{4,}" },
    { "max", "root ::= [ab]{0,4}" },
    { "minmax", "root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}" },
    { "segfault", "root ::= ( [x]* )*" },
    { "tokens", "root ::= <[128000]> content <[128001]>\ncontent ::= (!<[128001]>)*" },
    { "token-text", "root ::= <|begin_of_text|> [a-z ]+ <|end_of_text|>" },
    { "unicode", "root ::= [^a-z\\x00-\\x1f]+ \"é\" [\\u4e00-\\u9fff]{1,3} \"😀\"?" },
    { "any", "root ::= . . \"!\"" },
};

static const char *invalid[][2] = {
    { "unterminated-string", "root ::= \"abc" },
    { "unterminated-class", "root ::= [abc" },
    { "missing-ref", "root ::= expr\nexpr ::= numero" },
    { "left-recursion", "root ::= \"a\" | root \"a\"" },
    { "left-recursion-nullable", "root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | empty asdf \"d\" | \"e\"\nempty ::= \"blah\" | " },
    { "too-many", "root ::= \"a\"{5000}" },
    { "nested-too-many", "root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}" },
    { "no-root", "foobar ::= \"foobar\"" },
    { "bad-escape", "root ::= \"\\q\"" },
    { "unknown-token", "root ::= <not-a-token>" },
    { "only-comment", "# nothing\n" },
    { "huge-int", "root ::= \"a\"{99999999999999999999999}" },
};

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL files|builtin|invalid|hostile [GBNF...]\n", argv[0]); return 2; }
    if (!getenv("PROBE_GRAMMAR_LOG")) llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], params);
    if (!model) { printf("load = NULL\n"); return 1; }
    vocab = llama_model_get_vocab(model);
    n_vocab = llama_vocab_n_tokens(vocab);
    cand = malloc(sizeof(llama_token_data) * (size_t) n_vocab);
    printf("n_vocab %d\n", n_vocab);
    const char *mode = argv[2];

    if (strcmp(mode, "files") == 0) {
        for (int i = 3; i < argc; i++) {
            char *text = read_file(argv[i]);
            if (!text) { printf("grammar %s: unreadable\n", argv[i]); continue; }
            const char *base = strrchr(argv[i], '/');
            run_grammar(base ? base + 1 : argv[i], text);
            free(text);
        }
    } else if (strcmp(mode, "builtin") == 0) {
        for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) run_grammar(builtin[i][0], builtin[i][1]);

        /* empty grammar: a sampler that leaves everything */
        struct llama_sampler *empty = llama_sampler_init_grammar(vocab, "", "root");
        printf("grammar empty: %s\n", empty ? "ok" : "NULL");
        if (empty) { llama_token *ids = malloc(sizeof(llama_token) * (size_t) n_vocab); apply_all(empty, "apply", ids); free(ids); llama_sampler_free(empty); }

        /* lazy: trigger word, pattern (first group), token; text before the trigger is free */
        const char *tool_grammar = "root ::= \"<tool>\" \"{\" [a-z]* \"}\"";
        llama_token hello = find_token("hello"), lt = find_token("<"), tool = find_token("tool"), gt = find_token(">");
        printf("lazy tokens %d %d %d %d\n", hello, lt, tool, gt);
        llama_token prefix[] = { hello, lt, tool, gt };
        const char *words[] = { "<tool>" };
        struct llama_sampler *s = llama_sampler_init_grammar_lazy(vocab, tool_grammar, "root", words, 1, NULL, 0);
        printf("grammar lazy-word: %s\n", s ? "ok" : "NULL");
        if (s) { walk(s, prefix, 4); llama_sampler_free(s); }
        const char *patterns[] = { "[\\s\\S]*?(<tool>)[\\s\\S]*", "^never$" };
        s = llama_sampler_init_grammar_lazy_patterns(vocab, tool_grammar, "root", patterns, 2, NULL, 0);
        printf("grammar lazy-pattern: %s\n", s ? "ok" : "NULL");
        if (s) { walk(s, prefix, 4); llama_sampler_free(s); }
        /* pattern edge cases: anchored (upstream's regex_match path), an empty first group
         * (the second one counts), a start inside a token (its piece is cut) */
        const char *edge_patterns[][2] = {
            { "anchored", "^[\\s\\S]*?(<tool>)$" },
            { "empty-group", "[\\s\\S]*?()(<tool>)[\\s\\S]*" },
            { "no-group", "<tool>" },
        };
        for (size_t i = 0; i < sizeof edge_patterns / sizeof edge_patterns[0]; i++) {
            const char *one[] = { edge_patterns[i][1] };
            s = llama_sampler_init_grammar_lazy_patterns(vocab, tool_grammar, "root", one, 1, NULL, 0);
            printf("grammar lazy-%s: %s\n", edge_patterns[i][0], s ? "ok" : "NULL");
            if (s) { walk(s, prefix, 4); llama_sampler_free(s); }
        }
        const char *mid_patterns[] = { "[\\s\\S]*?(ol>)[\\s\\S]*" };
        s = llama_sampler_init_grammar_lazy_patterns(vocab, "root ::= \"ol>\" \"{\" [a-z]* \"}\"", "root", mid_patterns, 1, NULL, 0);
        printf("grammar lazy-midtoken: %s\n", s ? "ok" : "NULL");
        if (s) { walk(s, prefix, 4); llama_sampler_free(s); }
        const char *tok_grammar = "root ::= <|begin_of_text|> [a-z]+";
        llama_token bot = 128000;
        llama_token tok_prefix[] = { hello, bot };
        s = llama_sampler_init_grammar_lazy_patterns(vocab, tok_grammar, "root", NULL, 0, &bot, 1);
        printf("grammar lazy-token: %s\n", s ? "ok" : "NULL");
        if (s) { walk(s, tok_prefix, 2); llama_sampler_free(s); }
    } else if (strcmp(mode, "invalid") == 0) {
        for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
            struct llama_sampler *s = llama_sampler_init_grammar(vocab, invalid[i][1], "root");
            printf("grammar %s: %s\n", invalid[i][0], s ? "ok" : "NULL");
            if (s) llama_sampler_free(s);
        }
    } else if (strcmp(mode, "hostile") == 0) {
        /* upstream: std::regex throws out of a C function (abort) */
        const char *bad_patterns[] = { "(unclosed" };
        struct llama_sampler *s = llama_sampler_init_grammar_lazy_patterns(vocab, "root ::= \"a\"", "root", bad_patterns, 1, NULL, 0);
        printf("bad-pattern: %s\n", s ? "ok" : "NULL");
        /* upstream: NULL entries, NULL arrays with counts (GGML_ASSERT or a crash) */
        const char *null_pattern[] = { NULL };
        s = llama_sampler_init_grammar_lazy_patterns(vocab, "root ::= \"a\"", "root", null_pattern, 1, NULL, 0);
        printf("null-pattern: %s\n", s ? "ok" : "NULL");
        s = llama_sampler_init_grammar_lazy_patterns(vocab, "root ::= \"a\"", "root", NULL, 0, NULL, 3);
        printf("null-tokens: %s\n", s ? "ok" : "NULL");
        /* upstream: std::string(NULL) */
        s = llama_sampler_init_grammar(vocab, "root ::= \"a\"", NULL);
        printf("null-root: %s\n", s ? "ok" : "NULL");
        /* upstream: asserts on apply */
        s = llama_sampler_init_grammar(NULL, "root ::= \"a\"", "root");
        printf("null-vocab: %s\n", s ? "ok" : "NULL");
        /* upstream: undefined decoding of invalid UTF-8 */
        s = llama_sampler_init_grammar(vocab, "root ::= \"\xff\xfe\"", "root");
        printf("invalid-utf8: %s\n", s ? "ok" : "NULL");
        /* upstream: recursion per group, stack overflow */
        size_t depth = 200000;
        char *deep = malloc(2 * depth + 16);
        strcpy(deep, "root ::= ");
        size_t k = strlen(deep);
        for (size_t i = 0; i < depth; i++) deep[k++] = '(';
        deep[k++] = '"'; deep[k++] = 'a'; deep[k++] = '"';
        for (size_t i = 0; i < depth; i++) deep[k++] = ')';
        deep[k] = 0;
        s = llama_sampler_init_grammar(vocab, deep, "root");
        printf("deep-nesting: %s\n", s ? "ok" : "NULL");
        free(deep);
        /* upstream: {m,n} with n < m loops about 2^64 times */
        s = llama_sampler_init_grammar(vocab, "root ::= \"a\"{3,1}", "root");
        printf("max-below-min: %s\n", s ? "ok" : "NULL");
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    free(cand);
    llama_model_free(model);
    return 0;
}
