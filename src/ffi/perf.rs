//! Performance counters (`llama_perf_*`) of contexts and sampler chains, with upstream's
//! numbers and print format.

use super::handles::{self, llama_context};
use super::perf_counters::PerfCounters;
use super::types::*;

impl PerfCounters {
    fn data(&self) -> llama_perf_context_data {
        llama_perf_context_data {
            t_start_ms: 1e-3 * self.t_start_us as f64,
            t_load_ms: 1e-3 * self.t_load_us as f64,
            t_p_eval_ms: 1e-3 * self.t_p_eval_us as f64,
            t_eval_ms: 1e-3 * self.t_eval_us as f64,
            n_p_eval: self.n_p_eval.max(1),
            n_eval: self.n_eval.max(1),
            n_reused: self.n_reused.max(0),
        }
    }
}

/// The context's timings and counts, as upstream: `t_start_ms` the model load's start
/// (`llama_time_us` / 1000, reset by `llama_perf_context_reset`), `t_load_ms` from there to
/// the end of the first decode, prompt-eval (decodes of more than one token) and eval
/// (one-token decodes) times and counts (at least 1 each, as upstream), `n_reused` the
/// decodes that reused the previous graph. An all-zero struct (and a log line) for a NULL or
/// freed context.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context(ctx: *const llama_context) -> llama_perf_context_data {
    boundary!("llama_perf_context", llama_perf_context_data::default(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let data = handle.perf.lock().unwrap_or_else(|e| e.into_inner()).data();
        Ok(data)
    })
}

/// Logs the context's timings (`llama_perf_context`) at info level in upstream's format
/// (load, prompt eval, eval, total time, graphs reused).
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_print(ctx: *const llama_context) {
    boundary!("llama_perf_context_print", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let d = handle.perf.lock().unwrap_or_else(|e| e.into_inner()).data();
        let t_end_ms = 1e-3 * super::backend::llama_time_us() as f64;
        let f = "llama_perf_context_print";
        crate::log_info!("{f}:        load time = {:10.2} ms", d.t_load_ms);
        crate::log_info!(
            "{f}: prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
            d.t_p_eval_ms,
            d.n_p_eval,
            d.t_p_eval_ms / f64::from(d.n_p_eval),
            1e3 / d.t_p_eval_ms * f64::from(d.n_p_eval)
        );
        crate::log_info!(
            "{f}:        eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
            d.t_eval_ms,
            d.n_eval,
            d.t_eval_ms / f64::from(d.n_eval),
            1e3 / d.t_eval_ms * f64::from(d.n_eval)
        );
        crate::log_info!(
            "{f}:       total time = {:10.2} ms / {:5} tokens",
            t_end_ms - d.t_start_ms,
            d.n_p_eval + d.n_eval
        );
        crate::log_info!("{f}:    graphs reused = {:10}", d.n_reused);
        Ok(())
    })
}

/// Resets the context's timings and counts (the start becomes now), as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_perf_context_reset(ctx: *mut llama_context) {
    boundary!("llama_perf_context_reset", (), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let mut p = handle.perf.lock().unwrap_or_else(|e| e.into_inner());
        p.t_start_us = super::backend::llama_time_us();
        p.t_eval_us = 0;
        p.n_eval = 0;
        p.t_p_eval_us = 0;
        p.n_p_eval = 0;
        p.n_reused = 0;
        Ok(())
    })
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
