//! Contexts: creation and freeing, sizes, settings, and the results of the last evaluation
//! (logits, embeddings), and backend sampling's results (`llama_get_sampled_*`; the chains
//! and their runs live in `ffi::sampling`).

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_void;

use super::handles::{self, llama_context, llama_model};
use super::types::*;
use super::FfiError;

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

/// Creates a context for `model`; free it with `llama_free` (before or after the model: the
/// context keeps the model's data alive, although upstream requires the model to outlive it).
/// `params.n_ctx == 0` takes the model's training context. Returns NULL (with a log line) for
/// a NULL or freed model, `n_batch == 0 && n_ubatch == 0`, a context size that resolves to
/// 0, as upstream; and, until the engine supports them, for an architecture
/// other than those it runs, a tensor type it cannot compute, tensors on a CUDA device, an
/// unknown pooling type, or KV cache types other than F32, F16, BF16, Q8_0, Q4_0 and Q4_1
/// (the line names which). A quantized V cache needs flash attention (AUTO turns it on;
/// DISABLED: NULL, as upstream).
/// A `vocab_only` model gets a context without memory, as upstream (`llama_get_memory` gives
/// NULL; `llama_decode` checks the batch, then fails with -3 and a log line where upstream
/// aborts the process).
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
    if params.n_batch == 0 && params.n_ubatch == 0 {
        return Err(FfiError::Invalid(
            "n_batch and n_ubatch cannot both be zero".into(),
        ));
    }
    let configs: &[llama_sampler_seq_config] =
        if params.n_samplers > 0 && !params.samplers.is_null() {
            // SAFETY: `samplers` holds `n_samplers` configs per the contract.
            unsafe { std::slice::from_raw_parts(params.samplers, params.n_samplers) }
        } else {
            &[]
        };
    for config in configs {
        // SAFETY: a sampler handle or NULL per the contract (checked against the registry).
        if unsafe { super::sampling::live_chain(config.sampler) }.is_err() {
            return Err(FfiError::Invalid(
                "the backend samplers must be of type llama_sampler_chain".into(),
            ));
        }
    }
    let p = crate::context::ContextParams {
        n_ctx: params.n_ctx,
        n_batch: params.n_batch,
        n_ubatch: params.n_ubatch,
        n_seq_max: params.n_seq_max,
        n_threads: params.n_threads,
        n_threads_batch: params.n_threads_batch,
        pooling_type: params.pooling_type.0,
        attention_type: params.attention_type.0,
        flash_attn_type: params.flash_attn_type.0,
        rope: crate::graph::params::RopeOverrides {
            rope_scaling_type: params.rope_scaling_type.0,
            freq_base: params.rope_freq_base,
            freq_scale: params.rope_freq_scale,
            yarn_ext_factor: params.yarn_ext_factor,
            yarn_attn_factor: params.yarn_attn_factor,
            yarn_beta_fast: params.yarn_beta_fast,
            yarn_beta_slow: params.yarn_beta_slow,
            yarn_orig_ctx: params.yarn_orig_ctx,
        },
        type_k: params.type_k.0 as u32,
        type_v: params.type_v.0 as u32,
        embeddings: params.embeddings,
        kv_unified: params.kv_unified,
        swa_full: params.swa_full,
    };
    let inner = crate::context::Context::new(std::sync::Arc::clone(&handle.inner), &p)
        .map_err(|e| FfiError::Core(e.to_string()))?;
    let (n_batch, n_seq_max) = {
        let e = inner.engine();
        (e.cparams.n_batch, e.cparams.n_seq_max)
    };
    let mut sampling = super::sampled::BackendSampling::new(
        n_batch,
        params.n_outputs_max,
        params.n_outputs_max_per_seq,
    );
    for config in configs {
        // SAFETY: checked to be a live chain above.
        match unsafe { sampling.attach(config.seq_id, config.sampler, n_seq_max) } {
            Ok(true) => crate::log_info!(
                "llama_init_from_model: setting backend sampler for seq_id {} (n = {})",
                config.seq_id,
                // SAFETY: a live chain.
                unsafe { super::sampling::llama_sampler_chain_n(config.sampler) }
            ),
            Ok(false) => {}
            Err(e) => crate::log_error!("llama_init_from_model: {e}"),
        }
    }
    sampling.reserve_at_creation();
    let ctx = llama_context::new_boxed(model, inner, params.ctx_other, sampling);
    // SAFETY: `ctx` was just created and is live; `handle` was checked above.
    if let Ok(c) = unsafe { handles::context(ctx) } {
        let mut perf = c.perf.lock().unwrap_or_else(|e| e.into_inner());
        perf.t_start_us = handle.t_start_us;
        perf.t_load_us = handle.t_load_us;
        perf.no_perf = params.no_perf;
    }
    if let Some(cb) = params.abort_callback {
        // SAFETY: `ctx` was just created and is live.
        unsafe { set_abort(ctx, Some(cb), params.abort_callback_data) };
    }
    if let Some(cb) = params.cb_eval {
        // SAFETY: `ctx` was just created and is live.
        if let Ok(c) = unsafe { handles::context(ctx) } {
            c.inner.engine().observer = Some(Box::new(super::eval_callback::EvalCallback::new(
                cb,
                params.cb_eval_user_data,
            )));
        }
    }
    Ok(ctx)
}

