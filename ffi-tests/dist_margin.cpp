// Near-tie check for seeded sampling end to end (scripts/test-sampling.sh): replays a token
// sequence (upstream's temp 0.8 + dist seed 42 generation) after the prompt of
// diff_sample_e2e.c and prints, per step, where upstream's draw (std::mt19937(42) with
// uniform_real_distribution<double>, as llama_sampler_dist) falls in this library's
// probabilities: the pick and the distance of the draw to the ends of its interval.
// usage: dist_margin MODEL.gguf TOKEN...
#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
int main(int argc, char **argv) {
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    const llama_vocab *vocab = llama_model_get_vocab(model);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256; cp.n_threads = cp.n_threads_batch = 2;
    llama_context *ctx = llama_init_from_model(model, cp);
    const char *text = "The capital of France is";
    llama_token prompt[64];
    int n = llama_tokenize(vocab, text, (int)strlen(text), prompt, 64, true, false);
    llama_decode(ctx, llama_batch_get_one(prompt, n));
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL.gguf TOKEN...\n", argv[0]); return 2; }
    std::vector<int> forced;
    for (int i = 2; i < argc; i++) forced.push_back(atoi(argv[i]));
    std::mt19937 rng(42);
    int nv = llama_vocab_n_tokens(vocab);
    for (size_t k = 0; k < forced.size(); k++) {
        const float *lg = llama_get_logits_ith(ctx, -1);
        std::vector<float> l(nv), p(nv);
        float mx = -INFINITY;
        for (int i = 0; i < nv; i++) { l[i] = lg[i] / 0.8f; mx = std::max(mx, l[i]); }
        double sum = 0;
        for (int i = 0; i < nv; i++) { p[i] = expf(l[i] - mx); sum += p[i]; }
        std::uniform_real_distribution<double> d(0.0f, 1.0f);
        double rnd = d(rng), tgt = sum * rnd, run = 0; int pick = -1; double before = 0;
        for (int i = 0; i < nv; i++) { before = run; run += p[i]; if (run >= tgt) { pick = i; break; } }
        double lo = (tgt - before) / sum, hi = (run - tgt) / sum;  // distances of the draw to the picked interval's ends
        printf("step %zu rnd %.9f pick %d p %.6g margin-below %.3g margin-above %.3g (forced %d)\n", k, rnd, pick, p[pick] / sum, lo, hi, forced[k]);
        if (pick != forced[k]) {
            // the normalized cumulative at the forced token's interval too
            double c = 0; for (int i = 0; i < forced[k]; i++) c += p[i];
            printf("  forced %d interval [%.9f, %.9f], rnd %.9f\n", forced[k], c / sum, (c + p[forced[k]]) / sum, rnd);
        }
        llama_token t = forced[k];
        llama_decode(ctx, llama_batch_get_one(&t, 1));
    }
}
