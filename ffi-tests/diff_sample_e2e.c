/*
 * End-to-end sampling, differentially: load a model, tokenize a prompt, decode, then generate
 * 32 tokens with llama_sampler_sample through three chains (greedy; temp 0.8 + dist seed 42;
 * top-k/top-p/min-p/temp + dist seed 7), printing the token ids. Run against upstream's
 * library and ours; the outputs must be identical. Exits 77 ("skipped") with the reason when
 * the library cannot tokenize or decode yet.
 *
 * usage: diff_sample_e2e MODEL.gguf
 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

static int generate(struct llama_context *ctx, const struct llama_vocab *vocab, struct llama_sampler *chain,
                    const llama_token *prompt, int n_prompt, const char *label) {
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch batch = llama_batch_get_one((llama_token *)prompt, n_prompt);
    if (llama_decode(ctx, batch) != 0) {
        printf("SKIP: llama_decode failed on the prompt\n");
        return 77;
    }
    printf("%s:", label);
    for (int i = 0; i < 32; i++) {
        llama_token t = llama_sampler_sample(chain, ctx, -1);
        if (t == LLAMA_TOKEN_NULL) {
            printf("\nSKIP: llama_sampler_sample returned LLAMA_TOKEN_NULL (no logits)\n");
            return 77;
        }
        printf(" %d", t);
        if (llama_vocab_is_eog(vocab, t)) break;
        batch = llama_batch_get_one(&t, 1);
        if (llama_decode(ctx, batch) != 0) {
            printf("\nSKIP: llama_decode failed on a generated token\n");
            return 77;
        }
    }
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]); return 2; }
    llama_log_set(NULL, NULL);
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { printf("SKIP: the model did not load\n"); return 77; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { printf("SKIP: no context\n"); return 77; }
    const char *text = "The capital of France is";
    llama_token prompt[64];
    int n = llama_tokenize(vocab, text, (int)strlen(text), prompt, 64, true, false);
    if (n <= 0) { printf("SKIP: llama_tokenize failed (%d)\n", n); return 77; }
    printf("prompt:");
    for (int i = 0; i < n; i++) printf(" %d", prompt[i]);
    printf("\n");

    struct llama_sampler_chain_params sp = llama_sampler_chain_default_params();
    struct llama_sampler *chains[3];
    chains[0] = llama_sampler_chain_init(sp);
    llama_sampler_chain_add(chains[0], llama_sampler_init_greedy());
    chains[1] = llama_sampler_chain_init(sp);
    llama_sampler_chain_add(chains[1], llama_sampler_init_temp(0.8f));
    llama_sampler_chain_add(chains[1], llama_sampler_init_dist(42));
    chains[2] = llama_sampler_chain_init(sp);
    llama_sampler_chain_add(chains[2], llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), 64, 1.1f, 0.0f, 0.0f));
    llama_sampler_chain_add(chains[2], llama_sampler_init_top_k(40));
    llama_sampler_chain_add(chains[2], llama_sampler_init_top_p(0.95f, 1));
    llama_sampler_chain_add(chains[2], llama_sampler_init_min_p(0.05f, 1));
    llama_sampler_chain_add(chains[2], llama_sampler_init_temp(0.8f));
    llama_sampler_chain_add(chains[2], llama_sampler_init_dist(7));
    static const char *labels[3] = { "greedy", "temp0.8-dist42", "common-chain-dist7" };
    int rc = 0;
    for (int c = 0; c < 3 && rc == 0; c++) rc = generate(ctx, vocab, chains[c], prompt, n, labels[c]);
    for (int c = 0; c < 3; c++) llama_sampler_free(chains[c]);
    llama_free(ctx);
    llama_model_free(model);
    if (rc == 0) printf("done\n");
    return rc;
}
