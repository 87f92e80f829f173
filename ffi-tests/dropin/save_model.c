// llama_model_save_to_file on either library. Built by scripts/test-programs.sh against
// upstream's headers.
//   save_model save MODEL OUT       load MODEL, save it to OUT
//   save_model logits MODEL         print the prompt's last logits (every 97th, %.9g) and
//                                   the argmax: compared between files and libraries
#include "llama.h"

#include <stdio.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level >= GGML_LOG_LEVEL_WARN || strstr(text, "save")) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    if (argc < 3) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model * model = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }
    if (strcmp(argv[1], "save") == 0 && argc == 4) {
        llama_model_save_to_file(model, argv[3]);
        llama_model_free(model);
        return 0;
    }
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128; cp.n_batch = 128; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    const char * prompt = "The capital of France is";
    llama_token toks[64];
    int n = llama_tokenize(vocab, prompt, (int) strlen(prompt), toks, 64, true, false);
    if (!ctx || n <= 0 || llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) return 1;
    const float * l = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int i = 0; i < llama_vocab_n_tokens(vocab); i++) {
        if (l[i] > l[best]) best = i;
        if (i % 97 == 0) printf("%.9g\n", l[i]);
    }
    printf("argmax %d\n", best);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
