/*
 * LoRA adapter loading probe: compiled against UPSTREAM's llama.h, run on upstream's library
 * and on ours. For each adapter file: whether llama_adapter_lora_init accepts it (NULL for a
 * broken one: the host keeps running and tries the next), and for an accepted one its
 * metadata (every key=value by index, sorted: upstream lists them in hash order), lookups of
 * a present and an absent key, out-of-range indices (-1, buffer cleared), the aLoRA
 * invocation tokens, and the same adapter through llama_adapter_lora_init_from_file_ptr.
 * Prints one block per file; the two libraries' outputs must be identical.
 *
 * usage: probe_lora MODEL ADAPTER...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int n_errors;

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) data;
    if (level >= GGML_LOG_LEVEL_ERROR) { n_errors++; if (getenv("PROBE_VERBOSE")) fputs(text, stderr); }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static void dump(struct llama_adapter_lora *a) {
    int n = llama_adapter_meta_count(a);
    printf("  meta_count %d\n", n);
    char **lines = calloc(n > 0 ? n : 1, sizeof(char *));
    for (int i = 0; i < n; i++) {
        char k[256], v[256];
        int lk = llama_adapter_meta_key_by_index(a, i, k, sizeof k);
        int lv = llama_adapter_meta_val_str_by_index(a, i, v, sizeof v);
        lines[i] = malloc(600);
        snprintf(lines[i], 600, "  %s=%s (%d,%d)", k, v, lk, lv);
    }
    qsort(lines, n, sizeof(char *), cmp_str);
    for (int i = 0; i < n; i++) { puts(lines[i]); free(lines[i]); }
    free(lines);
    char buf[8] = "xxxxxxx";
    printf("  alpha %d ", llama_adapter_meta_val_str(a, "adapter.lora.alpha", buf, sizeof buf));
    printf("'%s'\n", buf);
    strcpy(buf, "xxxxxxx");
    printf("  absent %d '%s'\n", llama_adapter_meta_val_str(a, "no.such.key", buf, sizeof buf), buf);
    strcpy(buf, "xxxxxxx");
    printf("  key[-1] %d '%s'", llama_adapter_meta_key_by_index(a, -1, buf, sizeof buf), buf);
    strcpy(buf, "xxxxxxx");
    printf(" val[n] %d '%s'\n", llama_adapter_meta_val_str_by_index(a, n, buf, sizeof buf), buf);
    uint64_t nt = llama_adapter_get_alora_n_invocation_tokens(a);
    const llama_token *t = llama_adapter_get_alora_invocation_tokens(a);
    printf("  alora %llu:", (unsigned long long) nt);
    for (uint64_t i = 0; i < nt; i++) printf(" %d", t[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL ADAPTER...\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    for (int f = 2; f < argc; f++) {
        const char *name = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
        int before = n_errors;
        struct llama_adapter_lora *a = llama_adapter_lora_init(model, argv[f]);
        if (!a) {
            printf("%s: NULL (error lines %s)\n", name, n_errors > before ? "yes" : "NO");
            continue;
        }
        printf("%s: loaded\n", name);
        dump(a);
        FILE *fp = fopen(argv[f], "rb");
        struct llama_adapter_lora *b = fp ? llama_adapter_lora_init_from_file_ptr(model, fp) : NULL;
        if (fp) fclose(fp);
        printf("  from FILE*: %s, meta_count %d\n", b ? "loaded" : "NULL", b ? llama_adapter_meta_count(b) : -1);
        llama_adapter_lora_free(b);
        /* `a` is left to the model, which frees it (upstream: llama_model's destructor) */
    }
    printf("NULL FILE*: %s\n", llama_adapter_lora_init_from_file_ptr(model, NULL) ? "loaded" : "NULL");
    llama_model_free(model);
    return 0;
}
