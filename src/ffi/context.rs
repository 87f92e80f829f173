//! Contexts: creation and freeing, sizes, settings, and the results of the last evaluation
//! (logits, embeddings, backend-sampled tokens). Not supported by llama-hotswap yet.
//!
//! The first group (`llama_init_from_model`, `llama_new_context_with_model`, `llama_free`,
//! `llama_get_model`) is the context's lifecycle, and is real: a context holds the graph-cache
//! state that hot-swap invalidates. Everything else here is not supported yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_void;

use super::handles::{self, llama_context, llama_model};
use super::types::*;

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

/// Creates a context for `model`; free it with `llama_free` (before or after the model: the
/// context keeps the model's data alive, although upstream requires the model to outlive it).
/// A context holds the graph-cache state that hot-swap invalidates; decoding is not
/// supported yet. `params.n_ctx == 0` takes the model's training context. Returns NULL (with
/// a log line) for a NULL or freed model, a vocab-only model, `n_batch == 0 && n_ubatch == 0`,
/// or a context size that resolves to 0, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_init_from_model(
    model: *mut llama_model,
    params: llama_context_params,
) -> *mut llama_context {
    boundary!("llama_init_from_model", std::ptr::null_mut(), {
        // SAFETY: NULL or a live model per the contract.
        unsafe { init_context(model, &params) }
    })
}

/// Shared body of the context constructors.
///
/// # Safety
/// `model` must be NULL or a live model handle.
unsafe fn init_context(
    model: *mut llama_model,
    params: &llama_context_params,
) -> Result<*mut llama_context, super::FfiError> {
    use super::FfiError;
    // SAFETY: per the caller's contract.
    let handle = unsafe { handles::model(model) }?;
    if handle.inner.devices.is_none() {
        return Err(FfiError::Invalid(
            "model was loaded with vocab_only: it cannot have a context".into(),
        ));
    }
    if params.n_batch == 0 && params.n_ubatch == 0 {
        return Err(FfiError::Invalid(
            "n_batch and n_ubatch cannot both be zero".into(),
        ));
    }
    if params.n_samplers > 0 {
        crate::log_info!(
            "llama_init_from_model: {} backend sampler chain(s) in params.samplers: accepted; \
             llama-hotswap runs them on the CPU in llama_sampler_sample after decode \
             (llama_get_sampled_* return nothing)",
            params.n_samplers
        );
    }
    let inner = crate::model::Context::new(std::sync::Arc::clone(&handle.inner), params.n_ctx);
    if inner.n_ctx == 0 {
        return Err(FfiError::Invalid(
            "n_ctx and model->hparams.n_ctx_train cannot both be zero".into(),
        ));
    }
    Ok(llama_context::new_boxed(model, inner))
}

/// Deprecated alias of `llama_init_from_model` (same behaviour).
#[no_mangle]
pub unsafe extern "C" fn llama_new_context_with_model(
    model: *mut llama_model,
    params: llama_context_params,
) -> *mut llama_context {
    boundary!("llama_new_context_with_model", std::ptr::null_mut(), {
        // SAFETY: NULL or a live model per the contract.
        unsafe { init_context(model, &params) }
    })
}

/// Frees a context (not its model). NULL is a no-op; a freed or foreign pointer is logged
/// and ignored.
#[no_mangle]
pub unsafe extern "C" fn llama_free(ctx: *mut llama_context) {
    boundary!("llama_free", (), {
        // SAFETY: NULL or a live context per the contract.
        unsafe { handles::free_context(ctx) }
    })
}

/// The model the context was created from (owned by the caller, not the context), or NULL
/// for a NULL or freed context.
#[no_mangle]
pub unsafe extern "C" fn llama_get_model(ctx: *const llama_context) -> *const llama_model {
    boundary!("llama_get_model", std::ptr::null(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.model)
    })
}

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

/// Upstream: the context size in tokens actually used (may differ from the requested one).
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ctx(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_ctx", 0)
}

/// Upstream: the context size available to one sequence.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ctx_seq(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_ctx_seq", 0)
}

/// Upstream: the logical maximum batch size accepted by `llama_decode`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_batch(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_batch", 0)
}

/// Upstream: the physical maximum batch size (micro-batch).
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ubatch(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_ubatch", 0)
}

/// Upstream: the maximum number of distinct sequences.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_seq_max(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_seq_max", 0)
}

/// Upstream: the number of recurrent-state snapshots kept per sequence for rollback.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_n_rs_seq(ctx: *const llama_context) -> u32 {
    unsupported!("llama_n_rs_seq", 0)
}

/// Upstream: the context's memory (KV cache or recurrent state), owned by the context; NULL
/// when it has none.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_memory(ctx: *const llama_context) -> llama_memory_t {
    unsupported!("llama_get_memory", std::ptr::null_mut())
}

