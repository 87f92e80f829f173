//! Sampling: the sampler interface (`llama_sampler_*`), sampler chains and the built-in
//! samplers. Not supported by llama-hotswap yet: every constructor returns NULL, and no stub
//! dereferences a sampler or calls into its interface, even for samplers a host built itself.
//! (`llama_set_sampler` lives with the context functions, `llama_perf_sampler*` in `perf`.)

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;
use std::ptr::null_mut;

use super::handles::{llama_context, llama_vocab};
use super::types::*;

// ---------------------------------------------------------------------------------------------
// The sampler interface
// ---------------------------------------------------------------------------------------------

/// Upstream: wraps a host-implemented interface and its state `ctx` into a new sampler,
/// freed with `llama_sampler_free`.
/// Not supported by llama-hotswap yet: logs once and returns NULL. `iface` and `ctx` stay
/// owned by the caller (nothing will call `iface->free`).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init(
    iface: *mut llama_sampler_i,
    ctx: llama_sampler_context_t,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init", null_mut())
}

/// Upstream: the sampler's name (from `iface->name`), owned by the sampler.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_name(smpl: *const llama_sampler) -> *const c_char {
    unsupported!("llama_sampler_name", std::ptr::null())
}

/// Upstream: tells the sampler that `token` was chosen, updating its state.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_accept(smpl: *mut llama_sampler, token: llama_token) {
    unsupported!("llama_sampler_accept")
}

/// Upstream: applies the sampler to the candidates in `cur_p` (reordering, filtering or
/// selecting).
/// Not supported by llama-hotswap yet: logs once and returns; `cur_p` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_apply(
    smpl: *mut llama_sampler,
    cur_p: *mut llama_token_data_array,
) {
    unsupported!("llama_sampler_apply")
}

/// Upstream: resets the sampler's state.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_reset(smpl: *mut llama_sampler) {
    unsupported!("llama_sampler_reset")
}

/// Upstream: a copy of the sampler with its state, freed with `llama_sampler_free`.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    unsupported!("llama_sampler_clone", null_mut())
}

/// Upstream: copies the mutable state of `src` into `dst` (same type and configuration).
/// Not supported by llama-hotswap yet: logs once and returns; `dst` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_copy(src: *const llama_sampler, dst: *mut llama_sampler) {
    unsupported!("llama_sampler_copy")
}

/// Upstream: frees a sampler (not one owned by a chain); NULL is a no-op.
/// Not supported by llama-hotswap yet: logs once and returns. No sampler of this library can
/// exist; a host-built sampler is not freed and its `iface->free` is not called.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_free(smpl: *mut llama_sampler) {
    unsupported!("llama_sampler_free")
}

// ---------------------------------------------------------------------------------------------
// Sampler chains
// ---------------------------------------------------------------------------------------------

/// Upstream: creates an empty sampler chain, itself a sampler.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_chain_init(
    params: llama_sampler_chain_params,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_chain_init", null_mut())
}

/// Upstream: appends `smpl` to the chain, which takes ownership of it.
/// Not supported by llama-hotswap yet: logs once and returns. Ownership of `smpl` is NOT
/// taken: it stays with the caller.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_add(
    chain: *mut llama_sampler,
    smpl: *mut llama_sampler,
) {
    unsupported!("llama_sampler_chain_add")
}

/// Upstream: sampler `i` of the chain (the chain itself for -1); NULL if `chain` is not a
/// chain or `i` is out of range.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_get(
    chain: *mut llama_sampler,
    i: i32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_chain_get", null_mut())
}

/// Upstream: the number of samplers in the chain.
/// Not supported by llama-hotswap yet: logs once and returns -1.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_n(chain: *const llama_sampler) -> i32 {
    unsupported!("llama_sampler_chain_n", -1)
}

/// Upstream: removes sampler `i` from the chain and returns it, now owned by the caller.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_chain_remove(
    chain: *mut llama_sampler,
    i: i32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_chain_remove", null_mut())
}

// ---------------------------------------------------------------------------------------------
// Built-in samplers
// ---------------------------------------------------------------------------------------------

