//! A context's performance counters (what `llama_perf_context` reports): plain data kept in
//! the context's handle, so the handle needs neither the `llama_perf_*` functions (`perf`)
//! nor what they import.

/// A context's counters, as upstream's `llama_context` keeps them: a decode of one token is
/// an "eval" (generation), of more a "prompt eval" of that many tokens; times are taken
/// unless the context was created with `no_perf` (counts always are). `t_load_us` becomes the
/// time from the model load's start to the end of the first decode, as upstream.
#[derive(Debug, Default)]
pub(crate) struct PerfCounters {
    pub t_start_us: i64,
    pub t_load_us: i64,
    pub t_p_eval_us: i64,
    pub t_eval_us: i64,
    pub n_p_eval: i32,
    pub n_eval: i32,
    pub n_reused: i32,
    pub has_evaluated_once: bool,
    pub no_perf: bool,
}

impl PerfCounters {
    /// Adds a successful decode of `n_tokens` that started at `t0_us` (`rebuilt`: the graph
    /// was built for it rather than reused).
    pub(crate) fn record(&mut self, n_tokens: i32, t0_us: i64, rebuilt: bool) {
        let now = super::clock::monotonic_us();
        if n_tokens == 1 {
            if !self.no_perf {
                self.t_eval_us += now - t0_us;
            }
            self.n_eval += 1;
        } else if n_tokens > 1 {
            if !self.no_perf {
                self.t_p_eval_us += now - t0_us;
            }
            self.n_p_eval += n_tokens;
        }
        if !rebuilt {
            self.n_reused += 1;
        }
        if n_tokens > 0 && !self.has_evaluated_once {
            self.t_load_us = now - self.t_start_us;
            self.has_evaluated_once = true;
        }
    }
}
