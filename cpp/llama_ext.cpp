// The C++ entry points of upstream's staging header (src/llama-ext.h) that upstream's
// libllama-common and tools import: same names, parameter types (hence mangled names) and
// return types, each a thin wrapper over a C function of this library (src/ffi/ext.rs) or,
// for features the engine lacks, upstream's answer for a model without them. Compiled by
// build.rs with the system C++ compiler into the cdylib; cpp/exports.map exports them.
// See docs/dropin.md.

#include "llama.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

// The types of upstream's llama-ext.h, laid out as there.
struct llama_memory_breakdown_data {
    size_t model   = 0;
    size_t context = 0;
    size_t compute = 0;

    size_t total() const { return model + context + compute; }
};

using llama_memory_breakdown = std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>;

#define EXT_API __attribute__((visibility("default")))

namespace {

// One warning line through the library's log (llama_log_set's callback), once per function.
void unsupported_once(bool & said, const char * what) {
    if (said) {
        return;
    }
    said = true;
    ggml_log_callback callback = nullptr;
    void * user_data = nullptr;
    llama_log_get(&callback, &user_data);
    if (callback != nullptr) {
        std::string line = std::string(what) + ": not supported by llama-hotswap yet (no NextN/MTP or layer-input outputs)\n";
        callback(GGML_LOG_LEVEL_WARN, line.c_str(), user_data);
    }
}

} // namespace

EXT_API int32_t llama_model_n_expert(const struct llama_model * model) {
    return llama_ext_model_n_expert(model);
}

EXT_API int32_t llama_model_n_devices(const struct llama_model * model) {
    return llama_ext_model_n_devices(model);
}

EXT_API ggml_backend_dev_t llama_model_get_device(const struct llama_model * model, int i) {
    return llama_ext_model_get_device(model, i);
}

EXT_API llama_memory_breakdown llama_get_memory_breakdown(const struct llama_context * ctx) {
    llama_memory_breakdown out;
    const int32_t n = llama_ext_memory_breakdown(ctx, nullptr, 0);
    if (n <= 0) {
        return out;
    }
    std::vector<llama_ext_memory_breakdown_entry> entries(static_cast<size_t>(n));
    const int32_t written = llama_ext_memory_breakdown(ctx, entries.data(), entries.size());
    for (int32_t i = 0; i < written && i < n; i++) {
        llama_memory_breakdown_data & mb = out[entries[i].buft];
        mb.model   += entries[i].model;
        mb.context += entries[i].context;
        mb.compute += entries[i].compute;
    }
    return out;
}

EXT_API llama_context * llama_get_ctx_other(struct llama_context * ctx) {
    return llama_ext_get_ctx_other(ctx);
}

// NextN (MTP) and layer-input embeddings: the engine computes neither. The setters say so
// once; the getters give upstream's answer for a context that was not asked for them (NULL).
EXT_API void llama_set_embeddings_nextn(struct llama_context * ctx, bool value, bool masked) {
    static bool said = false;
    (void) ctx; (void) masked;
    if (value) {
        unsupported_once(said, "llama_set_embeddings_nextn");
    }
}

EXT_API void llama_set_nextn_layer_offset(struct llama_context * ctx, int32_t offset) {
    static bool said = false;
    (void) ctx;
    if (offset != 0) {
        unsupported_once(said, "llama_set_nextn_layer_offset");
    }
}

EXT_API float * llama_get_embeddings_nextn(struct llama_context * ctx) {
    (void) ctx;
    return nullptr;
}

EXT_API float * llama_get_embeddings_nextn_ith(struct llama_context * ctx, int32_t i) {
    (void) ctx; (void) i;
    return nullptr;
}

EXT_API void llama_set_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid, bool value) {
    static bool said = false;
    (void) ctx; (void) lid;
    if (value) {
        unsupported_once(said, "llama_set_embeddings_layer_inp");
    }
}

EXT_API float * llama_get_embeddings_layer_inp(struct llama_context * ctx, uint32_t lid) {
    (void) ctx; (void) lid;
    return nullptr;
}

// DFlash draft models: no architecture the engine runs has them; upstream's values for a
// model without them.
EXT_API int32_t llama_model_dflash_selector_top_k(const struct llama_model * model) {
    (void) model;
    return 0;
}

EXT_API const int32_t * llama_model_target_layer_ids(const struct llama_model * model) {
    (void) model;
    return nullptr;
}

EXT_API uint32_t llama_model_target_layer_ids_n(const struct llama_model * model) {
    (void) model;
    return 0;
}