/// Upstream: a sampler that selects the most probable token.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_greedy() -> *mut llama_sampler {
    unsupported!("llama_sampler_init_greedy", null_mut())
}

/// Upstream: a sampler that draws a token from the distribution (random seed for
/// LLAMA_DEFAULT_SEED).
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_dist(seed: u32) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_dist", null_mut())
}

/// Upstream: top-k filtering (k <= 0 keeps everything).
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_k(k: i32) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_top_k", null_mut())
}

/// Upstream: nucleus (top-p) filtering, keeping at least `min_keep` tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_top_p", null_mut())
}

/// Upstream: min-p filtering, keeping at least `min_keep` tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_min_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_min_p", null_mut())
}

/// Upstream: locally typical sampling, keeping at least `min_keep` tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_typical(p: f32, min_keep: usize) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_typical", null_mut())
}

/// Upstream: temperature scaling of the logits (t <= 0 keeps only the maximum).
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp(t: f32) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_temp", null_mut())
}

/// Upstream: dynamic (entropy-based) temperature.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp_ext(
    t: f32,
    delta: f32,
    exponent: f32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_temp_ext", null_mut())
}

/// Upstream: XTC (exclude top choices) sampling.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_xtc(
    p: f32,
    t: f32,
    min_keep: usize,
    seed: u32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_xtc", null_mut())
}

/// Upstream: top-n-sigma filtering.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_n_sigma(n: f32) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_top_n_sigma", null_mut())
}

/// Upstream: Mirostat 1.0 sampling.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat(
    n_vocab: i32,
    seed: u32,
    tau: f32,
    eta: f32,
    m: i32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_mirostat", null_mut())
}

/// Upstream: Mirostat 2.0 sampling.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat_v2(
    seed: u32,
    tau: f32,
    eta: f32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_mirostat_v2", null_mut())
}

/// Upstream: constrains sampling to a GBNF grammar (NULL if the grammar does not parse).
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_grammar", null_mut())
}

/// Upstream (deprecated): a grammar sampler activated by trigger words or tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_words: *mut *const c_char,
    num_trigger_words: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_grammar_lazy", null_mut())
}

/// Upstream: a grammar sampler activated by trigger patterns or tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy_patterns(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_patterns: *mut *const c_char,
    num_trigger_patterns: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_grammar_lazy_patterns", null_mut())
}

/// Upstream: repetition, frequency and presence penalties over the last tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_penalties(
    n_vocab: i32,
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_penalties", null_mut())
}

/// Upstream: the DRY ("don't repeat yourself") sampler.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_dry(
    vocab: *const llama_vocab,
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    seq_breakers: *mut *const c_char,
    num_breakers: usize,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_dry", null_mut())
}

/// Upstream: adaptive-p, selecting tokens near a target probability over time.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub extern "C" fn llama_sampler_init_adaptive_p(
    target: f32,
    decay: f32,
    seed: u32,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_adaptive_p", null_mut())
}

/// Upstream: adds fixed biases to the logits of given tokens.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_logit_bias(
    n_vocab: i32,
    n_logit_bias: i32,
    logit_bias: *const llama_logit_bias,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_logit_bias", null_mut())
}

/// Upstream: the fill-in-the-middle sampler (merges same-prefix tokens, prefers EOG).
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_infill(
    vocab: *const llama_vocab,
) -> *mut llama_sampler {
    unsupported!("llama_sampler_init_infill", null_mut())
}

/// Upstream: the seed a sampler uses, or LLAMA_DEFAULT_SEED if it has none.
/// Not supported by llama-hotswap yet: logs once and returns LLAMA_DEFAULT_SEED (upstream's
/// "no seed" value).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_get_seed(smpl: *const llama_sampler) -> u32 {
    unsupported!("llama_sampler_get_seed", LLAMA_DEFAULT_SEED)
}

/// Upstream: samples and accepts a token from output `idx` of the last evaluation.
/// Not supported by llama-hotswap yet: logs once and returns LLAMA_TOKEN_NULL (-1).
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_sample(
    smpl: *mut llama_sampler,
    ctx: *mut llama_context,
    idx: i32,
) -> llama_token {
    unsupported!("llama_sampler_sample", LLAMA_TOKEN_NULL)
}
