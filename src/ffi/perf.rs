//! Performance counters (`llama_perf_*`). Not supported by llama-hotswap yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use super::handles::llama_context;
use super::types::*;

/// Upstream: the context's timings and token counts (load, prompt and generation time).
/// Not supported by llama-hotswap yet: logs once and returns an all-zero struct.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context(ctx: *const llama_context) -> llama_perf_context_data {
    unsupported!("llama_perf_context", llama_perf_context_data::default())
}

/// Upstream: logs the context's timings (`llama_perf_context`) in a human-readable form.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_print(ctx: *const llama_context) {
    unsupported!("llama_perf_context_print")
}

/// Upstream: resets the context's timings and counts.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_reset(ctx: *mut llama_context) {
    unsupported!("llama_perf_context_reset")
}

/// Upstream: the sampling time and count of a sampler chain (`llama_sampler_chain_init`).
/// Not supported by llama-hotswap yet: logs once and returns an all-zero struct.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler(
    chain: *const llama_sampler,
) -> llama_perf_sampler_data {
    unsupported!("llama_perf_sampler", llama_perf_sampler_data::default())
}

/// Upstream: logs a sampler chain's timings (`llama_perf_sampler`).
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_print(chain: *const llama_sampler) {
    unsupported!("llama_perf_sampler_print")
}

/// Upstream: resets a sampler chain's timings and count.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_reset(chain: *mut llama_sampler) {
    unsupported!("llama_perf_sampler_reset")
}
