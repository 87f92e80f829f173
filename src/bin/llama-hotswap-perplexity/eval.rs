//! Perplexity and KL-divergence over chunks of tokenized text, as upstream's
//! tools/perplexity computes them, on the crate's core (a [`Context`] over a loaded
//! [`Model`]). The CLI (`main.rs`), ik's reload protocols (`protocol.rs`) and the in-process
//! sweep (`sweep.rs`) all evaluate through [`Evaluator`].
//!
//! # How (upstream's `perplexity()` and `kl_divergence()`)
//! * The text is tokenized once with BOS ([`tokenize_text`]); chunk `k` is tokens
//!   `[k·n_ctx, (k+1)·n_ctx)`; its first token is replaced by BOS for the decode when the vocab
//!   adds BOS.
//! * Each group of `n_seq = max(1, n_batch / n_ctx)` chunks is decoded from an empty KV cache,
//!   chunk `s` of the group as sequence `s`, in batches of `n_batch` tokens; logits are
//!   requested for positions `≥ n_ctx/2` only.
//! * Position `p` in `[n_ctx/2, n_ctx−1)` is scored against token `p+1`: `n_ctx−1−n_ctx/2`
//!   scores per chunk.
//! * PPL = exp(mean NLL), its error `PPL·sqrt(var(NLL)/(count−1))`.
//! * With base logits ([`KldBase`]): per position the KL divergence of ours from the base's
//!   (quantized) distribution, top-1 agreement, Δp of the correct token, and the PPL of both;
//!   the summary carries upstream's statistics ([`KldStats`]).
//!
//! # API (kept stable for `sweep.rs`)
//! ```ignore
//! let mut ev = Evaluator::new(Arc::clone(&model), EvalConfig { n_ctx: 512, ..EvalConfig::default() })?;
//! let tokens = tokenize_text(&model, &tokenizer, &text)?;
//! let s = ev.perplexity(&tokens, None)?;              // PPL only
//! let s = ev.perplexity(&tokens, Some(base_path))?;   // PPL, and write the base-logits file
//! let mut base = KldBase::open(base_path)?;
//! let s = ev.kl_divergence(&mut base)?;               // PPL + s.kld (rewinds `base` itself)
//! ```
//! `EvalConfig::print` selects upstream's console output (per-chunk estimates on stdout, info
//! on stderr); the sweep turns it off and can follow progress with [`Evaluator::on_chunk`].

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use llama::context::{Context, ContextParams};
use llama::model::Model;
use llama::tokenizer::Tokenizer;

use crate::kld_file::{
    encode_row, row_len, row_scale, rows_per_chunk, KldBase, KldFileError, KldWriter,
};

/// What an evaluation needs to know.
#[derive(Clone, Debug)]
pub struct EvalConfig {
    /// Tokens per chunk (`-c`); in KL-divergence mode the base file's n_ctx is used.
    pub n_ctx: usize,
    /// Logical batch (`-b`): `n_batch / n_ctx` chunks are decoded side by side.
    pub n_batch: usize,
    /// Physical batch (`-ub`).
    pub n_ubatch: usize,
    /// At most this many chunks (`--chunks`; None: all).
    pub n_chunks: Option<usize>,
    /// Decode threads (`-t`, `-tb`); also used for the log-softmax over the scored rows.
    pub n_threads: usize,
    pub n_threads_batch: usize,
    /// Upstream's console output (per-chunk estimates, final lines).
    pub print: bool,
    /// KV cache types (`-ctk` / `-ctv`, ggml type ids); None: the library's default.
    pub type_k: Option<u32>,
    pub type_v: Option<u32>,
    /// `llama_flash_attn_type` (`-fa`): -1 auto, 0 off, 1 on.
    pub flash_attn_type: i32,
}

impl Default for EvalConfig {
    /// Upstream's defaults: `-c 512 -b 2048 -ub 512`, all chunks, threads as the machine has.
    fn default() -> Self {
        let n = std::thread::available_parallelism().map_or(4, |n| n.get());
        EvalConfig {
            n_ctx: 512,
            n_batch: 2048,
            n_ubatch: 512,
            n_chunks: None,
            n_threads: n,
            n_threads_batch: n,
            print: true,
            type_k: None,
            type_v: None,
            flash_attn_type: -1,
        }
    }
}

/// Why an evaluation did not complete. The messages are upstream's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    Config(String),
    #[error("failed to create context: {0}")]
    Context(String),
    #[error("you need at least {need} tokens to evaluate perplexity with a context of {n_ctx}\nthe data file you provided tokenizes to only {have} tokens")]
    TooShort {
        need: usize,
        n_ctx: usize,
        have: usize,
    },
    #[error("failed to tokenize the input: {0}")]
    Tokenize(String),
    #[error("failed to decode (code {0})")]
    Decode(i32),
    #[error(transparent)]
    File(#[from] KldFileError),
}

