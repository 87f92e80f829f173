/* Library-wide functions: version, limits, capabilities, system info, clock, backend init. */
#include "llama.h"

#include "harness.h"
#include "logcap.h"

TEST(limits_match_upstream) {
    /* upstream src/llama.cpp: 16 devices, 4096 overrides; src/llama-cparams.h: LLAMA_MAX_SEQ 256 */
    CHECK_INT(llama_max_devices(), 16);
    CHECK_INT(llama_max_parallel_sequences(), 256);
    CHECK_INT(llama_max_tensor_buft_overrides(), 4096);
}

TEST(capabilities) {
    CHECK(llama_supports_mmap());
    CHECK(llama_supports_mlock());
    /* The RPC client is always there, as in upstream built with GGML_RPC (the tests' oracle),
     * and upstream counts RPC as GPU offload even without a GPU device. */
    CHECK(llama_supports_rpc());
    CHECK(llama_supports_gpu_offload());
}

TEST(version_and_system_info) {
    const char *v = llama_version();
    const char *info = llama_print_system_info();
    CHECK_NOT_NULL(v);
    CHECK(v != NULL && strlen(v) > 0);
    CHECK_NOT_NULL(info);
    /* Static strings: the same pointer every time. */
    CHECK(llama_version() == v);
    CHECK(llama_print_system_info() == info);
}

TEST(backend_init_free_numa) {
    logcap_install();
    llama_backend_init();
    llama_backend_init(); /* idempotent */
    llama_numa_init(GGML_NUMA_STRATEGY_DISABLED);
    CHECK_INT(logcap_lines, 0);
    llama_numa_init(GGML_NUMA_STRATEGY_DISTRIBUTE); /* accepted (logged once), no effect */
    llama_backend_free();
    llama_log_set(NULL, NULL);
}

TEST(time_is_monotonic_microseconds) {
    int64_t a = llama_time_us();
    int64_t b = llama_time_us();
    CHECK(a >= 0);
    CHECK(b >= a);
}

int main(void) {
    RUN(limits_match_upstream);
    RUN(capabilities);
    RUN(version_and_system_info);
    RUN(backend_init_free_numa);
    RUN(time_is_monotonic_microseconds);
    return harness_finish();
}
