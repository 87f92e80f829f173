/* Prints the token ids of TEXT (with BOS as the model adds it) using the library it is run
 * against; the engine test runs it on upstream's library to get prompts as token ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void) level; (void) text; (void) data;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s MODEL TEXT\n", argv[0]); return 2; }
    llama_log_set(quiet, NULL);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_token toks[4096];
    int n = llama_tokenize(llama_model_get_vocab(model), argv[2], (int) strlen(argv[2]), toks, 4096, true, false);
    if (n < 0) return 1;
    for (int i = 0; i < n; i++) printf("%d%s", toks[i], i + 1 < n ? " " : "\n");
    llama_model_free(model);
    return 0;
}
