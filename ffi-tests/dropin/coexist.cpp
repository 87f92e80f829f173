// Our libllama beside upstream's libggml in one process, linked in the order that makes our
// ggml_backend_* exports come first (libllama.so.0 before libggml*): every ggml_* call must
// still mean libggml's, libggml's handles must be accepted where llama.h takes them, and the
// C++ entry points of upstream's llama-ext.h must answer with handles libggml understands.
// Built by scripts/test-programs.sh against upstream's headers (from the test cache), also
// run against upstream's own libllama as the reference. Usage: coexist MODEL
#include "llama.h"
#include "ggml-backend.h"
#include "../src/llama-ext.h"

#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static int failures = 0;
#define CHECK(cond) do { if (!(cond)) { std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } else { std::printf("ok   %s\n", #cond); } } while (0)

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: coexist MODEL\n");
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    // libggml's own answers, looked up in libggml itself.
    void * ggml = dlopen("libggml.so.0", RTLD_NOW | RTLD_NOLOAD);
    CHECK(ggml != nullptr);
    if (!ggml) return 1;
    auto real_by_type = (ggml_backend_dev_t (*)(enum ggml_backend_dev_type)) dlsym(ggml, "ggml_backend_dev_by_type");
    auto real_count   = (size_t (*)(void)) dlsym(ggml, "ggml_backend_dev_count");
    CHECK(real_by_type && real_count);

    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(cpu != nullptr && cpu == real_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    CHECK(ggml_backend_dev_count() == real_count());
    CHECK(std::strcmp(ggml_backend_dev_name(cpu), "CPU") == 0);
    // The call that crashed when our handles leaked into libggml (common_threadpools::init).
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    CHECK(reg != nullptr && ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads") != nullptr);
    ggml_backend_buffer_type_t cpu_buft = ggml_backend_dev_buffer_type(cpu);
    CHECK(cpu_buft == ggml_backend_cpu_buffer_type() && ggml_backend_buft_is_host(cpu_buft));

    // libggml's CPU buffer type accepted in tensor_buft_overrides.
    llama_model_tensor_buft_override overrides[] = { { "token_embd", cpu_buft }, { nullptr, nullptr } };
    llama_model_params mp = llama_model_default_params();
    mp.tensor_buft_overrides = overrides;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    CHECK(model != nullptr);
    if (!model) return 1;
    CHECK(llama_model_n_devices(model) == 0);  // no GPU here: model->devices is empty
    CHECK(llama_model_get_device(model, 0) == nullptr);
    CHECK(llama_model_n_expert(model) == 0);
    CHECK(llama_model_dflash_selector_top_k(model) == 0);
    CHECK(llama_model_target_layer_ids(model) == nullptr && llama_model_target_layer_ids_n(model) == 0);
    llama_model_free(model);

    // common/fit.cpp's dry run: no_alloc + LLAMA_LOAD_MODE_NONE, a context, the breakdown.
    mp = llama_model_default_params();
    mp.no_alloc = true;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    model = llama_model_load_from_file(argv[1], mp);
    CHECK(model != nullptr);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    llama_context * ctx = llama_init_from_model(model, cp);
    CHECK(ctx != nullptr);
    if (!ctx) return 1;
    CHECK(llama_get_ctx_other(ctx) == nullptr);
    CHECK(llama_get_embeddings_nextn(ctx) == nullptr);
    llama_memory_breakdown mb = llama_get_memory_breakdown(ctx);
    size_t host_model = 0, host_context = 0;
    bool all_host = !mb.empty();
    for (const auto & [buft, data] : mb) {
        all_host = all_host && ggml_backend_buft_is_host(buft);  // a libggml call on our key
        std::printf("     breakdown %-12s model %8zu KiB context %6zu KiB compute %6zu KiB\n",
                    ggml_backend_buft_name(buft), data.model >> 10, data.context >> 10, data.compute >> 10);
        host_model += data.model;
        host_context += data.context;
    }
    CHECK(all_host);
    // The weights' bytes, within 5% of llama_model_size (upstream counts its buffers' padding).
    const double ratio = (double) host_model / (double) llama_model_size(model);
    CHECK(ratio > 0.95 && ratio < 1.05);
    CHECK(host_context > 0);
    if (std::getenv("COEXIST_HOSTILE")) {  // upstream computes on buffers without memory
        llama_token tok = 1;
        CHECK(llama_decode(ctx, llama_batch_get_one(&tok, 1)) == -3);
    }
    llama_free(ctx);
    llama_model_free(model);

    // A pointer that is no device and no buffer type: refused, nothing read through it.
    static int not_a_buft;
    llama_model_tensor_buft_override bogus[] = { { "token_embd", (ggml_backend_buffer_type_t) (void *) &not_a_buft }, { nullptr, nullptr } };
    mp = llama_model_default_params();
    mp.vocab_only = false;
    mp.tensor_buft_overrides = bogus;
    if (std::getenv("COEXIST_HOSTILE")) {  // upstream reads through the pointer: ours only
        CHECK(llama_model_load_from_file(argv[1], mp) == nullptr);
    }
    std::printf("%s: %d failure(s)\n", argv[0], failures);
    return failures == 0 ? 0 : 1;
}
