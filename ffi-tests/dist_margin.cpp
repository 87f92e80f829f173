// Near-tie check for seeded sampling end to end (scripts/test-sampling.sh): replays a token
// sequence (upstream's generation with one of diff_sample_e2e.c's seeded chains) after its
// prompt and prints, per step, where the chain's draw falls in this library's distribution.
// The chain without its dist sampler is built from the library's own samplers and applied
// to a fresh candidate array (as llama_sampler_sample does), the forced token is accepted
// into it; dist is replayed: std::mt19937(seed) with uniform_real_distribution<double>, one
// draw per step, softmax with expf and the single-pass cumulative sum in the array's order.
// Printed per step: the pick, the distance of the draw to the ends of its interval (as a
// fraction of the mass), and the smallest logit gap (before temp) between two neighbouring
// candidates whose swap would put the same draw on another token ("inf" if none): the walk
// follows the array's order, so two near-equal logits in the other order pick differently.
// usage: dist_margin MODEL.gguf CHAIN TOKEN...   (CHAIN: temp0.8-dist42 | common-chain-dist7)
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

static size_t walk(const std::vector<float> &p, const std::vector<size_t> &order, double target,
                   double *before, double *run) {
    *before = *run = 0;
    for (size_t i : order) {
        *before = *run;
        *run += p[i];
        if (*run >= target) return i;
    }
    return order.back();
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s MODEL.gguf CHAIN TOKEN...\n", argv[0]); return 2; }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const llama_vocab *vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_threads = cp.n_threads_batch = 2;
    llama_context *ctx = llama_init_from_model(model, cp);
    // The chains of diff_sample_e2e.c, without their dist.
    llama_sampler *chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    uint32_t seed;
    if (strcmp(argv[2], "temp0.8-dist42") == 0) {
        llama_sampler_chain_add(chain, llama_sampler_init_temp(0.8f));
        seed = 42;
    } else if (strcmp(argv[2], "common-chain-dist7") == 0) {
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(nv, 64, 1.1f, 0.0f, 0.0f));
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(40));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(0.95f, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(0.05f, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp(0.8f));
        seed = 7;
    } else {
        fprintf(stderr, "unknown chain %s\n", argv[2]);
        return 2;
    }
    const char *text = "The capital of France is";
    llama_token prompt[64];
    int n = llama_tokenize(vocab, text, (int)strlen(text), prompt, 64, true, false);
    if (n <= 0 || llama_decode(ctx, llama_batch_get_one(prompt, n)) != 0) return 1;
    std::vector<int> forced;
    for (int i = 3; i < argc; i++) forced.push_back(atoi(argv[i]));
    std::mt19937 rng(seed);
    std::vector<llama_token_data> cand(nv);
    for (size_t k = 0; k < forced.size(); k++) {
        const float *lg = llama_get_logits_ith(ctx, -1);
        for (int i = 0; i < nv; i++) cand[i] = llama_token_data{ i, lg[i], 0.0f };
        llama_token_data_array arr = { cand.data(), (size_t)nv, -1, false };
        llama_sampler_apply(chain, &arr);
        // dist, as upstream's single pass
        std::uniform_real_distribution<double> d(0.0f, 1.0f);
        double rnd = d(rng);
        float mx = arr.data[0].logit;
        if (!arr.sorted) for (size_t i = 1; i < arr.size; i++) mx = std::max(mx, arr.data[i].logit);
        std::vector<float> p(arr.size);
        double sum = 0;
        for (size_t i = 0; i < arr.size; i++) { p[i] = expf(arr.data[i].logit - mx); sum += p[i]; }
        double tgt = sum * rnd, before, run;
        std::vector<size_t> order(arr.size);
        for (size_t i = 0; i < arr.size; i++) order[i] = i;
        size_t pick = walk(p, order, tgt, &before, &run);
        double lo = (tgt - before) / sum, hi = (run - tgt) / sum;
        double flip = INFINITY;
        for (size_t j = 0; j + 1 < arr.size; j++) {
            std::swap(order[j], order[j + 1]);
            double b2, r2;
            if (walk(p, order, tgt, &b2, &r2) != pick)
                flip = std::min(flip, (double)fabsf(lg[arr.data[j].id] - lg[arr.data[j + 1].id]));
            std::swap(order[j], order[j + 1]);
        }
        printf("step %zu rnd %.9f pick %d p %.6g margin-below %.3g margin-above %.3g order-gap %.3g (forced %d)\n",
               k, rnd, arr.data[pick].id, p[pick] / sum, lo, hi, flip, forced[k]);
        llama_token t = forced[k];
        llama_sampler_accept(chain, t);
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
    }
    llama_sampler_free(chain);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