/// The caller's abort callback and its data, called from the decoding thread as upstream.
struct AbortCallback {
    f: unsafe extern "C" fn(*mut c_void) -> bool,
    data: *mut c_void,
}

impl AbortCallback {
    fn call(&self) -> bool {
        // SAFETY: the caller registered `f` with `data`, to be called during decode.
        unsafe { (self.f)(self.data) }
    }
}

// SAFETY: upstream calls the callback with its data from whichever thread decodes; the
// caller's contract is the same with us.
unsafe impl Send for AbortCallback {}

/// Installs (or clears) the abort callback of a live context.
///
/// # Safety
/// `ctx` must be a live context.
unsafe fn set_abort(ctx: *mut llama_context, cb: ggml_abort_callback, data: *mut c_void) {
    // SAFETY: per the contract.
    let Ok(handle) = (unsafe { handles::context(ctx) }) else {
        return;
    };
    let mut engine = handle.inner.engine();
    engine.abort = cb.map(|f| {
        let cb = AbortCallback { f, data };
        Box::new(move || cb.call()) as crate::context::AbortFn
    });
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

/// The context size in cells: the requested size (0 → the model's training context) padded
/// up to a multiple of 256, as upstream; 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ctx(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_ctx", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_ctx)
    })
}

/// The context size available to one sequence: `n_ctx` with `kv_unified`, else
/// `n_ctx / n_seq_max` padded to 256 (as upstream); 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ctx_seq(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_ctx_seq", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_ctx_seq)
    })
}

/// The largest batch `llama_decode` accepts (`n_batch`, at most `n_ctx` with causal
/// attention); 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_batch(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_batch", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_batch)
    })
}

/// The micro-batch size decode splits batches into; 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ubatch(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_ubatch", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_ubatch)
    })
}

/// The number of distinct sequences (at least 1); 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_seq_max(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_seq_max", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_seq_max)
    })
}

/// Recurrent-state snapshots per sequence: always 0 (no supported architecture is
/// recurrent); 0 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_rs_seq(ctx: *const llama_context) -> u32 {
    boundary!("llama_n_rs_seq", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let _ = handle;
        Ok(0)
    })
}

/// The context's memory (its KV cache), owned by the context, for the `llama_memory_*`
/// functions; NULL for a NULL context and for a context of a `vocab_only` model or of a
/// diffusion model (dream, llada, llada-moe, rnd1), which have no memory, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_memory(ctx: *const llama_context) -> llama_memory_t {
    boundary!("llama_get_memory", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let _ = handle;
        // the memory handle is the context itself: memory calls lock its KV cache; a
        // vocab-only context has none (NULL, as upstream)
        Ok(if handle.inner.vocab_only || handle.inner.memoryless {
            std::ptr::null_mut()
        } else {
            ctx as llama_memory_t
        })
    })
}

