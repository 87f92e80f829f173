/*
 * Handles that are not live handles of this library: wild ((void *)0x1234), freed, foreign
 * (a pointer to something else) and of the wrong kind (a model passed as a vocab). Each call
 * returns the documented failure value with one log line naming the function, and nothing
 * is dereferenced (upstream crashes on all of these). Also times a getter on a live handle
 * (the registry lookup's cost; printed, not asserted).
 * The model is written by this test (tiny_gguf.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "logcap.h"
#include "tiny_gguf.h"

static char model_path[64];

TEST(wild_pointers_are_refused) {
    struct llama_model *wild = (struct llama_model *)(uintptr_t)0x1234;
    logcap_clear();
    CHECK_INT(llama_model_n_embd(wild), -1);
    CHECK_INT(logcap_lines, 1);
    CHECK(logcap_contains("llama_model_n_embd"));
    CHECK(logcap_contains("not a live handle"));
    CHECK_NULL(llama_model_get_vocab(wild));
    const struct llama_vocab *wild_vocab = (const struct llama_vocab *)(uintptr_t)0x5678;
    logcap_clear();
    CHECK_INT(llama_vocab_n_tokens(wild_vocab), -1);
    CHECK(logcap_contains("llama_vocab_n_tokens"));
    struct llama_context *wild_ctx = (struct llama_context *)(uintptr_t)0x9abc;
    logcap_clear();
    CHECK_NULL(llama_get_model(wild_ctx));
    CHECK(logcap_contains("llama_get_model"));
    logcap_clear();
    llama_model_free(wild);
    llama_free(wild_ctx);
    CHECK_INT(logcap_lines, 2);
}

TEST(foreign_and_wrong_kind_pointers_are_refused) {
    uint64_t not_a_model[64] = { 0 };
    logcap_clear();
    CHECK_INT(llama_model_n_layer((const struct llama_model *)not_a_model), -1);
    CHECK_INT(logcap_lines, 1);
    struct llama_model *model = llama_model_load_from_file(model_path, llama_model_default_params());
    if (!CHECK_NOT_NULL(model)) return;
    CHECK_INT(llama_model_n_embd(model), N_EMBD);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    CHECK_INT(llama_vocab_n_tokens(vocab), N_VOCAB);
    /* A model where a vocab is expected and the other way round. */
    logcap_clear();
    CHECK_INT(llama_vocab_n_tokens((const struct llama_vocab *)model), -1);
    CHECK_INT(llama_model_n_embd((const struct llama_model *)vocab), -1);
    CHECK_INT(logcap_lines, 2);
    llama_model_free(model);
}

TEST(freed_handles_are_refused) {
    struct llama_model *model = llama_model_load_from_file(model_path, llama_model_default_params());
    if (!CHECK_NOT_NULL(model)) return;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    llama_model_free(model);
    logcap_clear();
    CHECK_INT(llama_model_n_embd(model), -1);
    CHECK_INT(llama_vocab_n_tokens(vocab), -1);
    llama_model_free(model); /* double free: refused, logged */
    CHECK_INT(logcap_lines, 3);
    CHECK(logcap_contains("llama_model_free"));
}

TEST(getter_cost) {
    struct llama_model *model = llama_model_load_from_file(model_path, llama_model_default_params());
    if (!CHECK_NOT_NULL(model)) return;
    enum { N = 2000000 };
    struct timespec t0, t1;
    long sum = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++) sum += llama_model_n_embd(model);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(sum == (long)N * N_EMBD);
    double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    printf("llama_model_n_embd on a live handle: %.1f ns per call\n", ns);
    llama_model_free(model);
}

int main(void) {
    strcpy(model_path, "/tmp/llama-hotswap-hXXXXXX");
    int fd = mkstemp(model_path);
    if (fd < 0 || tiny_gguf_write(model_path) != 0) return 2;
    close(fd);
    logcap_install();
    RUN(wild_pointers_are_refused);
    RUN(foreign_and_wrong_kind_pointers_are_refused);
    RUN(freed_handles_are_refused);
    RUN(getter_cost);
    unlink(model_path);
    return harness_finish();
}
