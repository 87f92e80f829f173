/*
 * Differential test: compiled against UPSTREAM's llama.h and linked to "libllama.so.0",
 * then run twice, with LD_LIBRARY_PATH pointing at upstream's build and at ours. The two
 * outputs must be identical. Only calls whose results both libraries define identically
 * belong here (no invalid enum values or NULL strings: upstream aborts or crashes on those).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "llama.h"

#define PTR(p) ((p) == NULL ? "null" : "set")

static void limits(void) {
    printf("llama_max_devices %zu\n", llama_max_devices());
    printf("llama_max_parallel_sequences %zu\n", llama_max_parallel_sequences());
    printf("llama_max_tensor_buft_overrides %zu\n", llama_max_tensor_buft_overrides());
    printf("llama_supports_mmap %d\n", llama_supports_mmap());
    printf("llama_supports_mlock %d\n", llama_supports_mlock());
    printf("llama_supports_rpc %d\n", llama_supports_rpc());
    printf("llama_supports_gpu_offload %d\n", llama_supports_gpu_offload());
    printf("llama_version %s\n", llama_version());
}

static void model_params(void) {
    struct llama_model_params p = llama_model_default_params();
    printf("model.devices %s\n", PTR(p.devices));
    printf("model.tensor_buft_overrides %s\n", PTR(p.tensor_buft_overrides));
    printf("model.n_gpu_layers %d\n", p.n_gpu_layers);
    printf("model.split_mode %d\n", (int)p.split_mode);
    printf("model.load_mode %d\n", (int)p.load_mode);
    printf("model.lazy_mode %d\n", (int)p.lazy_mode);
    printf("model.main_gpu %d\n", p.main_gpu);
    printf("model.tensor_split %s\n", PTR(p.tensor_split));
    printf("model.progress_callback %s\n", p.progress_callback ? "set" : "null");
    printf("model.progress_callback_user_data %s\n", PTR(p.progress_callback_user_data));
    printf("model.kv_overrides %s\n", PTR(p.kv_overrides));
    printf("model.bools %d %d %d %d %d %d\n", p.vocab_only, p.check_tensors, p.use_extra_bufts,
           p.no_host, p.no_alloc, p.load_mtp);
}

static void context_params(void) {
    struct llama_context_params p = llama_context_default_params();
    printf("context.sizes %u %u %u %u %u %u %u\n", p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max,
           p.n_rs_seq, p.n_outputs_max, p.n_outputs_max_per_seq);
    printf("context.threads %d %d\n", p.n_threads, p.n_threads_batch);
    printf("context.enums %d %d %d %d %d\n", (int)p.ctx_type, (int)p.rope_scaling_type,
           (int)p.pooling_type, (int)p.attention_type, (int)p.flash_attn_type);
    printf("context.rope %a %a\n", p.rope_freq_base, p.rope_freq_scale);
    printf("context.yarn %a %a %a %a %u\n", p.yarn_ext_factor, p.yarn_attn_factor,
           p.yarn_beta_fast, p.yarn_beta_slow, p.yarn_orig_ctx);
    printf("context.defrag_thold %a\n", p.defrag_thold);
    printf("context.cb_eval %s %s\n", p.cb_eval ? "set" : "null", PTR(p.cb_eval_user_data));
    printf("context.types %d %d\n", (int)p.type_k, (int)p.type_v);
    printf("context.abort %s %s\n", p.abort_callback ? "set" : "null", PTR(p.abort_callback_data));
    printf("context.bools %d %d %d %d %d %d\n", p.embeddings, p.offload_kqv, p.no_perf,
           p.op_offload, p.swa_full, p.kv_unified);
    printf("context.samplers %s %zu\n", PTR(p.samplers), p.n_samplers);
    printf("context.ctx_other %s\n", PTR(p.ctx_other));
}

static void other_params(void) {
    struct llama_sampler_chain_params s = llama_sampler_chain_default_params();
    struct llama_model_quantize_params q = llama_model_quantize_default_params();
    printf("sampler_chain.no_perf %d\n", s.no_perf);
    printf("quantize.nthread %d ftype %d types %d %d\n", q.nthread, (int)q.ftype,
           (int)q.output_tensor_type, (int)q.token_embedding_type);
    printf("quantize.bools %d %d %d %d %d %d\n", q.allow_requantize, q.quantize_output_tensor,
           q.only_copy, q.pure, q.keep_split, q.dry_run);
    printf("quantize.pointers %s %s %s %s\n", PTR(q.imatrix), PTR(q.kv_overrides),
           PTR(q.tt_overrides), PTR(q.prune_layers));
    printf("quantize.max_buf_size %zu\n", q.max_buf_size);
}

static void names(void) {
    int i;
    for (i = -1; i <= 4; i++) {
        const char *name = llama_load_mode_name((enum llama_load_mode)i);
        printf("load_mode %d %s -> %d\n", i, name, (int)llama_load_mode_from_str(name));
    }
    for (i = -1; i <= 1; i++) {
        printf("flash_attn %d %s\n", i, llama_flash_attn_type_name((enum llama_flash_attn_type)i));
    }
    for (i = 0; i <= 45; i++) {
        printf("ftype %d %s | %s\n", i, llama_ftype_name((enum llama_ftype)i),
               llama_ftype_name((enum llama_ftype)(i | LLAMA_FTYPE_GUESSED)));
    }
    for (i = 0; i <= 11; i++) {
        printf("meta_key %d %s\n", i, llama_model_meta_key_str((enum llama_model_meta_key)i));
    }
}

static void split(void) {
    static const size_t sizes[] = {0, 1, 5, 22, 23, 24, 64};
    static const char *const paths[] = {
        "abc-00001-of-00002.gguf", "abc-00002-of-00002.gguf", "-00001-of-00002.gguf",
        "x-00001-of-00002.gguf",   "abc.gguf",                "",
    };
    char buf[80];
    size_t s, p;
    int no;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (no = 0; no < 3; no++) {
            memset(buf, '#', sizeof buf);
            buf[sizeof buf - 1] = '\0';
            printf("split_path %zu %d -> %d [%s]\n", sizes[s], no,
                   llama_split_path(buf, sizes[s], "abc", no, 2), buf);
        }
        printf("split_path %zu wide -> %d [%s]\n", sizes[s],
               llama_split_path(buf, sizes[s], "m", 123455, 99999), buf);
    }
    for (p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            memset(buf, '#', sizeof buf);
            buf[sizeof buf - 1] = '\0';
            printf("split_prefix \"%s\" %zu -> %d [%s]\n", paths[p], sizes[s],
                   llama_split_prefix(buf, sizes[s], paths[p], 0, 2), buf);
        }
    }
}

int main(void) {
    Dl_info info;
    /* Which library answered goes to stderr (the runner checks it), not into the diff. */
    if (dladdr((void *)(size_t)llama_version, &info) && info.dli_fname) {
        fprintf(stderr, "library: %s\n", info.dli_fname);
    }
    limits();
    model_params();
    context_params();
    other_params();
    names();
    split();
    return 0;
}