/// KL-divergence statistics against base logits (upstream's final report).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KldStats {
    pub ppl_base: f64,
    pub ppl_base_err: f64,
    /// Correlation of ln PPL(Q) and ln PPL(base) (a fraction).
    pub ln_ppl_cor: f64,
    pub ln_ppl_ratio: f64,
    pub ln_ppl_ratio_err: f64,
    pub ppl_ratio: f64,
    pub ppl_ratio_err: f64,
    pub ppl_diff: f64,
    pub ppl_diff_err: f64,
    pub kld_mean: f64,
    pub kld_err: f64,
    /// Sorted per-position KL divergences and Δp (for percentiles).
    pub kld_values: Vec<f32>,
    pub p_diff_values: Vec<f32>,
    pub p_diff_mean: f64,
    pub p_diff_err: f64,
    pub rms_dp: f64,
    pub rms_dp_err: f64,
    /// Top-1 agreement (a fraction) and its error.
    pub same_top: f64,
    pub same_top_err: f64,
}

impl KldStats {
    /// Upstream's percentile (linear interpolation between sorted values).
    pub fn percentile(values: &[f32], fraction: f32) -> f32 {
        if values.is_empty() {
            return 0.0;
        }
        if fraction <= 0.0 {
            return values[0];
        }
        if fraction >= 1.0 {
            return values[values.len() - 1];
        }
        let mut p = fraction * (values.len() - 1) as f32;
        let ip = p as usize;
        p -= ip as f32;
        (1.0 - p) * values[ip] + p * values[(ip + 1).min(values.len() - 1)]
    }

    /// Upstream's median (mean of the two middle values for an even count).
    pub fn median(values: &[f32]) -> f32 {
        let n = values.len();
        if n == 0 {
            0.0
        } else if n % 2 == 0 {
            0.5 * (values[n / 2] + values[n / 2 - 1])
        } else {
            values[n / 2]
        }
    }

    pub fn kld_median(&self) -> f32 {
        Self::median(&self.kld_values)
    }

    #[allow(dead_code)] // API for sweep.rs
    pub fn kld_percentile(&self, fraction: f32) -> f32 {
        Self::percentile(&self.kld_values, fraction)
    }

    pub fn kld_max(&self) -> f32 {
        self.kld_values.last().copied().unwrap_or(0.0)
    }
}

/// The result of one evaluation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub n_chunks: usize,
    /// Scored positions.
    pub count: usize,
    pub ppl: f64,
    pub ppl_err: f64,
    /// Present in KL-divergence mode.
    pub kld: Option<KldStats>,
    /// Wall time of the evaluation.
    pub seconds: f64,
}

/// Running sums of upstream's `kl_divergence_result`.
#[derive(Clone, Copy, Debug, Default)]
struct KldAcc {
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    max_p_diff: f32,
    n_same_top: usize,
    count: usize,
}

impl KldAcc {
    fn add(&mut self, o: &KldAcc) {
        self.sum_nll += o.sum_nll;
        self.sum_nll2 += o.sum_nll2;
        self.sum_nll_base += o.sum_nll_base;
        self.sum_nll_base2 += o.sum_nll_base2;
        self.sum_nll_nll_base += o.sum_nll_nll_base;
        self.sum_kld += o.sum_kld;
        self.sum_kld2 += o.sum_kld2;
        self.sum_p_diff += o.sum_p_diff;
        self.sum_p_diff2 += o.sum_p_diff2;
        self.sum_p_diff4 += o.sum_p_diff4;
        self.max_p_diff = self.max_p_diff.max(o.max_p_diff);
        self.n_same_top += o.n_same_top;
        self.count += o.count;
    }
}

/// Upstream's `mean_and_uncertainty`.
fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let f = sum / count as f64;
    let df = sum2 / count as f64 - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    (f, df)
}

/// Upstream's `covariance`.
fn covariance(suma: f64, sumb: f64, sumab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let c = count as f64;
    (sumab / c - (suma / c) * (sumb / c)) / (c - 1.0)
}

/// NLL of `tok` under `logits` as upstream's `log_softmax(n_vocab, logits, tok)` (PPL mode).
fn nll_of(logits: &[f32], tok: usize) -> f64 {
    let max_logit = logits.iter().copied().fold(logits[0], f32::max);
    let mut sum_exp = 0.0f64;
    for &l in logits {
        sum_exp += f64::from((l - max_logit).exp());
    }
    -(f64::from(logits[tok] - max_logit) - sum_exp.ln())
}

