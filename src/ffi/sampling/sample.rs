//! Sampling from a context's logits (`llama_sampler_sample`), seeds, and
//! `llama_set_sampler` (its chains run in `in_decode`).

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

/// Samples a token from output `idx` of the last evaluation, as upstream: a token the
/// attached chain already sampled in the decode (`llama_get_sampled_token_ith`) is accepted
/// and returned; otherwise the candidates are the chain's kept probabilities or logits with
/// their ids (`llama_get_sampled_*_ith`), else all `n_vocab` logits of
/// `llama_get_logits_ith(ctx, idx)`; `smpl` is applied (an attached chain skips the prefix
/// the decode ran) and the selected token accepted and returned. LLAMA_TOKEN_NULL (-1) and a
/// log line when `smpl` is NULL, `ctx` is not a live context, there are no logits for `idx`,
/// or the sampler selected nothing (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_sample(
    smpl: *mut llama_sampler,
    ctx: *mut llama_context,
    idx: i32,
) -> llama_token {
    boundary!("llama_sampler_sample", LLAMA_TOKEN_NULL, {
        non_null(smpl, "smpl")?;
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { super::super::handles::context(ctx) }?;
        let cur = match start_candidates(handle, idx)? {
            Start::Token(token) => {
                // SAFETY: live sampler.
                unsafe { llama_sampler_accept(smpl, token) };
                return Ok(token);
            }
            Start::Candidates(cur) => cur,
        };
        let mut cur = cur;
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

/// Where `llama_sampler_sample` starts for output `idx`.
enum Start {
    /// The attached chain sampled this token inside the decode.
    Token(llama_token),
    /// The candidates to apply the sampler to.
    Candidates(Vec<llama_token_data>),
}

/// Upstream's start of `llama_sampler_sample`, read from the context's state as the
/// `llama_get_sampled_*_ith` getters and `llama_get_logits_ith` answer: the decode's token; else
/// the kept probabilities (with the kept logits) or the kept logits, with their candidate ids;
/// else all `n_vocab` logits of the output.
fn start_candidates(
    handle: &super::super::handles::llama_context,
    idx: i32,
) -> Result<Start, FfiError> {
    use super::super::sampled::{output_row, Lookup};
    let n_vocab = handle.inner.n_vocab();
    let mut sampling = handle.sampling.lock().unwrap_or_else(|e| e.into_inner());
    let e = handle.inner.engine();
    if let Lookup::Row(Some(r)) = sampling.lookup(output_row(&e, idx, false, "")) {
        if r.token() != LLAMA_TOKEN_NULL {
            return Ok(Start::Token(r.token()));
        }
        let n = if r.n_probs() > 0 {
            r.n_probs()
        } else {
            r.n_logits()
        } as usize;
        if n > 0 {
            let (logits, probs, ids) = r.arrays();
            return Ok(Start::Candidates(
                (0..n)
                    .map(|i| llama_token_data {
                        id: ids.map_or(i as llama_token, |ids| ids[i]),
                        logit: logits.get(i).copied().unwrap_or(0.0),
                        p: probs.map_or(0.0, |p| p[i]),
                    })
                    .collect(),
            ));
        }
    }
    let row = output_row(&e, idx, e.logits.is_empty(), "no logits")
        .map_err(|why| FfiError::Invalid(format!("no logits for output {idx} ({why})")))?;
    Ok(Start::Candidates(
        e.logits[row * n_vocab..(row + 1) * n_vocab]
            .iter()
            .enumerate()
            .map(|(id, &logit)| llama_token_data {
                id: id as llama_token,
                logit,
                p: 0.0,
            })
            .collect(),
    ))
}

/// Backend sampling (upstream's rule): attaches chain `smpl` to sequence `seq_id`, and returns
/// true. After each decode, the chain's longest prefix of samplers with a backend form
/// (greedy, dist, top-k, top-p, min-p, temp, temp-ext, logit-bias, and penalties when
/// `n_outputs_max_per_seq` is 1) runs on every output row of the sequence, with upstream's
/// graph arithmetic; the results are `llama_get_sampled_*_ith`'s, `llama_sampler_sample`
/// returns a sampled token directly or continues from the kept candidates, and the chain's
/// `apply` skips the prefix from now on (also after it is detached, as upstream). The prefix
/// samplers show "+name" in `llama_sampler_name` ("-penalties" for one that refused). NULL
/// detaches the sequence's chain (true). A sampler that is not a non-empty chain of this
/// library (a bare sampler, where upstream crashes; a struct the caller built) stays on the
/// CPU: false, with upstream's warning. A chain already attached once: false and a log line
/// (upstream aborts). Any `seq_id` is accepted, as upstream (one outside [0, n_seq_max) with a
/// warning: no batch reaches it). Batches with more than `n_outputs_max_per_seq` outputs (a
/// context parameter, default 1) for a sequence with a chain fail to decode (-1), as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_set_sampler(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    smpl: *mut llama_sampler,
) -> bool {
    boundary!("llama_set_sampler", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { super::super::handles::context(ctx) }?;
        let n_seq_max = handle.inner.engine().cparams.n_seq_max;
        let mut sampling = handle.sampling.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a sampler handle or NULL per the contract.
        unsafe { sampling.attach(seq_id, smpl, n_seq_max) }
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
         backend (backend samplers must be non-empty chains of this library)"
    );
}
