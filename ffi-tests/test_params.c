/*
 * Default parameters equal upstream's, field by field. The expected values are copied from
 * upstream's sources (pinned llama.cpp of llama-cpp-python 0.3.36):
 *   llama_model_default_params          src/llama-model.cpp
 *   llama_context_default_params        src/llama-context.cpp (GGML_DEFAULT_N_THREADS = 4)
 *   llama_sampler_chain_default_params  src/llama.cpp
 *   llama_model_quantize_default_params src/llama-quant.cpp (LLAMA_QUANT_MAX_BUF_SIZE = 8 GiB)
 * The differential runner also compares them with upstream's library at run time.
 */
#include "llama.h"

#include "harness.h"

TEST(model_default_params) {
    struct llama_model_params p = llama_model_default_params();
    CHECK_INT(sizeof p, 80);
    CHECK_NULL(p.devices);
    CHECK_NULL(p.tensor_buft_overrides);
    CHECK_INT(p.n_gpu_layers, -1);
    CHECK_INT(p.split_mode, LLAMA_SPLIT_MODE_LAYER);
    CHECK_INT(p.load_mode, LLAMA_LOAD_MODE_AUTO);
    CHECK_INT(p.lazy_mode, LLAMA_LAZY_MODE_AUTO);
    CHECK_INT(p.main_gpu, 0);
    CHECK_NULL(p.tensor_split);
    CHECK(p.progress_callback == NULL);
    CHECK_NULL(p.progress_callback_user_data);
    CHECK_NULL(p.kv_overrides);
    CHECK_INT(p.vocab_only, 0);
    CHECK_INT(p.check_tensors, 0);
    CHECK_INT(p.use_extra_bufts, 1);
    CHECK_INT(p.no_host, 0);
    CHECK_INT(p.no_alloc, 0);
    CHECK_INT(p.load_mtp, 0);
}

TEST(context_default_params) {
    struct llama_context_params p = llama_context_default_params();
    CHECK_INT(p.n_ctx, 512);
    CHECK_INT(p.n_batch, 2048);
    CHECK_INT(p.n_ubatch, 512);
    CHECK_INT(p.n_seq_max, 1);
    CHECK_INT(p.n_rs_seq, 0);
    CHECK_INT(p.n_outputs_max, 0);
    CHECK_INT(p.n_outputs_max_per_seq, 1);
    CHECK_INT(p.n_threads, 4);
    CHECK_INT(p.n_threads_batch, 4);
    CHECK_INT(p.ctx_type, LLAMA_CONTEXT_TYPE_DEFAULT);
    CHECK_INT(p.rope_scaling_type, LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED);
    CHECK_INT(p.pooling_type, LLAMA_POOLING_TYPE_UNSPECIFIED);
    CHECK_INT(p.attention_type, LLAMA_ATTENTION_TYPE_UNSPECIFIED);
    CHECK_INT(p.flash_attn_type, LLAMA_FLASH_ATTN_TYPE_AUTO);
    CHECK_DBL(p.rope_freq_base, 0.0f);
    CHECK_DBL(p.rope_freq_scale, 0.0f);
    CHECK_DBL(p.yarn_ext_factor, -1.0f);
    CHECK_DBL(p.yarn_attn_factor, -1.0f);
    CHECK_DBL(p.yarn_beta_fast, -1.0f);
    CHECK_DBL(p.yarn_beta_slow, -1.0f);
    CHECK_INT(p.yarn_orig_ctx, 0);
    CHECK_DBL(p.defrag_thold, -1.0f);
    CHECK(p.cb_eval == NULL);
    CHECK_NULL(p.cb_eval_user_data);
    CHECK_INT(p.type_k, GGML_TYPE_F16);
    CHECK_INT(p.type_v, GGML_TYPE_F16);
    CHECK(p.abort_callback == NULL);
    CHECK_NULL(p.abort_callback_data);
    CHECK_INT(p.embeddings, 0);
    CHECK_INT(p.offload_kqv, 1);
    CHECK_INT(p.no_perf, 1);
    CHECK_INT(p.op_offload, 1);
    CHECK_INT(p.swa_full, 1);
    CHECK_INT(p.kv_unified, 0);
    CHECK_NULL(p.samplers);
    CHECK_INT(p.n_samplers, 0);
    CHECK_NULL(p.ctx_other);
}

TEST(sampler_chain_default_params) {
    struct llama_sampler_chain_params p = llama_sampler_chain_default_params();
    CHECK_INT(p.no_perf, 1);
}

TEST(quantize_default_params) {
    struct llama_model_quantize_params p = llama_model_quantize_default_params();
    CHECK_INT(p.nthread, 0);
    CHECK_INT(p.ftype, LLAMA_FTYPE_MOSTLY_Q8_0);
    CHECK_INT(p.output_tensor_type, GGML_TYPE_COUNT);
    CHECK_INT(p.token_embedding_type, GGML_TYPE_COUNT);
    CHECK_INT(p.allow_requantize, 0);
    CHECK_INT(p.quantize_output_tensor, 1);
    CHECK_INT(p.only_copy, 0);
    CHECK_INT(p.pure, 0);
    CHECK_INT(p.keep_split, 0);
    CHECK_INT(p.dry_run, 0);
    CHECK_NULL(p.imatrix);
    CHECK_NULL(p.kv_overrides);
    CHECK_NULL(p.tt_overrides);
    CHECK_NULL(p.prune_layers);
    CHECK_INT(p.max_buf_size, 8ull << 30);
}

TEST(kv_override_is_source_compatible) {
    /* Upstream's anonymous union members are reachable by name. */
    struct llama_model_kv_override o;
    memset(&o, 0, sizeof o);
    o.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    o.val_i64 = 42;
    CHECK_INT(o.val_i64, 42);
    o.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
    strcpy(o.val_str, "x");
    CHECK_STR(o.val_str, "x");
    CHECK_INT(sizeof o.key, 128);
    CHECK_INT(sizeof o.val_str, 128);
}

int main(void) {
    RUN(model_default_params);
    RUN(context_default_params);
    RUN(sampler_chain_default_params);
    RUN(quantize_default_params);
    RUN(kv_override_is_source_compatible);
    return harness_finish();
}
