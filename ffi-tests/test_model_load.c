/*
 * Model loading through the C API, as a host drives it: every load mode, progress (0.0 first,
 * once per tensor, exactly 1.0 last), cancellation ("cancelled model load", also at 1.0),
 * kv overrides (change reads, not the meta listing), vocab_only, no_alloc and bad input.
 * The model is written by this test (tiny_gguf.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "llama.h"

#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "logcap.h"
#include "tiny_gguf.h"

static char model_path[64];

static bool count_progress(float p, void *ud) {
    float *seen = ud; /* seen[0] = calls, seen[1] = first, seen[2] = last */
    if (seen[0] == 0) seen[1] = p;
    seen[2] = p;
    seen[0] += 1;
    return true;
}

static bool cancel_after_half(float p, void *ud) { (void)ud; return p <= 0.5f; }
static bool cancel_at_end(float p, void *ud) { (void)ud; return p < 1.0f; }
static bool must_not_be_called(float p, void *ud) { (void)p; *(int *)ud = 1; return true; }

TEST(every_load_mode_loads) {
    const enum llama_load_mode modes[] = { LLAMA_LOAD_MODE_AUTO, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP,
                                           LLAMA_LOAD_MODE_MLOCK, LLAMA_LOAD_MODE_MMAP_MLOCK, LLAMA_LOAD_MODE_DIRECT_IO };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        struct llama_model_params p = llama_model_default_params();
        p.load_mode = modes[i];
        struct llama_model *m = llama_model_load_from_file(model_path, p);
        CHECK_NOT_NULL(m);
        if (!m) continue;
        CHECK_INT(llama_model_n_layer(m), N_LAYER);
        CHECK_INT(llama_model_n_embd(m), N_EMBD);
        llama_model_free(m);
    }
}

TEST(progress_is_called_as_upstream_calls_it) {
    float seen[3] = { 0, -1, -1 };
    struct llama_model_params p = llama_model_default_params();
    p.load_mode = LLAMA_LOAD_MODE_NONE;
    p.progress_callback = count_progress;
    p.progress_callback_user_data = seen;
    struct llama_model *m = llama_model_load_from_file(model_path, p);
    CHECK_NOT_NULL(m);
    llama_model_free(m);
    CHECK_INT((int)seen[0], TINY_GGUF_N_TENSORS + 1);
    CHECK_DBL(seen[1], 0.0);
    CHECK_DBL(seen[2], 1.0);
}

TEST(cancel_returns_null_and_logs) {
    struct llama_model_params p = llama_model_default_params();
    p.progress_callback = cancel_after_half;
    logcap_clear();
    CHECK_NULL(llama_model_load_from_file(model_path, p));
    CHECK(logcap_contains("cancelled model load"));
    p.progress_callback = cancel_at_end;
    CHECK_NULL(llama_model_load_from_file(model_path, p));
}

TEST(kv_override_changes_reads_not_listing) {
    struct llama_model_kv_override ovr[2];
    memset(ovr, 0, sizeof ovr);
    strcpy(ovr[0].key, "llama.context_length");
    ovr[0].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    ovr[0].val_i64 = 4096;
    struct llama_model_params p = llama_model_default_params();
    p.kv_overrides = ovr;
    struct llama_model *m = llama_model_load_from_file(model_path, p);
    CHECK_NOT_NULL(m);
    if (!m) return;
    CHECK_INT(llama_model_n_ctx_train(m), 4096);
    char buf[32];
    CHECK_INT(llama_model_meta_val_str(m, "llama.context_length", buf, sizeof buf), 4);
    CHECK_STR(buf, "2048");
    llama_model_free(m);
}

TEST(vocab_only_and_no_alloc_skip_progress) {
    int called = 0;
    struct llama_model_params p = llama_model_default_params();
    p.progress_callback = must_not_be_called;
    p.progress_callback_user_data = &called;
    p.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(model_path, p);
    CHECK_NOT_NULL(m);
    char buf[8] = "x";
    CHECK_INT(llama_model_desc(m, buf, sizeof buf), 0);
    CHECK_INT(llama_vocab_n_tokens(llama_model_get_vocab(m)), N_VOCAB);
    llama_model_free(m);
    p.vocab_only = false;
    p.no_alloc = true;
    p.load_mode = LLAMA_LOAD_MODE_MMAP; /* upstream aborts here; llama-hotswap loads sizes only */
    m = llama_model_load_from_file(model_path, p);
    CHECK_NOT_NULL(m);
    llama_model_free(m);
    CHECK_INT(called, 0);
}

TEST(bad_input_returns_null_and_names_the_file) {
    struct llama_model_params p = llama_model_default_params();
    logcap_clear();
    CHECK_NULL(llama_model_load_from_file("/nonexistent/model.gguf", p));
    CHECK(logcap_contains("/nonexistent/model.gguf"));
    CHECK_NULL(llama_model_load_from_file(NULL, p));
    p.load_mode = (enum llama_load_mode)42;
    CHECK_NULL(llama_model_load_from_file(model_path, p));
    CHECK_NULL(llama_model_load_from_file_ptr(NULL, llama_model_default_params()));
    CHECK_NULL(llama_model_load_from_splits(NULL, 0, llama_model_default_params()));
    llama_model_free(NULL);
}

int main(void) {
    strcpy(model_path, "/tmp/llama-hotswap-cXXXXXX");
    int fd = mkstemp(model_path);
    if (fd < 0 || tiny_gguf_write(model_path) != 0) return 2;
    close(fd);
    logcap_install();
    RUN(every_load_mode_loads);
    RUN(progress_is_called_as_upstream_calls_it);
    RUN(cancel_returns_null_and_logs);
    RUN(kv_override_changes_reads_not_listing);
    RUN(vocab_only_and_no_alloc_skip_progress);
    RUN(bad_input_returns_null_and_names_the_file);
    unlink(model_path);
    return harness_finish();
}