/// The pooling type the context applies to embeddings: the one asked for in the context
/// parameters, else the model's (`<arch>.pooling_type`), else LLAMA_POOLING_TYPE_NONE, as
/// upstream; LLAMA_POOLING_TYPE_UNSPECIFIED for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_pooling_type(ctx: *const llama_context) -> LlamaPoolingType {
    boundary!(
        "llama_pooling_type",
        LlamaPoolingType(llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED as i32),
        {
            // SAFETY: NULL or a live context per the contract.
            let handle = unsafe { handles::context(ctx) }?;
            Ok(LlamaPoolingType(handle.inner.engine().cparams.pooling_type))
        }
    )
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// Sets the thread counts for generation (`n_threads`) and for batches (`n_threads_batch`).
#[no_mangle]
pub unsafe extern "C" fn llama_set_n_threads(
    ctx: *mut llama_context,
    n_threads: i32,
    n_threads_batch: i32,
) {
    boundary!("llama_set_n_threads", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        e.cparams.n_threads = n_threads;
        e.cparams.n_threads_batch = n_threads_batch;
        Ok(())
    })
}

/// The number of threads used to generate a single token; -1 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_threads(ctx: *mut llama_context) -> i32 {
    boundary!("llama_n_threads", -1, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_threads)
    })
}

/// The number of threads used for prompt and batch processing; -1 for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_n_threads_batch(ctx: *mut llama_context) -> i32 {
    boundary!("llama_n_threads_batch", -1, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.n_threads_batch)
    })
}

/// Sets whether decode also outputs embeddings (then every token is an output, as upstream).
#[no_mangle]
pub unsafe extern "C" fn llama_set_embeddings(ctx: *mut llama_context, embeddings: bool) {
    boundary!("llama_set_embeddings", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        handle.inner.engine().cparams.embeddings = embeddings;
        Ok(())
    })
}

/// Sets whether attention is causal (each token attends only to earlier positions).
#[no_mangle]
pub unsafe extern "C" fn llama_set_causal_attn(ctx: *mut llama_context, causal_attn: bool) {
    boundary!("llama_set_causal_attn", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        handle.inner.engine().cparams.causal_attn = causal_attn;
        Ok(())
    })
}

/// Whether the context uses causal attention; false for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_get_causal_attn(ctx: *const llama_context) -> bool {
    boundary!("llama_get_causal_attn", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.engine().cparams.causal_attn)
    })
}

/// Sets warmup mode (deprecated upstream; recorded, no effect on results).
#[no_mangle]
pub unsafe extern "C" fn llama_set_warmup(ctx: *mut llama_context, warmup: bool) {
    boundary!("llama_set_warmup", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        handle.inner.engine().cparams.warmup = warmup;
        Ok(())
    })
}

/// Sets the callback polled during decode (before each micro-batch and during its graph);
/// returning true aborts the decode, which returns 2 after removing the aborted micro-batch's
/// positions from the memory. NULL clears it.
#[no_mangle]
pub unsafe extern "C" fn llama_set_abort_callback(
    ctx: *mut llama_context,
    abort_callback: ggml_abort_callback,
    abort_callback_data: *mut c_void,
) {
    boundary!("llama_set_abort_callback", (), {
        // SAFETY: NULL or a live context per the contract.
        unsafe { handles::context(ctx) }?;
        // SAFETY: checked live above.
        unsafe { set_abort(ctx, abort_callback, abort_callback_data) };
        Ok(())
    })
}

/// Waits for the context's computations: decode is synchronous, so this returns at once.
#[no_mangle]
pub unsafe extern "C" fn llama_synchronize(ctx: *mut llama_context) {
    boundary!("llama_synchronize", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // decoding is synchronous: nothing is in flight
        let _ = handle;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Results of the last evaluation
// ---------------------------------------------------------------------------------------------

/// The logits of the last decode: one row of n_vocab floats per output token, in batch
/// order, owned by the context (valid until the next decode); NULL before any decode.
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits(ctx: *mut llama_context) -> *mut f32 {
    boundary!("llama_get_logits", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        Ok(if e.logits.is_empty() {
            std::ptr::null_mut()
        } else {
            e.logits.as_mut_ptr()
        })
    })
}

/// The logits of batch token `i` (negative: counted from the last output); NULL with a log
/// line when token `i` produced no output or `i` is out of range. For an output whose
/// sequence has a chain attached (`llama_set_sampler`), the logits its backend prefix left,
/// as upstream (`llama_get_sampled_logits_ith`: `_count_ith` of them).
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    boundary!("llama_get_logits_ith", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let sampled = unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::Row(Some(r)) => Ok(r.logits().map(|(p, _)| p)),
                super::sampled::Lookup::Invalid(why) => {
                    crate::log_error!(
                        "llama_get_logits_ith: invalid backend sampled logits id {i}, reason: {why}"
                    );
                    Ok(None)
                }
                _ => Ok(None),
            })
        }?;
        if let Some(p) = sampled {
            return Ok(p);
        }
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        let n_vocab = handle.inner.n_vocab();
        let row = super::sampled::output_row(&e, i, e.logits.is_empty(), "no logits")
            .map_err(|why| FfiError::Invalid(format!("invalid logits id {i}, reason: {why}")))?;
        // SAFETY: row < n_outputs, and the buffer holds n_outputs rows of n_vocab.
        Ok(unsafe { e.logits.as_mut_ptr().add(row * n_vocab) })
    })
}

