/* Differential probe: loads one model file through llama.h and prints every metadata
 * getter, one "name = value" line each. Built once against the upstream header and run
 * against both libraries (LD_LIBRARY_PATH), so the outputs can be compared line by line.
 * The meta listing is printed sorted (upstream's order is its hash map's).
 *
 * usage: probe_model FILE [vocab_only] [override:KEY=INT] */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void) level; (void) text; (void) ud; }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *) a, *(char *const *) b); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s FILE [vocab_only] [override:KEY=INT]\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params params = llama_model_default_params();
    params.load_mode = LLAMA_LOAD_MODE_NONE;
    params.n_gpu_layers = 0;
    struct llama_model_kv_override overrides[4];
    int n_over = 0;
    memset(overrides, 0, sizeof overrides);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "vocab_only") == 0) params.vocab_only = true;
        else if (strncmp(argv[i], "override:", 9) == 0 && n_over < 3) {
            const char *kv = argv[i] + 9;
            const char *eq = strchr(kv, '=');
            if (!eq || eq - kv >= 127) return 2;
            memcpy(overrides[n_over].key, kv, (size_t) (eq - kv));
            overrides[n_over].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
            overrides[n_over].val_i64 = atoll(eq + 1);
            n_over++;
        }
    }
    if (n_over) params.kv_overrides = overrides;
    struct llama_model *m = llama_model_load_from_file(argv[1], params);
    if (!m) { printf("load = NULL\n"); return 0; }
    char buf[4096];
    printf("load = ok\n");
    llama_model_desc(m, buf, sizeof buf);
    printf("desc = %s\n", buf);
    printf("n_ctx_train = %d\nn_embd = %d\nn_embd_inp = %d\nn_embd_out = %d\n", llama_model_n_ctx_train(m),
           llama_model_n_embd(m), llama_model_n_embd_inp(m), llama_model_n_embd_out(m));
    printf("n_layer = %d\nn_layer_nextn = %d\n", llama_model_n_layer(m), llama_model_n_layer_nextn(m));
    if (!params.vocab_only) { /* upstream aborts in these for vocab-only models */
        printf("n_head = %d\nn_head_kv = %d\n", llama_model_n_head(m), llama_model_n_head_kv(m));
    }
    printf("n_swa = %d\nrope_type = %d\n", llama_model_n_swa(m), (int) llama_model_rope_type(m));
    printf("rope_freq_scale_train = %g\n", llama_model_rope_freq_scale_train(m));
    printf("n_cls_out = %u\n", llama_model_n_cls_out(m));
    for (uint32_t i = 0; i < llama_model_n_cls_out(m); i++) {
        const char *l = llama_model_cls_label(m, i);
        printf("cls_label[%u] = %s\n", i, l ? l : "(null)");
    }
    printf("size = %llu\nn_params = %llu\nftype = %d\n", (unsigned long long) llama_model_size(m),
           (unsigned long long) llama_model_n_params(m), (int) llama_model_ftype(m));
    const char *t = llama_model_chat_template(m, NULL);
    printf("chat_template = %s\n", t ? t : "(null)");
    t = llama_model_chat_template(m, "tool_use");
    printf("chat_template.tool_use = %s\n", t ? t : "(null)");
    printf("has_encoder = %d\nhas_decoder = %d\ndecoder_start_token = %d\n", llama_model_has_encoder(m),
           llama_model_has_decoder(m), llama_model_decoder_start_token(m));
    printf("is_recurrent = %d\nis_hybrid = %d\nis_diffusion = %d\n", llama_model_is_recurrent(m),
           llama_model_is_hybrid(m), llama_model_is_diffusion(m));
    int n = llama_model_meta_count(m);
    printf("meta_count = %d\n", n);
    char **lines = calloc((size_t) (n > 0 ? n : 1), sizeof *lines);
    for (int i = 0; i < n; i++) {
        char key[256], val[2048];
        int kl = llama_model_meta_key_by_index(m, i, key, sizeof key);
        int vl = llama_model_meta_val_str_by_index(m, i, val, sizeof val);
        lines[i] = malloc(strlen(key) + strlen(val) + 64);
        sprintf(lines[i], "meta %s = %s (%d/%d)", key, val, kl, vl);
        int direct = llama_model_meta_val_str(m, key, buf, sizeof buf);
        if (direct != vl || strcmp(buf, val) != 0) printf("meta_val_str mismatch for %s\n", key);
    }
    qsort(lines, (size_t) n, sizeof *lines, cmp_str);
    for (int i = 0; i < n; i++) { printf("%s\n", lines[i]); free(lines[i]); }
    free(lines);
    printf("meta_val_str(missing) = %d\n", llama_model_meta_val_str(m, "no.such.key", buf, sizeof buf));
    printf("meta_key_by_index(-1) = %d\n", llama_model_meta_key_by_index(m, -1, buf, sizeof buf));

    const struct llama_vocab *v = llama_model_get_vocab(m);
    int nt = llama_vocab_n_tokens(v);
    printf("vocab_type = %d\nn_tokens = %d\n", (int) llama_vocab_type(v), nt);
    printf("bos = %d\neos = %d\neot = %d\nsep = %d\nnl = %d\npad = %d\nmask = %d\n", llama_vocab_bos(v),
           llama_vocab_eos(v), llama_vocab_eot(v), llama_vocab_sep(v), llama_vocab_nl(v), llama_vocab_pad(v),
           llama_vocab_mask(v));
    printf("fim = %d %d %d %d %d %d\n", llama_vocab_fim_pre(v), llama_vocab_fim_suf(v), llama_vocab_fim_mid(v),
           llama_vocab_fim_pad(v), llama_vocab_fim_rep(v), llama_vocab_fim_sep(v));
    printf("add_bos = %d\nadd_eos = %d\nadd_sep = %d\n", llama_vocab_get_add_bos(v), llama_vocab_get_add_eos(v),
           llama_vocab_get_add_sep(v));
    for (int i = 0; i < nt && i < 64; i++) {
        printf("token[%d] = '%s' score=%g attr=%d eog=%d control=%d\n", i, llama_vocab_get_text(v, i),
               llama_vocab_get_score(v, i), (int) llama_vocab_get_attr(v, i), llama_vocab_is_eog(v, i),
               llama_vocab_is_control(v, i));
    }
    llama_model_free(m);
    llama_backend_free();
    return 0;
}