/// Upstream: the pooling type the context applies to embeddings.
/// Not supported by llama-hotswap yet: logs once and returns LLAMA_POOLING_TYPE_UNSPECIFIED,
/// which a context never reports.
#[no_mangle]
pub unsafe extern "C" fn llama_pooling_type(ctx: *const llama_context) -> LlamaPoolingType {
    unsupported!(
        "llama_pooling_type",
        LlamaPoolingType(llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED as i32)
    )
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// Upstream: sets the thread counts for generation (`n_threads`) and for batches
/// (`n_threads_batch`).
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_set_n_threads(
    ctx: *mut llama_context,
    n_threads: i32,
    n_threads_batch: i32,
) {
    unsupported!("llama_set_n_threads")
}

/// Upstream: the number of threads used to generate a single token.
/// Not supported by llama-hotswap yet: logs once and returns -1.
#[no_mangle]
pub unsafe extern "C" fn llama_n_threads(ctx: *mut llama_context) -> i32 {
    unsupported!("llama_n_threads", -1)
}

/// Upstream: the number of threads used for prompt and batch processing.
/// Not supported by llama-hotswap yet: logs once and returns -1.
#[no_mangle]
pub unsafe extern "C" fn llama_n_threads_batch(ctx: *mut llama_context) -> i32 {
    unsupported!("llama_n_threads_batch", -1)
}

/// Upstream: sets whether evaluation outputs embeddings.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_set_embeddings(ctx: *mut llama_context, embeddings: bool) {
    unsupported!("llama_set_embeddings")
}

/// Upstream: sets whether attention is causal (each token attends only to earlier ones).
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_set_causal_attn(ctx: *mut llama_context, causal_attn: bool) {
    unsupported!("llama_set_causal_attn")
}

/// Upstream: whether the context currently uses causal attention.
/// Not supported by llama-hotswap yet: logs once and returns false.
#[no_mangle]
pub unsafe extern "C" fn llama_get_causal_attn(ctx: *const llama_context) -> bool {
    unsupported!("llama_get_causal_attn", false)
}

/// Upstream (deprecated): sets warmup mode, in which evaluation touches every tensor.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_set_warmup(ctx: *mut llama_context, warmup: bool) {
    unsupported!("llama_set_warmup")
}

/// Upstream: sets the callback polled during evaluation; returning true aborts it.
/// Not supported by llama-hotswap yet: logs once and returns; the callback is never called.
#[no_mangle]
pub unsafe extern "C" fn llama_set_abort_callback(
    ctx: *mut llama_context,
    abort_callback: ggml_abort_callback,
    abort_callback_data: *mut c_void,
) {
    unsupported!("llama_set_abort_callback")
}

/// Upstream: waits until all computations of the context are finished.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_synchronize(ctx: *mut llama_context) {
    unsupported!("llama_synchronize")
}

// ---------------------------------------------------------------------------------------------
// Results of the last evaluation
// ---------------------------------------------------------------------------------------------

/// Upstream: the logits of the last evaluation, one row of n_vocab floats per output token,
/// owned by the context.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits(ctx: *mut llama_context) -> *mut f32 {
    unsupported!("llama_get_logits", std::ptr::null_mut())
}

/// Upstream: the logits of output `i` (negative counts from the end); NULL for an invalid
/// index.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    unsupported!("llama_get_logits_ith", std::ptr::null_mut())
}

/// Upstream: the output token embeddings of the last evaluation (n_outputs rows of n_embd),
/// owned by the context; NULL when pooling is on.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings(ctx: *mut llama_context) -> *mut f32 {
    unsupported!("llama_get_embeddings", std::ptr::null_mut())
}

/// Upstream: the embedding of output `i` (negative counts from the end); NULL for an invalid
/// index.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    unsupported!("llama_get_embeddings_ith", std::ptr::null_mut())
}

/// Upstream: the pooled embedding (or rank scores) of a sequence; NULL without pooling.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_seq(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
) -> *mut f32 {
    unsupported!("llama_get_embeddings_seq", std::ptr::null_mut())
}

/// Upstream: the token sampled on the backend for output `i`; LLAMA_TOKEN_NULL if none.
/// Not supported by llama-hotswap yet: logs once and returns LLAMA_TOKEN_NULL (-1).
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_token_ith(
    ctx: *mut llama_context,
    i: i32,
) -> llama_token {
    unsupported!("llama_get_sampled_token_ith", LLAMA_TOKEN_NULL)
}

/// Upstream: the probabilities computed by backend sampling for output `i`; NULL if none.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_probs_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    unsupported!("llama_get_sampled_probs_ith", std::ptr::null_mut())
}

/// Upstream: the number of entries `llama_get_sampled_probs_ith` returns for output `i`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_probs_count_ith(ctx: *mut llama_context, i: i32) -> u32 {
    unsupported!("llama_get_sampled_probs_count_ith", 0)
}

/// Upstream: the logits kept by backend sampling for output `i`; NULL if none.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    unsupported!("llama_get_sampled_logits_ith", std::ptr::null_mut())
}

/// Upstream: the number of entries `llama_get_sampled_logits_ith` returns for output `i`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_logits_count_ith(
    ctx: *mut llama_context,
    i: i32,
) -> u32 {
    unsupported!("llama_get_sampled_logits_count_ith", 0)
}

/// Upstream: the candidate token ids matching the sampled probabilities/logits of output
/// `i`; NULL if none.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_ith(
    ctx: *mut llama_context,
    i: i32,
) -> *mut llama_token {
    unsupported!("llama_get_sampled_candidates_ith", std::ptr::null_mut())
}

/// Upstream: the number of entries `llama_get_sampled_candidates_ith` returns for output `i`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_count_ith(
    ctx: *mut llama_context,
    i: i32,
) -> u32 {
    unsupported!("llama_get_sampled_candidates_count_ith", 0)
}

/// Upstream (experimental): attaches a sampler to sequence `seq_id` for backend sampling;
/// returns whether it succeeded.
/// Not supported by llama-hotswap yet: logs once and returns false. The sampler stays owned
/// by the caller.
#[no_mangle]
pub unsafe extern "C" fn llama_set_sampler(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    smpl: *mut llama_sampler,
) -> bool {
    unsupported!("llama_set_sampler", false)
}