/// The output embeddings of the last decode (n_outputs rows of n_embd, the final normed
/// hidden state) when embeddings are on; NULL otherwise. With pooling the rows are the
/// tokens' own (upstream leaves this buffer unwritten then); the pooled ones are
/// `llama_get_embeddings_seq`'s.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings(ctx: *mut llama_context) -> *mut f32 {
    boundary!("llama_get_embeddings", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        Ok(if e.embd.is_empty() || !e.cparams.embeddings {
            std::ptr::null_mut()
        } else {
            e.embd.as_mut_ptr()
        })
    })
}

/// The embedding of batch token `i` (negative: counted from the last output); NULL with a
/// log line when there is none.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    boundary!("llama_get_embeddings_ith", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        let n_embd = handle.inner.hp.n_embd;
        let none = e.embd.is_empty() || !e.cparams.embeddings;
        let row = super::sampled::output_row(&e, i, none, "no embeddings").map_err(|why| {
            FfiError::Invalid(format!("invalid embeddings id {i}, reason: {why}"))
        })?;
        // SAFETY: row < n_outputs, and the buffer holds n_outputs rows of n_embd.
        Ok(unsafe { e.embd.as_mut_ptr().add(row * n_embd) })
    })
}

/// The pooled embedding of sequence `seq_id` from the last decode, when the context pools
/// (`embeddings` on, pooling MEAN, CLS or LAST: n_embd floats; RANK: n_cls_out scores), owned
/// by the context until the next decode; NULL when the context does not pool or the
/// sequence was not in the last batch, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_seq(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
) -> *mut f32 {
    boundary!("llama_get_embeddings_seq", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut e = handle.inner.engine();
        let slot = usize::try_from(seq_id)
            .ok()
            .and_then(|s| e.embd_seq.get_mut(s))
            .and_then(|v| v.as_mut());
        Ok(slot.map_or(std::ptr::null_mut(), |v| v.as_mut_ptr()))
    })
}

/// Runs `f` on what backend sampling left for output `i` of the last decode (see
/// [`super::sampled::Lookup`]), with the index resolved as `llama_get_logits_ith` does.
///
/// # Safety
/// `ctx` must be NULL or a live context.
unsafe fn with_sampled<R>(
    ctx: *mut llama_context,
    i: i32,
    f: impl FnOnce(super::sampled::Lookup<'_>, usize) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    // SAFETY: NULL or a live context per the contract.
    let handle = unsafe { handles::context(ctx) }?;
    let mut sampling = handle.sampling.lock().unwrap_or_else(|e| e.into_inner());
    let row = {
        let e = handle.inner.engine();
        super::sampled::output_row(&e, i, false, "")
    };
    f(sampling.lookup(row), handle.inner.n_vocab())
}

/// The token the attached chain sampled for output `i` of the last decode (a chain whose
/// backend prefix ends in greedy or dist; see `llama_set_sampler`). LLAMA_TOKEN_NULL (-1)
/// when the last decode had no chain attached, the output's sequence has none, its chain
/// selects nothing in its prefix, or (with a log line) `i` names no output, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_token_ith(
    ctx: *mut llama_context,
    i: i32,
) -> llama_token {
    boundary!("llama_get_sampled_token_ith", LLAMA_TOKEN_NULL, {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::NoBuffers => Ok(LLAMA_TOKEN_NULL),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled token id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r.map_or(LLAMA_TOKEN_NULL, |r| r.token())),
            })
        }
    })
}

