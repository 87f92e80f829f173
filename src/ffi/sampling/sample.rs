//! Sampling from a context's logits (`llama_sampler_sample`), seeds, and
//! `llama_set_sampler`.

use super::super::handles::llama_context;
use super::super::types::*;
use super::super::FfiError;
use super::api::*;
use super::chain::*;
use super::registry::*;
use super::rust_iface::*;

/// The seed a sampler draws with (dist, mirostat, mirostat-v2; for a chain the last such
/// sampler's), or LLAMA_DEFAULT_SEED if it has none. LLAMA_DEFAULT_SEED (and a log line)
/// for NULL (upstream crashes).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_get_seed(smpl: *const llama_sampler) -> u32 {
    boundary!("llama_sampler_get_seed", LLAMA_DEFAULT_SEED, {
        non_null(smpl, "smpl")?;
        // SAFETY: live per the check.
        Ok(unsafe { seed_of(smpl) })
    })
}

/// # Safety
/// `smpl` must be a live sampler.
pub(super) unsafe fn seed_of(smpl: *const llama_sampler) -> u32 {
    // SAFETY: live per the contract; chains own live samplers.
    unsafe {
        if let Some(s) = rust_sampler(smpl) {
            // upstream reports seeds for dist and the mirostats only
            return match s.inner.name() {
                "dist" | "mirostat" | "mirostat-v2" => s.inner.seed().unwrap_or(LLAMA_DEFAULT_SEED),
                _ => LLAMA_DEFAULT_SEED,
            };
        }
        if let Some(chain) = chain_of(smpl) {
            for &s in chain.samplers.iter().rev() {
                let seed = seed_of(s);
                if seed != LLAMA_DEFAULT_SEED {
                    return seed;
                }
            }
        }
    }
    LLAMA_DEFAULT_SEED
}

/// Samples a token from output `idx` of the last evaluation: the candidates are all
/// `n_vocab` logits of `llama_get_logits_ith(ctx, idx)`, `smpl` is applied and the selected
/// token accepted and returned. LLAMA_TOKEN_NULL (-1) and a log line when `smpl` is NULL,
/// `ctx` is not a live context, there are no logits for `idx`, or the sampler selected
/// nothing (upstream aborts). Backend samplers never pre-select a token here: they run on
/// the CPU, in this call.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_sample(
    smpl: *mut llama_sampler,
    ctx: *mut llama_context,
    idx: i32,
) -> llama_token {
    boundary!("llama_sampler_sample", LLAMA_TOKEN_NULL, {
        non_null(smpl, "smpl")?;
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { super::super::handles::context(ctx) }?;
        // SAFETY: a live context keeps its model handle (upstream's rule: model outlives it).
        let model = unsafe { super::super::handles::model(c.model) }?;
        let n_vocab = model.inner.vocab.tokens.len();
        // SAFETY: a live context.
        let logits = unsafe { super::super::context::llama_get_logits_ith(ctx, idx) };
        if logits.is_null() {
            return Err(FfiError::Invalid(format!("no logits for output {idx}")));
        }
        // SAFETY: a row of n_vocab logits owned by the context.
        let row = unsafe { std::slice::from_raw_parts(logits, n_vocab) };
        let mut cur: Vec<llama_token_data> = row
            .iter()
            .enumerate()
            .map(|(id, &logit)| llama_token_data {
                id: id as llama_token,
                logit,
                p: 0.0,
            })
            .collect();
        let mut arr = llama_token_data_array {
            data: cur.as_mut_ptr(),
            size: cur.len(),
            selected: -1,
            sorted: false,
        };
        // SAFETY: live sampler, array over `cur`.
        unsafe { llama_sampler_apply(smpl, &mut arr) };
        if arr.selected < 0 || arr.selected as usize >= arr.size || arr.data.is_null() {
            return Err(FfiError::Invalid(format!(
                "the sampler selected no token (selected {} of {} candidates); add a \
                 selecting sampler (greedy, dist, mirostat...) at the end of the chain",
                arr.selected, arr.size
            )));
        }
        // SAFETY: `selected < size` over the (possibly advanced) array.
        let token = unsafe { (*arr.data.add(arr.selected as usize)).id };
        // SAFETY: live sampler.
        unsafe { llama_sampler_accept(smpl, token) };
        Ok(token)
    })
}

/// Backend sampling: llama-hotswap runs no sampler inside the decode, so it answers as upstream
/// does for a sampler that cannot be offloaded: NULL (nothing to clear) returns true; a sampler
/// returns false with upstream's warning ("cannot be offloaded to the backend") and stays the
/// caller's, to run on the CPU (`llama_sampler_sample`, common's fallback: the same tokens).
#[no_mangle]
pub unsafe extern "C" fn llama_set_sampler(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    smpl: *mut llama_sampler,
) -> bool {
    boundary!("llama_set_sampler", false, {
        // SAFETY: NULL or a live context per the contract.
        let _ = unsafe { super::super::handles::context(ctx) }?;
        if smpl.is_null() {
            return Ok(true);
        }
        // SAFETY: a sampler handle per the contract.
        unsafe { not_offloaded(seq_id, smpl) };
        Ok(false)
    })
}

/// Upstream's warning for a sampler that stays on the CPU.
///
/// # Safety
/// `smpl` must be a live sampler.
pub(super) unsafe fn not_offloaded(seq_id: llama_seq_id, smpl: *mut llama_sampler) {
    // SAFETY: per the caller's contract; the name is a C string that outlives the call.
    let name = unsafe { llama_sampler_name(smpl) };
    let name = if name.is_null() {
        "(null)".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (llama_sampler_name's contract).
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy()
    };
    crate::log_warn!(
        "llama_set_sampler: sampler '{name}' for seq_id = {seq_id}, cannot be offloaded to the \
         backend (llama-hotswap samples on the CPU)"
    );
}
