// Backend sampling (llama_set_sampler, llama_get_sampled_*) on both libraries. Prints, for
// the same prompt: the getters' answers without a backend sampler (upstream's: no token, no
// probs, all n_vocab logits, the full-vocabulary candidate list), then attaches a greedy chain
// to sequence 0 (both libraries offload it: the token is sampled inside the decode) and prints
// the tokens the program ends up with, taking llama_get_sampled_token_ith's token as common
// does. Both libraries must print the same lines. Built by scripts/test-programs.sh against
// upstream's headers; the full differential is ffi-tests/diff_backend_sampling.c.
// usage: backend_sampling MODEL
#include "llama.h"

#include <stdio.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char ** argv) {
    if (argc != 2) return 2;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128; cp.n_batch = 128; cp.n_threads = 2; cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const char * prompt = "The capital of France is";
    llama_token toks[64];
    int n = llama_tokenize(vocab, prompt, (int) strlen(prompt), toks, 64, true, false);

    printf("set_sampler(NULL) before any: %d\n", llama_set_sampler(ctx, 0, NULL));
    if (llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) return 1;
    const llama_token * cand = llama_get_sampled_candidates_ith(ctx, -1);
    int full = cand != NULL;
    for (int i = 0; full && i < n_vocab; i++) full = cand[i] == i;
    printf("no sampler: token %d probs %s/%u logits %s/%u candidates %s/%u\n",
           llama_get_sampled_token_ith(ctx, -1),
           llama_get_sampled_probs_ith(ctx, -1) ? "set" : "NULL", llama_get_sampled_probs_count_ith(ctx, -1),
           llama_get_sampled_logits_ith(ctx, -1) ? "set" : "NULL", llama_get_sampled_logits_count_ith(ctx, -1) == (uint32_t) n_vocab ? (uint32_t) n_vocab : 0xffffffffu,
           full ? "0..n_vocab" : "other", llama_get_sampled_candidates_count_ith(ctx, -1));

    struct llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    const bool offloaded = llama_set_sampler(ctx, 0, chain);
    printf("set_sampler(greedy chain): %s\n", offloaded ? "offloaded" : "stays on the CPU");
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) return 1;
    // generate 8 tokens as common_sampler_sample does: the backend's token if there is one
    for (int step = 0; step < 8; step++) {
        llama_token t = llama_get_sampled_token_ith(ctx, -1);
        if (t == LLAMA_TOKEN_NULL) {
            t = llama_sampler_sample(chain, ctx, -1);
        } else {
            llama_sampler_accept(chain, t);
        }
        char piece[64];
        int len = llama_token_to_piece(vocab, t, piece, sizeof(piece) - 1, 0, false);
        piece[len > 0 ? len : 0] = 0;
        printf("token %d '%s'\n", t, piece);
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
    }
    printf("set_sampler(NULL) after: %d\n", llama_set_sampler(ctx, 0, NULL));
    llama_free(ctx);
    llama_sampler_free(chain);
    llama_model_free(model);
    return 0;
}
