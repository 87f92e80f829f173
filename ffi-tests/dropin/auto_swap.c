// LLAMA_HOTSWAP_AUTO in a program that never calls the hot-swap API: the probe decodes, puts
// new weights at the model's path (rename over it, as a deploy does), decodes again, and
// compares the logits with a fresh model loaded from the new file.
// Built by scripts/test-programs.sh against upstream's headers, linked with our library only.
// usage: auto_swap MODEL NEW_FILE INTERVAL_MS EXPECT(1: the new weights are applied, 0: not)
// MODEL is replaced by NEW_FILE (use copies). The environment carries LLAMA_HOTSWAP_ENABLED and
// LLAMA_HOTSWAP_AUTO=INTERVAL_MS (or not, for EXPECT 0).
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); printf(__VA_ARGS__); printf("\n"); failures++; } else { printf("ok   "); printf(__VA_ARGS__); printf("\n"); } } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) ud;
    // keep the automatic reload's own lines: the test greps them
    if (level >= GGML_LOG_LEVEL_WARN || strstr(text, "hot-swap:")) fputs(text, stderr);
}

static const char * PROMPT = "The capital of France is";

static struct llama_context * new_ctx(struct llama_model * m) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 128;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    return llama_init_from_model(m, cp);
}

// Decodes the prompt from an empty memory and copies the last token's logits into out.
static int prompt_logits(struct llama_context * ctx, float * out) {
    const struct llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
    llama_token toks[64];
    int n = llama_tokenize(vocab, PROMPT, (int) strlen(PROMPT), toks, 64, true, false);
    if (n <= 0) return -1;
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) return -1;
    memcpy(out, llama_get_logits_ith(ctx, -1), sizeof(float) * llama_vocab_n_tokens(vocab));
    return 0;
}

static float max_diff(const float * a, const float * b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) {
        float x = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
        if (x > d) d = x;
    }
    return d;
}

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: auto_swap MODEL NEW_FILE INTERVAL_MS EXPECT\n");
        return 2;
    }
    const char * path = argv[1];
    const char * fresh = argv[2];
    const double interval = atof(argv[3]);
    const int expect = atoi(argv[4]);
    llama_log_set(quiet, NULL);
    llama_backend_init();

    const double t_load = now_ms();
    struct llama_model * model = llama_model_load_from_file(path, llama_model_default_params());
    if (!model) { printf("FAIL cannot load %s\n", path); return 1; }
    const double t_loaded = now_ms();  // the interval starts somewhere in the load
    struct llama_context * ctx = new_ctx(model);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    float * before = malloc(sizeof(float) * n_vocab);
    float * early = malloc(sizeof(float) * n_vocab);
    float * after = malloc(sizeof(float) * n_vocab);
    float * want = malloc(sizeof(float) * n_vocab);
    CHECK(ctx && prompt_logits(ctx, before) == 0, "decode on the old weights");

    if (rename(fresh, path) != 0) { perror("rename"); return 1; }

    // Within the interval since the load nothing is looked at (only checkable while the
    // interval has not passed yet on a slow machine).
    if (expect) {
        if (prompt_logits(ctx, early) != 0) failures++;
        if (now_ms() - t_load < interval) {
            CHECK(max_diff(before, early, n_vocab) == 0.0f,
                  "a decode %.0f ms after the load (interval %.0f ms): still the old weights",
                  now_ms() - t_load, interval);
        } else {
            printf("skip the within-interval check: %.0f ms passed already\n", now_ms() - t_load);
        }
        while (now_ms() - t_loaded < interval + 50) usleep(20000);
    }
    CHECK(prompt_logits(ctx, after) == 0, "decode after the file was replaced");

    struct llama_model * model2 = llama_model_load_from_file(path, llama_model_default_params());
    struct llama_context * ctx2 = model2 ? new_ctx(model2) : NULL;
    CHECK(ctx2 && prompt_logits(ctx2, want) == 0, "fresh model on the new file");
    const float moved = max_diff(before, want, n_vocab);
    CHECK(moved > 0.1f, "the new file's logits differ from the old ones (max %g)", moved);
    if (expect) {
        const float d = max_diff(after, want, n_vocab);
        CHECK(d == 0.0f, "after the interval: the new weights, equal to a fresh model's logits (max diff %g)", d);
    } else {
        const float d = max_diff(after, before, n_vocab);
        CHECK(d == 0.0f, "without LLAMA_HOTSWAP_AUTO: still the old weights (max diff %g)", d);
    }
    llama_free(ctx2);
    llama_model_free(model2);
    llama_free(ctx);
    llama_model_free(model);
    free(before); free(early); free(after); free(want);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