/// One position against the base (upstream's `log_softmax(..., base_log_prob, tok, kld)`):
/// returns (KL divergence, Δp).
fn kld_row(logits: &[f32], base: &[u16], tok: usize, acc: &mut KldAcc) -> (f64, f32) {
    let n_vocab = logits.len();
    let mut max_logit = logits[0];
    let mut imax = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max_logit {
            max_logit = l;
            imax = i;
        }
    }
    let mut sum_exp = 0.0f64;
    for &l in logits {
        sum_exp += f64::from((l - max_logit).exp());
    }
    let log_sum_exp = sum_exp.ln() as f32;
    let (scale, min_log_prob) = row_scale(base);
    let q = &base[4..4 + n_vocab];
    let nll = max_logit + log_sum_exp - logits[tok];
    acc.sum_nll += f64::from(nll);
    acc.sum_nll2 += f64::from(nll * nll);
    let nll_base = -(scale * f32::from(q[tok]) + min_log_prob);
    acc.sum_nll_base += f64::from(nll_base);
    acc.sum_nll_base2 += f64::from(nll_base * nll_base);
    acc.sum_nll_nll_base += f64::from(nll * nll_base);
    let max_logit = max_logit + log_sum_exp;
    let mut sum = 0.0f64;
    let mut imax_base = 0;
    let mut p_log_base_max = 0.0f32;
    for (i, (&qi, &l)) in q.iter().zip(logits).enumerate() {
        let p_log_base = scale * f32::from(qi) + min_log_prob;
        if i == 0 || p_log_base > p_log_base_max {
            p_log_base_max = p_log_base;
            imax_base = i;
        }
        if p_log_base > -16.0 {
            let p_base = p_log_base.exp();
            sum += f64::from(p_base * (p_log_base - l + max_logit));
        }
    }
    acc.sum_kld += sum;
    acc.sum_kld2 += sum * sum;
    acc.count += 1;
    if imax == imax_base {
        acc.n_same_top += 1;
    }
    let p_base = (-nll_base).exp();
    let p = (-nll).exp();
    let p_diff = p - p_base;
    acc.sum_p_diff += f64::from(p_diff);
    let p_diff2 = f64::from(p_diff * p_diff);
    acc.sum_p_diff2 += p_diff2;
    acc.sum_p_diff4 += p_diff2 * p_diff2;
    acc.max_p_diff = acc.max_p_diff.max(p_diff.abs());
    (sum, p_diff)
}

/// Splits `n` rows into contiguous ranges, one per thread, runs `f` on each and returns the
/// results in order (so sums combine in a fixed order: runs are reproducible).
fn par_rows<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, n.max(1));
    let per = n.div_ceil(threads);
    if threads == 1 {
        return vec![f(0..n)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                let r = (t * per).min(n)..((t + 1) * per).min(n);
                s.spawn(move || f(r))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a scoring thread panicked"))
            .collect()
    })
}

