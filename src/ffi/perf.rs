//! Performance counters (`llama_perf_*`): a sampler chain's are implemented; a context's are
//! not supported by llama-hotswap yet.

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

/// The sampling time and count of a sampler chain (`llama_sampler_chain_init`): time spent
/// in its `apply` and `accept` (unless created with `no_perf`) and the number of accepted
/// tokens. An all-zero struct (and a log line) for anything but a live chain (upstream
/// aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler(
    chain: *const llama_sampler,
) -> llama_perf_sampler_data {
    boundary!("llama_perf_sampler", llama_perf_sampler_data::default(), {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { super::sampling::live_chain(chain) }?;
        Ok(llama_perf_sampler_data {
            t_sample_ms: 1e-3 * c.t_sample_us as f64,
            n_sample: c.n_sample.max(0),
        })
    })
}

/// Logs a sampler chain's timings (`llama_perf_sampler`) at info level, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_print(chain: *const llama_sampler) {
    boundary!("llama_perf_sampler_print", (), {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { super::sampling::live_chain(chain) }?;
        crate::log_info!(
            "llama_perf_sampler_print:    samplers time = {:10.2} ms / {:5} runs",
            1e-3 * c.t_sample_us as f64,
            c.n_sample.max(0)
        );
        Ok(())
    })
}

/// Resets a sampler chain's timings and count; anything but a live chain is logged and
/// ignored (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_perf_sampler_reset(chain: *mut llama_sampler) {
    boundary!("llama_perf_sampler_reset", (), {
        // SAFETY: checked by `live_chain`.
        let c = unsafe { super::sampling::live_chain(chain) }?;
        c.t_sample_us = 0;
        c.n_sample = 0;
        Ok(())
    })
}
