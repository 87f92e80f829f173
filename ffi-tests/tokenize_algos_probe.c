/* Tokenizer probe for the per-algorithm differential tests (SPM, WPM, UGM, RWKV, PLaMo2):
 * compiled once against upstream's llama.h, run against upstream's libllama.so and ours
 * (LD_LIBRARY_PATH); the outputs must be identical.
 *
 * usage: tokenize_algos_probe VOCAB.gguf CASES [pieces]
 * CASES holds texts separated by "\n__ggml_vocab_test__\n" (upstream's .inp format).
 * Prints, per case i:
 *   tok i AS PS N id...        llama_tokenize for add_special/parse_special 0/1, plus the
 *   short i AS PS R            return value when the buffer holds one token less than needed
 *   detok i RS US N hex        llama_detokenize(tokenize(AS=1,PS=1)) for remove_special /
 *                              unparse_special 0/1, the bytes in hex (N < 0: too small)
 * and with "pieces", per token id: piece ID SPECIAL LSTRIP N hex. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void) level; (void) text; (void) ud; }

static void hex(const char *p, int n) {
    for (int i = 0; i < n; i++) printf("%02x", (unsigned char) p[i]);
}

static char *read_file(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t) *len + 1);
    if (fread(buf, 1, (size_t) *len, f) != (size_t) *len) { fclose(f); free(buf); return NULL; }
    fclose(f);
    buf[*len] = 0;
    return buf;
}

static void one_case(const struct llama_vocab *v, int idx, const char *text, int len) {
    int cap = len * 4 + 16;
    llama_token *toks = malloc(sizeof(llama_token) * (size_t) cap);
    llama_token *full = NULL;
    int n_full = 0;
    for (int as = 0; as <= 1; as++) {
        for (int ps = 0; ps <= 1; ps++) {
            int n = llama_tokenize(v, text, len, toks, cap, as, ps);
            printf("tok %d %d %d %d", idx, as, ps, n);
            for (int i = 0; i < n; i++) printf(" %d", toks[i]);
            printf("\n");
            if (n > 0) {
                llama_token *small = malloc(sizeof(llama_token) * (size_t) n);
                int r = llama_tokenize(v, text, len, small, n - 1, as, ps);
                printf("short %d %d %d %d\n", idx, as, ps, r);
                free(small);
            }
            int valid = 1;  /* upstream aborts detokenizing an id out of range (RWKV's NULL unknown) */
            for (int i = 0; i < n; i++) valid &= toks[i] >= 0;
            if (as == 1 && ps == 1 && n > 0 && valid) {
                full = malloc(sizeof(llama_token) * (size_t) n);
                memcpy(full, toks, sizeof(llama_token) * (size_t) n);
                n_full = n;
            }
        }
    }
    if (full) {
        int tcap = n_full * 64 + len * 2 + 16;
        char *out = malloc((size_t) tcap);
        for (int rs = 0; rs <= 1; rs++) {
            for (int us = 0; us <= 1; us++) {
                int n = llama_detokenize(v, full, n_full, out, tcap, rs, us);
                printf("detok %d %d %d %d ", idx, rs, us, n);
                if (n > 0) hex(out, n);
                printf("\n");
                if (n > 0) {
                    int r = llama_detokenize(v, full, n_full, out, n - 1, rs, us);
                    printf("detok-short %d %d %d %d\n", idx, rs, us, r);
                }
            }
        }
        free(out);
        free(full);
    }
    free(toks);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s VOCAB.gguf CASES [pieces]\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], params);
    if (!m) { printf("load failed\n"); return 1; }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    printf("load = ok, type %d, n_tokens %d\n", (int) llama_vocab_type(v), llama_vocab_n_tokens(v));

    long len = 0;
    char *all = read_file(argv[2], &len);
    if (!all) { fprintf(stderr, "cannot read %s\n", argv[2]); return 2; }
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sep_len = strlen(sep);
    char *p = all, *end = all + len;
    int idx = 0;
    while (p <= end) {
        char *q = memmem(p, (size_t) (end - p), sep, sep_len);
        char *stop = q ? q : end;
        if (!q && stop == p) break;  // trailing separator: no empty last case
        one_case(v, idx++, p, (int) (stop - p));
        if (!q) break;
        p = q + sep_len;
    }
    free(all);

    if (argc > 3 && strcmp(argv[3], "pieces") == 0) {
        int n = llama_vocab_n_tokens(v);
        char buf[512];
        for (int id = 0; id < n; id++) {
            for (int special = 0; special <= 1; special++) {
                for (int lstrip = 0; lstrip <= 1; lstrip++) {
                    int r = llama_token_to_piece(v, id, buf, sizeof buf, lstrip, special);
                    printf("piece %d %d %d %d ", id, special, lstrip, r);
                    if (r > 0) hex(buf, r);
                    printf("\n");
                }
            }
        }
    }
    llama_model_free(m);
    llama_backend_free();
    return 0;
}
