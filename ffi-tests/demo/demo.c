/* The demo host: writes a small GGUF model, loads it through llama.h like any llama.cpp
 * host would, and prints what the library knows about it. It grows with each feature. */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tiny_gguf.h"

static bool on_progress(float progress, void *user_data) {
    int *calls = user_data;
    (*calls)++;
    if (progress == 1.0f) printf("  progress: %d callbacks, last = 1.0\n", *calls);
    return true;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "demo-model.gguf";
    if (tiny_gguf_write(path) != 0) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    printf("llama-hotswap demo (llama.cpp API %s)\n", llama_version());
    printf("wrote %s\n", path);

    llama_backend_init();
    const enum llama_load_mode modes[] = { LLAMA_LOAD_MODE_MMAP, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_DIRECT_IO };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        struct llama_model_params params = llama_model_default_params();
        int calls = 0;
        params.load_mode = modes[i];
        params.progress_callback = on_progress;
        params.progress_callback_user_data = &calls;
        int64_t t0 = llama_time_us();
        struct llama_model *model = llama_model_load_from_file(path, params);
        if (!model) { fprintf(stderr, "load failed (mode %s)\n", llama_load_mode_name(modes[i])); return 1; }
        printf("\nloaded with load_mode=%s in %.2f ms\n", llama_load_mode_name(modes[i]), (llama_time_us() - t0) / 1000.0);
        char buf[256];
        llama_model_desc(model, buf, sizeof buf);
        printf("  desc: %s\n", buf);
        printf("  n_ctx_train=%d n_embd=%d n_layer=%d n_head=%d n_head_kv=%d rope_type=%d\n",
               llama_model_n_ctx_train(model), llama_model_n_embd(model), llama_model_n_layer(model),
               llama_model_n_head(model), llama_model_n_head_kv(model), (int) llama_model_rope_type(model));
        printf("  size=%llu bytes, n_params=%llu, ftype=%s\n", (unsigned long long) llama_model_size(model),
               (unsigned long long) llama_model_n_params(model), llama_ftype_name(llama_model_ftype(model)));
        if (i == 0) {
            printf("  metadata (%d keys):\n", llama_model_meta_count(model));
            for (int k = 0; k < llama_model_meta_count(model); k++) {
                char key[128], val[128];
                llama_model_meta_key_by_index(model, k, key, sizeof key);
                llama_model_meta_val_str_by_index(model, k, val, sizeof val);
                printf("    %-40s = %s\n", key, val);
            }
            const struct llama_vocab *vocab = llama_model_get_vocab(model);
            printf("  vocab: type=%d n_tokens=%d bos=%d '%s' eos=%d '%s'\n", (int) llama_vocab_type(vocab),
                   llama_vocab_n_tokens(vocab), llama_vocab_bos(vocab), llama_vocab_get_text(vocab, llama_vocab_bos(vocab)),
                   llama_vocab_eos(vocab), llama_vocab_get_text(vocab, llama_vocab_eos(vocab)));
            printf("  chat template: %s\n", llama_model_chat_template(model, NULL));
        }
        llama_model_free(model);
    }
    llama_backend_free();
    printf("\ndone\n");
    return 0;
}
