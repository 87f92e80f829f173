/*
 * Differential tokenizer probe: compiled against UPSTREAM's llama.h, run with upstream's
 * libllama.so and ours (LD_LIBRARY_PATH); the outputs must be identical.
 *
 *   probe_tokenize VOCAB.gguf CORPUS
 *
 * CORPUS holds texts separated by "\n__ggml_vocab_test__\n". For each text, plus texts built
 * here from the vocab's own special tokens, it prints the ids for the four
 * add_special/parse_special pairs, the result for a buffer one token too small, the pieces
 * of every id (lstrip 0/1 x special 0/1), and the detokenized text for the four
 * remove_special/unparse_special pairs, with the too-small-buffer result. For the whole
 * vocab it prints hashes of every token's attributes and pieces (blocks of 1024 ids).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level; (void)text; (void)user;
}

static void print_bytes(const char *label, const char *s, int n) {
    printf("%s %d \"", label, n);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
    printf("\"\n");
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

static char piece[1 << 16];

static void one_text(const struct llama_vocab *v, const char *text, int len) {
    print_bytes("text", text, len);
    int cap = len * 2 + 16;
    llama_token *ids = malloc(sizeof(llama_token) * cap);
    llama_token *keep = NULL;
    int n_keep = 0;
    for (int add = 0; add <= 1; add++) {
        for (int parse = 0; parse <= 1; parse++) {
            int n = llama_tokenize(v, text, len, ids, cap, add, parse);
            printf("tokenize add=%d parse=%d n=%d:", add, parse, n);
            for (int i = 0; i < n; i++) printf(" %d", ids[i]);
            printf("\n");
            if (n > 0) {
                llama_token small[1];
                int m = llama_tokenize(v, text, len, n - 1 > 0 ? ids : small, n - 1, add, parse);
                printf("tokenize small=%d\n", m);
                /* re-run to restore ids */
                llama_tokenize(v, text, len, ids, cap, add, parse);
            }
            if (add && parse && n > 0) {
                keep = malloc(sizeof(llama_token) * n);
                memcpy(keep, ids, sizeof(llama_token) * n);
                n_keep = n;
            }
        }
    }
    for (int i = 0; i < n_keep; i++) {
        for (int lstrip = 0; lstrip <= 1; lstrip++) {
            for (int special = 0; special <= 1; special++) {
                int n = llama_token_to_piece(v, keep[i], piece, sizeof(piece), lstrip, special);
                char label[64];
                snprintf(label, sizeof label, "piece %d l=%d s=%d", keep[i], lstrip, special);
                print_bytes(label, piece, n < 0 ? 0 : n);
            }
        }
    }
    if (n_keep > 0) {
        int tcap = len * 4 + 256;
        char *out = malloc(tcap);
        for (int rs = 0; rs <= 1; rs++) {
            for (int up = 0; up <= 1; up++) {
                int n = llama_detokenize(v, keep, n_keep, out, tcap, rs, up);
                char label[64];
                snprintf(label, sizeof label, "detok rs=%d up=%d", rs, up);
                print_bytes(label, out, n < 0 ? 0 : n);
                if (n > 0) printf("detok small=%d\n", llama_detokenize(v, keep, n_keep, out, n - 1, rs, up));
            }
        }
        free(out);
    }
    free(keep);
    free(ids);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s VOCAB.gguf CORPUS\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = 1;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { printf("load = failed\n"); return 0; }
    printf("load = ok\n");
    const struct llama_vocab *v = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(v);
    printf("type %d n_tokens %d\n", (int)llama_vocab_type(v), n_vocab);
    printf("specials bos %d eos %d eot %d sep %d nl %d pad %d mask %d\n", llama_vocab_bos(v),
           llama_vocab_eos(v), llama_vocab_eot(v), llama_vocab_sep(v), llama_vocab_nl(v),
           llama_vocab_pad(v), llama_vocab_mask(v));
    printf("fim %d %d %d %d %d %d\n", llama_vocab_fim_pre(v), llama_vocab_fim_suf(v),
           llama_vocab_fim_mid(v), llama_vocab_fim_pad(v), llama_vocab_fim_rep(v),
           llama_vocab_fim_sep(v));
    printf("add bos %d eos %d sep %d\n", llama_vocab_get_add_bos(v), llama_vocab_get_add_eos(v),
           llama_vocab_get_add_sep(v));
    for (int b = 0; b < n_vocab; b += 1024) {
        uint64_t ha = 1469598103934665603ull, hp = ha, heog = ha;
        for (int id = b; id < n_vocab && id < b + 1024; id++) {
            int attr = llama_vocab_get_attr(v, id);
            int eog = llama_vocab_is_eog(v, id);
            ha = fnv(ha, &attr, sizeof attr);
            heog = fnv(heog, &eog, sizeof eog);
            for (int lstrip = 0; lstrip <= 1; lstrip++) {
                for (int special = 0; special <= 1; special++) {
                    int n = llama_token_to_piece(v, id, piece, sizeof(piece), lstrip, special);
                    hp = fnv(hp, &n, sizeof n);
                    if (n > 0) hp = fnv(hp, piece, n);
                    int small = llama_token_to_piece(v, id, piece, n > 0 ? n - 1 : 0, lstrip, special);
                    hp = fnv(hp, &small, sizeof small);
                }
            }
        }
        printf("block %d attr %016llx eog %016llx pieces %016llx\n", b, (unsigned long long)ha,
               (unsigned long long)heog, (unsigned long long)hp);
    }

    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 2; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *all = malloc(size + 1);
    if (fread(all, 1, size, f) != (size_t)size) { perror("read"); return 2; }
    fclose(f);
    all[size] = 0;
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t seplen = strlen(sep);
    long pos = 0;
    while (pos <= size) {
        char *next = memmem(all + pos, size - pos, sep, seplen);
        long end = next ? next - all : size;
        one_text(v, all + pos, (int)(end - pos));
        if (!next) break;
        pos = end + seplen;
    }

    /* Texts spelling the vocab's special tokens (control, user-defined, unknown). */
    int n_special = 0;
    for (int id = 0; id < n_vocab && n_special < 40; id++) {
        int attr = llama_vocab_get_attr(v, id);
        if (!(attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN))) continue;
        const char *t = llama_vocab_get_text(v, id);
        char buf[1024];
        int n = snprintf(buf, sizeof buf, "Hello%s world \n %s\t%s%sx  %s", t, t, t, t, t);
        if (n > 0 && n < (int)sizeof buf) one_text(v, buf, n);
        n_special++;
    }
    llama_model_free(model);
    return 0;
}