/// Encodes `n_rows` rows of logits into base-logits rows (`rows`, `row_len` each) on
/// `threads` threads; returns each thread's (Σ NLL, Σ NLL²) in order.
fn encode_rows(
    logits: &[f32],
    toks: &[i32],
    n_vocab: usize,
    n_rows: usize,
    threads: usize,
    rows: &mut [u16],
) -> Vec<(f64, f64)> {
    let rl = row_len(n_vocab);
    let threads = threads.clamp(1, n_rows.max(1));
    let per = n_rows.div_ceil(threads);
    let work = |k0: usize, out: &mut [u16]| {
        let (mut a, mut b) = (0.0, 0.0);
        for (j, row) in out.chunks_mut(rl).enumerate() {
            let k = k0 + j;
            let v = encode_row(
                &logits[k * n_vocab..(k + 1) * n_vocab],
                row,
                toks[k + 1] as usize,
            );
            a += v;
            b += v * v;
        }
        (a, b)
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = rows[..n_rows * rl]
            .chunks_mut(per * rl)
            .enumerate()
            .map(|(t, out)| {
                let work = &work;
                s.spawn(move || work(t * per, out))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a scoring thread panicked"))
            .collect()
    })
}

/// Tokenizes the text as upstream's `common_tokenize(ctx, text, add_special = true,
/// parse_special = false)`.
pub fn tokenize_text(
    model: &Model,
    tokenizer: &Tokenizer,
    text: &[u8],
) -> Result<Vec<i32>, EvalError> {
    tokenizer
        .tokenize(&model.vocab, text, true, false)
        .map_err(|e| EvalError::Tokenize(e.to_string()))
}

/// Progress callback: (chunks done, chunks in this evaluation).
pub type ChunkCallback = Box<dyn FnMut(usize, usize) + Send>;

/// Evaluates chunks of text on one context over a model.
pub struct Evaluator {
    ctx: Context,
    cfg: EvalConfig,
    n_vocab: usize,
    add_bos: bool,
    bos: i32,
    /// Output rows of the current group of chunks (n_ctx − n_ctx/2 per chunk).
    logits: Vec<f32>,
    on_chunk: Option<ChunkCallback>,
}

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Sequences decoded side by side for chunks of `n_ctx` in batches of `n_batch` (upstream's
/// `n_seq`), and the checked batch size.
fn layout(n_ctx: usize, n_batch: usize) -> Result<usize, EvalError> {
    if n_ctx < 4 {
        // fewer leaves nothing to score (upstream divides by zero)
        return Err(EvalError::Config(format!(
            "perplexity tool requires '--ctx-size' >= 4 (got {n_ctx})"
        )));
    }
    if n_batch == 0 {
        return Err(EvalError::Config("'--batch-size' must be > 0".into()));
    }
    if !(n_batch < n_ctx || n_batch % n_ctx == 0) {
        // upstream: GGML_ASSERT(n_batch < n_ctx || n_batch % n_ctx == 0), an abort
        return Err(EvalError::Config(format!(
            "the batch size ({n_batch}) must be smaller than the context ({n_ctx}) or a multiple of it"
        )));
    }
    Ok((n_batch / n_ctx).max(1))
}

/// The logical batch upstream's llama-perplexity runs with: `n_seq = max(1, n_batch/n_ctx)`
/// chunks side by side in a context of `n_seq·n_ctx` cells, and the batch clamped to that
/// (`params.n_batch = min(n_batch, n_seq·n_ctx)`), so any `-c` runs with the default `-b`
/// (`-c 100 -b 2048` evaluates 20 chunks at a time in batches of 2000).
pub fn clamp_batch(n_ctx: usize, n_batch: usize) -> usize {
    if n_ctx == 0 {
        return n_batch;
    }
    n_batch.min((n_batch / n_ctx).max(1).saturating_mul(n_ctx))
}

impl Evaluator {
    /// Creates the context for chunks of `cfg.n_ctx` tokens (`n_seq` of them side by side,
    /// as upstream sizes it: `n_ctx·max(1, n_batch/n_ctx)` cells; the batch clamped to that
    /// first, see [`clamp_batch`]).
    pub fn new(model: Arc<Model>, mut cfg: EvalConfig) -> Result<Evaluator, EvalError> {
        cfg.n_batch = clamp_batch(cfg.n_ctx, cfg.n_batch);
        let n_seq = layout(cfg.n_ctx, cfg.n_batch)?;
        let n_ctx_total = n_seq * cfg.n_ctx;
        let params = ContextParams {
            n_ctx: u32::try_from(n_ctx_total)
                .map_err(|_| EvalError::Config("context too large".into()))?,
            n_batch: cfg.n_batch.min(n_ctx_total) as u32,
            n_ubatch: cfg.n_ubatch.max(1) as u32,
            n_seq_max: n_seq as u32,
            n_threads: cfg.n_threads.max(1) as i32,
            n_threads_batch: cfg.n_threads_batch.max(1) as i32,
            ..ContextParams::default()
        };
        let params = ContextParams {
            type_k: cfg.type_k.unwrap_or(params.type_k),
            type_v: cfg.type_v.unwrap_or(params.type_v),
            flash_attn_type: cfg.flash_attn_type,
            ..params
        };
        let ctx = Context::new(model, &params).map_err(|e| EvalError::Context(e.to_string()))?;
        let vocab = &ctx.model.vocab;
        if vocab.add_eos {
            // upstream: GGML_ASSERT(!llama_vocab_get_add_eos(vocab))
            return Err(EvalError::Config(
                "the model's vocab adds EOS to every text: perplexity is not defined for it".into(),
            ));
        }
        let n_vocab = vocab.tokens.len();
        if n_vocab != ctx.n_vocab() {
            return Err(EvalError::Config(format!(
                "the vocab has {n_vocab} tokens but the output layer {}",
                ctx.n_vocab()
            )));
        }
        Ok(Evaluator {
            add_bos: vocab.add_bos,
            bos: vocab.specials.bos,
            n_vocab,
            ctx,
            cfg,
            logits: Vec::new(),
            on_chunk: None,
        })
    }

    pub fn config(&self) -> &EvalConfig {
        &self.cfg
    }

    /// The context evaluations run on.
    #[allow(dead_code)] // API for sweep.rs
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    #[allow(dead_code)] // API for sweep.rs
    pub fn model(&self) -> &Arc<Model> {
        &self.ctx.model
    }

    #[allow(dead_code)] // API for sweep.rs
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Called after each chunk with (done, total).
    #[allow(dead_code)] // API for sweep.rs
    pub fn on_chunk(&mut self, f: Option<ChunkCallback>) {
        self.on_chunk = f;
    }

    /// Chunks evaluated for a text of `n_tokens` tokens.
    pub fn n_chunks_for(&self, n_tokens: usize) -> usize {
        let max = n_tokens / self.cfg.n_ctx;
        self.cfg.n_chunks.map_or(max, |c| c.min(max))
    }

    /// Decodes chunks `first_chunk .. first_chunk + n_seq_batch` of `tokens` (chunks of
    /// `n_ctx`) from an empty cache; `self.logits` gets their output rows, chunk by chunk.
    fn decode_group(
        &mut self,
        tokens: &[i32],
        n_ctx: usize,
        n_seq: usize,
        first_chunk: usize,
        n_seq_batch: usize,
    ) -> Result<(), EvalError> {
        let n_batch = self.cfg.n_batch.min(n_seq * n_ctx);
        let num_batches = n_ctx.div_ceil(n_batch);
        let first = n_ctx / 2;
        let start = first_chunk * n_ctx;
        let end = start + n_ctx;
        self.logits.clear();
        self.ctx.engine().kv.clear(true);
        for j in 0..num_batches {
            let batch_start = start + j * n_batch;
            let batch_size = (end - batch_start).min(n_batch);
            {
                let mut e = self.ctx.engine();
                let raw = &mut e.raw;
                raw.clear();
                raw.has_pos = true;
                raw.has_seq = true;
                raw.has_output = true;
                for seq in 0..n_seq_batch {
                    let seq_start = batch_start + seq * n_ctx;
                    for k in 0..batch_size {
                        let pos = j * n_batch + k;
                        let mut tok = tokens[seq_start + k];
                        if self.add_bos && j == 0 && k == 0 {
                            tok = self.bos;
                        }
                        raw.tokens.push(tok);
                        raw.pos.push(pos as i32);
                        raw.seq_n.push(1);
                        raw.seq_flat.push(seq as i32);
                        raw.output.push(pos >= first);
                    }
                }
            }
            let code = self.ctx.decode();
            if code != 0 {
                return Err(EvalError::Decode(code));
            }
            let e = self.ctx.engine();
            self.logits
                .extend_from_slice(&e.logits[..e.n_outputs * self.n_vocab]);
        }
        Ok(())
    }

    fn print_eta(&self, what: &str, t0: Instant, n_chunk: usize, n_seq: usize) {
        if !self.cfg.print {
            return;
        }
        let t_total = t0.elapsed().as_secs_f32();
        let mut total_seconds = (t_total * n_chunk as f32 / n_seq as f32) as i32;
        let mut line = format!("{what}: {t_total:.2} seconds per pass - ETA ");
        if total_seconds >= 3600 {
            line += &format!("{} hours ", total_seconds / 3600);
            total_seconds %= 3600;
        }
        line += &format!("{:.2} minutes", f64::from(total_seconds) / 60.0);
        eprintln!("{line}");
    }

    fn chunk_done(&mut self, done: usize, total: usize) {
        if let Some(f) = self.on_chunk.as_mut() {
            f(done, total);
        }
    }

    /// Perplexity of `tokens` (tokenized with BOS, see [`tokenize_text`]); with `save_base`,
    /// also writes upstream's base-logits file there.
    pub fn perplexity(
        &mut self,
        tokens: &[i32],
        save_base: Option<&Path>,
    ) -> Result<Summary, EvalError> {
        let t_start = Instant::now();
        let n_ctx = self.cfg.n_ctx;
        if tokens.len() < 2 * n_ctx {
            return Err(EvalError::TooShort {
                need: 2 * n_ctx,
                n_ctx,
                have: tokens.len(),
            });
        }
        let n_chunk = self.n_chunks_for(tokens.len());
        let n_seq = layout(n_ctx, self.cfg.n_batch)?;
        let n_batch = self.cfg.n_batch.min(n_seq * n_ctx);
        let n_vocab = self.n_vocab;
        let first = n_ctx / 2;
        let n_rows = rows_per_chunk(n_ctx);
        let out_rows = n_ctx - first;
        let rl = row_len(n_vocab);
        let mut writer = match save_base {
            Some(p) => {
                if self.cfg.print {
                    eprintln!("perplexity: saving all logits to {}", p.display());
                }
                Some(KldWriter::create(p, n_ctx, n_vocab, n_chunk, tokens)?)
            }
            None => None,
        };
        if self.cfg.print {
            eprintln!(
                "perplexity: calculating perplexity over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={n_batch}, n_seq={n_seq}"
            );
        }
        let threads = self.cfg.n_threads_batch.max(1);
        let mut rows = vec![0u16; if writer.is_some() { n_rows * rl } else { 0 }];
        let (mut nll, mut nll2, mut count) = (0.0f64, 0.0f64, 0usize);
        let mut i = 0;
        while i < n_chunk {
            let n_seq_batch = n_seq.min(n_chunk - i);
            let t0 = Instant::now();
            self.decode_group(tokens, n_ctx, n_seq, i, n_seq_batch)?;
            if i == 0 {
                self.print_eta("perplexity", t0, n_chunk, n_seq);
            }
            for seq in 0..n_seq_batch {
                let logits = &self.logits[seq * out_rows * n_vocab..];
                let toks = &tokens[(i + seq) * n_ctx + first..];
                let parts = if writer.is_some() {
                    encode_rows(logits, toks, n_vocab, n_rows, threads, &mut rows)
                } else {
                    par_rows(n_rows, threads, |r| {
                        let (mut a, mut b) = (0.0, 0.0);
                        for k in r {
                            let v = nll_of(
                                &logits[k * n_vocab..(k + 1) * n_vocab],
                                toks[k + 1] as usize,
                            );
                            a += v;
                            b += v * v;
                        }
                        (a, b)
                    })
                };
                for (a, b) in parts {
                    nll += a;
                    nll2 += b;
                }
                if let Some(w) = writer.as_mut() {
                    w.write_chunk(&rows)?;
                }
                count += n_rows;
                if self.cfg.print {
                    use std::io::Write;
                    print!("[{}]{:.4},", i + seq + 1, (nll / count as f64).exp());
                    let _ = std::io::stdout().flush();
                }
                self.chunk_done(i + seq + 1, n_chunk);
            }
            i += n_seq;
        }
        if self.cfg.print {
            println!();
        }
        if let Some(w) = writer {
            w.finish()?;
        }
        let mean = nll / count as f64;
        let ppl = mean.exp();
        let var = nll2 / count as f64 - mean * mean;
        let ppl_err = if var > 0.0 {
            (var / (count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        if self.cfg.print {
            if var > 0.0 {
                eprintln!("Final estimate: PPL = {ppl:.4} +/- {ppl_err:.5}");
            } else {
                eprintln!("Unexpected negative standard deviation of log(prob)");
            }
        }
        Ok(Summary {
            n_chunks: n_chunk,
            count,
            ppl,
            ppl_err,
            kld: None,
            seconds: t_start.elapsed().as_secs_f64(),
        })
    }

    /// KL divergence (and PPL) against the base logits in `base`, over its tokens and chunks
    /// (at most `n_chunks`). The file's n_ctx must fit the context this evaluator was made
    /// for; `base` is rewound first, so one open file serves any number of evaluations.
    pub fn kl_divergence(&mut self, base: &mut KldBase) -> Result<Summary, EvalError> {
        let t_start = Instant::now();
        let n_ctx = base.n_ctx;
        let n_seq_ctx = layout(self.cfg.n_ctx, self.cfg.n_batch)?;
        if n_ctx > n_seq_ctx * self.cfg.n_ctx {
            return Err(EvalError::Config(format!(
                "{} has been computed with {n_ctx}, while the current context is {}. Increase it with -c and retry",
                base.path.display(),
                self.cfg.n_ctx
            )));
        }
        if base.n_vocab != self.n_vocab {
            return Err(EvalError::Config(format!(
                "inconsistent vocabulary ({} vs {})",
                base.n_vocab, self.n_vocab
            )));
        }
        if let Some(bad) = base
            .tokens
            .iter()
            .find(|&&t| t < 0 || t as usize >= self.n_vocab)
        {
            return Err(EvalError::Config(format!(
                "{}: token id {bad} is out of the vocabulary",
                base.path.display()
            )));
        }
        base.rewind()?;
        let n_chunk = self
            .cfg
            .n_chunks
            .map_or(base.n_chunk, |c| c.min(base.n_chunk));
        let n_batch = self.cfg.n_batch.min(n_seq_ctx * self.cfg.n_ctx);
        let mut n_seq = (n_batch / n_ctx).max(1);
        if n_seq > n_seq_ctx {
            if self.cfg.print {
                eprintln!(
                    "kl_divergence: calculated n_seq={n_seq} exceeds context's n_seq_max={n_seq_ctx}, capping at {n_seq_ctx}"
                );
            }
            n_seq = n_seq_ctx;
        }
        if self.cfg.print {
            eprintln!(
                "kl_divergence: computing over {n_chunk} chunks, n_ctx={n_ctx}, batch_size={n_batch}, n_seq={n_seq}"
            );
        }
        let n_vocab = self.n_vocab;
        let first = n_ctx / 2;
        let n_rows = rows_per_chunk(n_ctx);
        let out_rows = n_ctx - first;
        let rl = row_len(n_vocab);
        let threads = self.cfg.n_threads_batch.max(1);
        let tokens = std::mem::take(&mut base.tokens);
        let result = (|| {
            let mut acc = KldAcc::default();
            let mut kld_values = Vec::with_capacity(n_rows * n_chunk);
            let mut p_diff_values = Vec::with_capacity(n_rows * n_chunk);
            let mut rows = Vec::new();
            let mut i = 0;
            while i < n_chunk {
                let n_seq_batch = n_seq.min(n_chunk - i);
                let t0 = Instant::now();
                self.decode_group_for(&tokens, n_ctx, n_seq, i, n_seq_batch, n_batch)?;
                if i == 0 {
                    self.print_eta("kl_divergence", t0, n_chunk, n_seq);
                    if self.cfg.print {
                        println!();
                        println!("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p");
                    }
                }
                for seq in 0..n_seq_batch {
                    base.read_chunk(&mut rows)?;
                    let logits = &self.logits[seq * out_rows * n_vocab..];
                    let toks = &tokens[(i + seq) * n_ctx + first..];
                    let rows = &rows;
                    let parts = par_rows(n_rows, threads, |r| {
                        let mut a = KldAcc::default();
                        let mut vals = Vec::with_capacity(r.len());
                        for k in r {
                            vals.push(kld_row(
                                &logits[k * n_vocab..(k + 1) * n_vocab],
                                &rows[k * rl..(k + 1) * rl],
                                toks[k + 1] as usize,
                                &mut a,
                            ));
                        }
                        (a, vals)
                    });
                    for (a, vals) in parts {
                        acc.add(&a);
                        for (k, p) in vals {
                            kld_values.push(k as f32);
                            p_diff_values.push(p);
                        }
                    }
                    if self.cfg.print {
                        print_kld_chunk(i + seq + 1, &acc);
                    }
                    self.chunk_done(i + seq + 1, n_chunk);
                }
                i += n_seq;
            }
            if self.cfg.print {
                println!();
            }
            Ok::<_, EvalError>((acc, kld_values, p_diff_values))
        })();
        base.tokens = tokens;
        let (acc, mut kld_values, mut p_diff_values) = result?;
        kld_values.sort_by(f32::total_cmp);
        p_diff_values.sort_by(f32::total_cmp);
        let (log_ppl, log_ppl_err) = mean_and_uncertainty(acc.sum_nll, acc.sum_nll2, acc.count);
        let ppl = log_ppl.exp();
        let ppl_err = ppl * log_ppl_err;
        let (log_base, log_base_err) =
            mean_and_uncertainty(acc.sum_nll_base, acc.sum_nll_base2, acc.count);
        let ppl_base = log_base.exp();
        let ppl_base_err = ppl_base * log_base_err;
        let cov = covariance(
            acc.sum_nll,
            acc.sum_nll_base,
            acc.sum_nll_nll_base,
            acc.count,
        );
        let ln_ratio = log_ppl - log_base;
        let ln_ratio_err =
            (log_ppl_err * log_ppl_err + log_base_err * log_base_err - 2.0 * cov).sqrt();
        let ppl_ratio = ln_ratio.exp();
        let ppl_cov = ppl * ppl_base * cov;
        let (kld_mean, kld_err) = mean_and_uncertainty(acc.sum_kld, acc.sum_kld2, acc.count);
        let (p_diff_mean, p_diff_err) =
            mean_and_uncertainty(acc.sum_p_diff, acc.sum_p_diff2, acc.count);
        let (mse, mse_err) = mean_and_uncertainty(acc.sum_p_diff2, acc.sum_p_diff4, acc.count);
        let rms_dp = mse.sqrt();
        let same_top = acc.n_same_top as f64 / acc.count as f64;
        let stats = KldStats {
            ppl_base,
            ppl_base_err,
            ln_ppl_cor: cov / (log_ppl_err * log_base_err),
            ln_ppl_ratio: ln_ratio,
            ln_ppl_ratio_err: ln_ratio_err,
            ppl_ratio,
            ppl_ratio_err: ppl_ratio * ln_ratio_err,
            ppl_diff: ppl - ppl_base,
            ppl_diff_err: (ppl_err * ppl_err + ppl_base_err * ppl_base_err - 2.0 * ppl_cov).sqrt(),
            kld_mean,
            kld_err,
            kld_values,
            p_diff_values,
            p_diff_mean,
            p_diff_err,
            rms_dp,
            rms_dp_err: 0.5 / rms_dp * mse_err,
            same_top,
            same_top_err: (same_top * (1.0 - same_top) / (acc.count as f64 - 1.0)).sqrt(),
        };
        let summary = Summary {
            n_chunks: n_chunk,
            count: acc.count,
            ppl,
            ppl_err,
            kld: Some(stats),
            seconds: t_start.elapsed().as_secs_f64(),
        };
        if self.cfg.print {
            print_kld_report(&summary);
        }
        Ok(summary)
    }

    fn decode_group_for(
        &mut self,
        tokens: &[i32],
        n_ctx: usize,
        n_seq: usize,
        first_chunk: usize,
        n_seq_batch: usize,
        n_batch: usize,
    ) -> Result<(), EvalError> {
        let saved = self.cfg.n_batch;
        self.cfg.n_batch = n_batch;
        let r = self.decode_group(tokens, n_ctx, n_seq, first_chunk, n_seq_batch);
        self.cfg.n_batch = saved;
        r
    }
}

/// One chunk's line of upstream's KL-divergence table.
fn print_kld_chunk(chunk: usize, acc: &KldAcc) {
    use std::io::Write;
    let (log_ppl, log_ppl_err) = mean_and_uncertainty(acc.sum_nll, acc.sum_nll2, acc.count);
    let ppl = log_ppl.exp();
    let (log_base, log_base_err) =
        mean_and_uncertainty(acc.sum_nll_base, acc.sum_nll_base2, acc.count);
    let cov = covariance(
        acc.sum_nll,
        acc.sum_nll_base,
        acc.sum_nll_nll_base,
        acc.count,
    );
    let ratio = log_ppl - log_base;
    let ratio_err = (log_ppl_err * log_ppl_err + log_base_err * log_base_err - 2.0 * cov).sqrt();
    let (kld, kld_err) = mean_and_uncertainty(acc.sum_kld, acc.sum_kld2, acc.count);
    let (mse, mse_err) = mean_and_uncertainty(acc.sum_p_diff2, acc.sum_p_diff4, acc.count);
    let rms = mse.sqrt();
    let rms_err = 0.5 / rms * mse_err;
    let top = acc.n_same_top as f64 / acc.count as f64;
    let top_err = (top * (1.0 - top) / (acc.count as f64 - 1.0)).sqrt();
    println!(
        "{chunk:4}    {ppl:9.4} ± {:9.4}    {ratio:10.5} ± {ratio_err:10.5}    {kld:10.5} ± {kld_err:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
        ppl * log_ppl_err,
        100.0 * rms,
        100.0 * rms_err,
        100.0 * top,
        100.0 * top_err
    );
    let _ = std::io::stdout().flush();
}

/// Upstream's final KL-divergence report (nothing under 100 scored positions, as upstream).
pub fn print_kld_report(s: &Summary) {
    let Some(k) = &s.kld else { return };
    if s.count < 100 {
        return;
    }
    println!("====== Perplexity statistics ======");
    println!(
        "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
        s.ppl, s.ppl_err
    );
    println!(
        "Mean PPL(base)                : {:10.6} ± {:10.6}",
        k.ppl_base, k.ppl_base_err
    );
    println!(
        "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
        100.0 * k.ln_ppl_cor
    );
    println!(
        "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
        k.ln_ppl_ratio, k.ln_ppl_ratio_err
    );
    println!(
        "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
        k.ppl_ratio, k.ppl_ratio_err
    );
    println!(
        "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
        k.ppl_diff, k.ppl_diff_err
    );
    println!();
    println!("====== KL divergence statistics ======");
    println!("Mean    KLD: {:10.6} ± {:10.6}", k.kld_mean, k.kld_err);
    let kv = &k.kld_values;
    let pct = |f: f32| KldStats::percentile(kv, f);
    println!("Maximum KLD: {:10.6}", k.kld_max());
    println!("99.9%   KLD: {:10.6}", pct(0.999));
    println!("99.0%   KLD: {:10.6}", pct(0.990));
    println!("95.0%   KLD: {:10.6}", pct(0.950));
    println!("90.0%   KLD: {:10.6}", pct(0.900));
    println!("Median  KLD: {:10.6}", k.kld_median());
    println!("10.0%   KLD: {:10.6}", pct(0.100));
    println!(" 5.0%   KLD: {:10.6}", pct(0.050));
    println!(" 1.0%   KLD: {:10.6}", pct(0.010));
    println!(" 0.1%   KLD: {:10.6}", pct(0.001));
    println!("Minimum KLD: {:10.6}", kv.first().copied().unwrap_or(0.0));
    println!();
    println!("====== Token probability statistics ======");
    println!(
        "Mean    Δp: {:6.3} ± {:5.3} %",
        100.0 * k.p_diff_mean,
        100.0 * k.p_diff_err
    );
    let pv = &k.p_diff_values;
    let pp = |f: f32| 100.0 * f64::from(KldStats::percentile(pv, f));
    println!(
        "Maximum Δp: {:6.3}%",
        100.0 * f64::from(pv.last().copied().unwrap_or(0.0))
    );
    println!("99.9%   Δp: {:6.3}%", pp(0.999));
    println!("99.0%   Δp: {:6.3}%", pp(0.990));
    println!("95.0%   Δp: {:6.3}%", pp(0.950));
    println!("90.0%   Δp: {:6.3}%", pp(0.900));
    println!("75.0%   Δp: {:6.3}%", pp(0.750));
    println!(
        "Median  Δp: {:6.3}%",
        100.0 * f64::from(KldStats::median(pv))
    );
    println!("25.0%   Δp: {:6.3}%", pp(0.250));
    println!("10.0%   Δp: {:6.3}%", pp(0.100));
    println!(" 5.0%   Δp: {:6.3}%", pp(0.050));
    println!(" 1.0%   Δp: {:6.3}%", pp(0.010));
    println!(" 0.1%   Δp: {:6.3}%", pp(0.001));
    println!(
        "Minimum Δp: {:6.3}%",
        100.0 * f64::from(pv.first().copied().unwrap_or(0.0))
    );
    println!(
        "RMS Δp    : {:6.3} ± {:5.3} %",
        100.0 * k.rms_dp,
        100.0 * k.rms_dp_err
    );
    println!(
        "Same top p: {:6.3} ± {:5.3} %",
        100.0 * k.same_top,
        100.0 * k.same_top_err
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_as_upstream() {
        let v = [0.0f32, 1.0, 2.0, 3.0, 4.0];
        assert_eq!(KldStats::percentile(&v, 0.0), 0.0);
        assert_eq!(KldStats::percentile(&v, 1.0), 4.0);
        assert_eq!(KldStats::percentile(&v, 0.5), 2.0);
        assert!((KldStats::percentile(&v, 0.9) - 3.6).abs() < 1e-6);
        assert_eq!(KldStats::median(&v), 2.0);
        assert_eq!(KldStats::median(&v[..4]), 1.5);
    }

    #[test]
    fn kld_of_identical_distribution_is_near_zero() {
        let logits: Vec<f32> = (0..50)
            .map(|i| ((i * 37) % 11) as f32 * 0.7 - 3.0)
            .collect();
        let mut row = vec![0u16; row_len(logits.len())];
        let nll = encode_row(&logits, &mut row, 7);
        let mut acc = KldAcc::default();
        let (kld, dp) = kld_row(&logits, &row, 7, &mut acc);
        assert!(kld.abs() < 1e-4, "{kld}");
        assert!(dp.abs() < 1e-3, "{dp}");
        assert!((acc.sum_nll - nll).abs() < 1e-5);
        assert_eq!(acc.n_same_top, 1);
        // a different distribution diverges
        let other: Vec<f32> = logits.iter().rev().copied().collect();
        let (kld2, _) = kld_row(&other, &row, 7, &mut acc);
        assert!(kld2 > 0.1, "{kld2}");
    }

    #[test]
    fn layout_refuses_bad_batches() {
        assert!(layout(512, 2048).is_ok_and(|n| n == 4));
        assert!(layout(512, 256).is_ok_and(|n| n == 1));
        assert!(layout(512, 700).is_err());
        // upstream clamps first: then every batch fits
        assert_eq!(clamp_batch(100, 2048), 2000);
        assert_eq!(clamp_batch(512, 700), 512);
        assert_eq!(clamp_batch(512, 256), 256);
        assert_eq!(clamp_batch(512, 2048), 2048);
        for (c, b) in [(100, 2048), (7, 100), (512, 700), (3000, 2048), (4, 4)] {
            assert!(layout(c, clamp_batch(c, b)).is_ok(), "-c {c} -b {b}");
        }
        assert!(layout(2, 8).is_err());
        assert!(layout(512, 0).is_err());
    }
}
