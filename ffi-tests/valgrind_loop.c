/*
 * Loops every operation that is available without a model file many times, for valgrind
 * (scripts/test-valgrind.sh: --leak-check=full, definite leaks and memory errors fail).
 *
 * To extend: write `static int op_x(void)` (returning 1 when it ran, 0 when skipped) and add
 * it to OPS. Functions that may not be exported yet are declared weak below (the loop is
 * compiled against upstream's header), so an op can test `if (fn == NULL)` and skip. Model load/free runs when
 * LLAMA_HOTSWAP_TEST_MODEL names a GGUF file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#pragma weak llama_batch_init
#pragma weak llama_batch_free
#pragma weak llama_model_load_from_file
#pragma weak llama_model_free
#pragma weak llama_model_get_vocab
#pragma weak llama_vocab_n_tokens

static int lines_logged;

static void quiet_callback(enum ggml_log_level level, const char *text, void *user_data) {
    (void)level;
    (void)text;
    (void)user_data;
    lines_logged++;
}

static int op_log_set_get(void) {
    ggml_log_callback cb = NULL;
    void *ud = NULL;
    llama_log_set(quiet_callback, &lines_logged);
    llama_log_get(&cb, &ud);
    if (cb != quiet_callback || ud != &lines_logged) {
        printf("log_get returned a different callback\n");
        exit(2);
    }
    return 1;
}

static int op_default_params(void) {
    volatile struct llama_model_params mp = llama_model_default_params();
    volatile struct llama_context_params cp = llama_context_default_params();
    volatile struct llama_sampler_chain_params sp = llama_sampler_chain_default_params();
    volatile struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    (void)mp;
    (void)cp;
    (void)sp;
    (void)qp;
    return 1;
}

static int op_names(void) {
    int i;
    for (i = 0; i < 45; i++) {
        (void)llama_ftype_name((enum llama_ftype)i);
        (void)llama_ftype_name((enum llama_ftype)(i | LLAMA_FTYPE_GUESSED));
    }
    (void)llama_load_mode_from_str(llama_load_mode_name(LLAMA_LOAD_MODE_MMAP));
    (void)llama_load_mode_from_str("no such mode"); /* logged error path */
    (void)llama_load_mode_name((enum llama_load_mode)42); /* logged error path */
    (void)llama_model_meta_key_str(LLAMA_MODEL_META_KEY_SAMPLING_TOP_K);
    (void)llama_print_system_info();
    (void)llama_version();
    return 1;
}

static int op_split_path(void) {
    char path[128];
    char prefix[128];
    (void)llama_split_path(path, sizeof path, "/tmp/model", 3, 7);
    (void)llama_split_prefix(prefix, sizeof prefix, path, 3, 7);
    (void)llama_split_path(path, 4, "/tmp/model", 3, 7); /* truncation */
    (void)llama_split_path(path, sizeof path, NULL, 0, 1); /* logged error path */
    return 1;
}

static int op_backend(void) {
    llama_backend_init();
    llama_numa_init(GGML_NUMA_STRATEGY_DISABLED);
    (void)llama_time_us();
    (void)llama_supports_gpu_offload();
    llama_backend_free();
    return 1;
}

static int op_batch(void) {
    struct llama_batch b;
    if (llama_batch_init == NULL || llama_batch_free == NULL) {
        return 0;
    }
    b = llama_batch_init(64, 0, 2);
    llama_batch_free(b);
    b = llama_batch_init(8, 16, 1);
    llama_batch_free(b);
    return 1;
}

static int op_model(void) {
    const char *path = getenv("LLAMA_HOTSWAP_TEST_MODEL");
    struct llama_model *model;
    if (path == NULL || path[0] == '\0' || llama_model_load_from_file == NULL ||
        llama_model_free == NULL) {
        return 0;
    }
    /* Alternate mmap (AUTO) and owned-memory (NONE) loads. */
    static int round;
    struct llama_model_params params = llama_model_default_params();
    if (round++ % 2) params.load_mode = LLAMA_LOAD_MODE_NONE;
    model = llama_model_load_from_file(path, params);
    if (model == NULL) {
        printf("could not load %s\n", path);
        exit(2);
    }
    if (llama_model_get_vocab != NULL && llama_vocab_n_tokens != NULL) {
        (void)llama_vocab_n_tokens(llama_model_get_vocab(model));
    }
    llama_model_free(model);
    return 1;
}

static const struct {
    const char *name;
    int (*run)(void); /* 1: ran, 0: skipped (function or model not available) */
} OPS[] = {
    {"log set/get", op_log_set_get},
    {"default params", op_default_params},
    {"names", op_names},
    {"split path/prefix", op_split_path},
    {"backend init/free", op_backend},
    {"batch init/free", op_batch},
    {"model load/free", op_model},
};

int main(int argc, char **argv) {
    enum { N_OPS = sizeof OPS / sizeof OPS[0] };
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    int ran[N_OPS] = {0};
    int r;
    size_t i;
    for (r = 0; r < rounds; r++) {
        for (i = 0; i < N_OPS; i++) {
            ran[i] += OPS[i].run();
        }
    }
    llama_log_set(NULL, NULL);
    for (i = 0; i < N_OPS; i++) {
        printf("op %-20s %s\n", OPS[i].name, ran[i] ? "ran" : "skipped (not available)");
    }
    printf("%d rounds of %d ops, %d log lines\n", rounds, (int)N_OPS, lines_logged);
    return 0;
}