/// The probabilities the attached chain computed for output `i` (a prefix ending in dist),
/// `llama_get_sampled_probs_count_ith` of them, in the order of
/// `llama_get_sampled_candidates_ith`; owned by the context until the next decode. NULL
/// without them, or (with a log line) for an index that names no output, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_probs_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    boundary!("llama_get_sampled_probs_ith", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::NoBuffers => Ok(std::ptr::null_mut()),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled probs id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r
                    .and_then(|r| r.probs())
                    .map_or(std::ptr::null_mut(), |(p, _)| p)),
            })
        }
    })
}

/// The number of entries of `llama_get_sampled_probs_ith` for output `i`: 0 without them,
/// or (with a log line) for an index that names no output.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_probs_count_ith(ctx: *mut llama_context, i: i32) -> u32 {
    boundary!("llama_get_sampled_probs_count_ith", 0, {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::NoBuffers => Ok(0),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled probs count id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r.map_or(0, |r| r.n_probs())),
            })
        }
    })
}

/// The logits the attached chain's backend prefix left for output `i` (filtered, masked with
/// -inf or scaled), `llama_get_sampled_logits_count_ith` of them, in the order of
/// `llama_get_sampled_candidates_ith`; owned by the context until the next decode
/// (`llama_get_logits_ith` returns them too). NULL when the output's sequence has no chain or
/// the last decode had none attached, or (with a log line) for an index that names no output.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    boundary!("llama_get_sampled_logits_ith", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::NoBuffers => Ok(std::ptr::null_mut()),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled logits id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r
                    .and_then(|r| r.logits())
                    .map_or(std::ptr::null_mut(), |(p, _)| p)),
            })
        }
    })
}

/// The number of entries of `llama_get_sampled_logits_ith` for output `i`; the vocabulary
/// size when the last decode had no chain attached (the full logits a sampler starts from:
/// llama-server reads this many of `llama_get_logits_ith`), 0 for an output without a chain,
/// or (with a log line) for an index that names no output, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_logits_count_ith(
    ctx: *mut llama_context,
    i: i32,
) -> u32 {
    boundary!("llama_get_sampled_logits_count_ith", 0, {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, n_vocab| match found {
                super::sampled::Lookup::NoBuffers => Ok(u32::try_from(n_vocab).unwrap_or(u32::MAX)),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled logits count id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r.map_or(0, |r| r.n_logits())),
            })
        }
    })
}

/// The token ids of `llama_get_sampled_logits_ith` / `_probs_ith` for output `i` (after a
/// top-k, top-p or temp <= 0 in the chain's prefix); otherwise, and for any index that names
/// no output, upstream's full-vocabulary list 0..n_vocab, owned by the context.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_ith(
    ctx: *mut llama_context,
    i: i32,
) -> *mut llama_token {
    boundary!("llama_get_sampled_candidates_ith", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // SAFETY: as above.
        let found = unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::Row(Some(r)) => Ok(r.candidates().map(|(p, _)| p)),
                _ => Ok(None),
            })
        }?;
        // callers only read the full list (upstream's is const behind a cast)
        Ok(found.unwrap_or_else(|| handle.full_vocab_ids.as_ptr().cast_mut()))
    })
}

/// The number of entries of `llama_get_sampled_candidates_ith` for output `i` set by the
/// chain: 0 without them (the full list is not counted), or (with a log line) for an index
/// that names no output, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_count_ith(
    ctx: *mut llama_context,
    i: i32,
) -> u32 {
    boundary!("llama_get_sampled_candidates_count_ith", 0, {
        // SAFETY: NULL or a live context per the contract.
        unsafe {
            with_sampled(ctx, i, |found, _| match found {
                super::sampled::Lookup::NoBuffers => Ok(0),
                super::sampled::Lookup::Invalid(why) => Err(FfiError::Invalid(format!(
                    "invalid backend sampled candidates count id {i}, reason: {why}"
                ))),
                super::sampled::Lookup::Row(r) => Ok(r.map_or(0, |r| r.n_candidates())),
            })
        }
    })
}
