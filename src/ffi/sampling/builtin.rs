//! The built-in samplers' constructors (`llama_sampler_init_*`); their arithmetic lives in
//! `crate::sampling`.

use std::ffi::c_char;
use std::ptr::null_mut;

use super::super::handles::llama_vocab;
use super::super::types::*;
use super::super::FfiError;
use super::rust_iface::*;
use crate::sampling::{basic, dry, infill, mirostat, penalties};
use crate::sampling::{Sampler, VocabAccess};

// ---------------------------------------------------------------------------------------------
// Built-in samplers
// ---------------------------------------------------------------------------------------------

pub(super) fn boxed(s: impl Sampler + 'static) -> Result<*mut llama_sampler, FfiError> {
    Ok(sampler_into_raw(Box::new(s)))
}

pub(super) fn empty(name: &'static str) -> Result<*mut llama_sampler, FfiError> {
    boxed(basic::Empty { name })
}

/// A sampler that selects the token with the highest logit (the first of equal ones).
#[no_mangle]
pub extern "C" fn llama_sampler_init_greedy() -> *mut llama_sampler {
    boundary!("llama_sampler_init_greedy", null_mut(), {
        boxed(basic::Greedy)
    })
}

/// A sampler that draws a token from the softmax of the logits. Its random stream is
/// upstream's (`std::mt19937` seeded with `seed`, libstdc++'s distributions), so the same
/// seed draws the same tokens with either library; LLAMA_DEFAULT_SEED picks a random seed.
#[no_mangle]
pub extern "C" fn llama_sampler_init_dist(seed: u32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_dist", null_mut(), {
        boxed(basic::Dist::new(seed))
    })
}

/// Top-k filtering: keeps the `k` highest logits, sorted ("?top-k", a no-op, for k <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_k(k: i32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_k", null_mut(), {
        if k <= 0 {
            return empty("?top-k");
        }
        boxed(basic::TopK { k })
    })
}

/// Nucleus (top-p) filtering, keeping at least `min_keep` tokens ("?top-p", a no-op, for
/// p >= 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_p", null_mut(), {
        if p >= 1.0 {
            return empty("?top-p");
        }
        boxed(basic::TopP::new(p, min_keep))
    })
}

/// Min-p filtering, keeping at least `min_keep` tokens ("?min-p", a no-op, for p <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_min_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_min_p", null_mut(), {
        if p <= 0.0 {
            return empty("?min-p");
        }
        boxed(basic::MinP { p, min_keep })
    })
}

/// Locally typical sampling, keeping at least `min_keep` tokens ("?typical", a no-op, for
/// p >= 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_typical(p: f32, min_keep: usize) -> *mut llama_sampler {
    boundary!("llama_sampler_init_typical", null_mut(), {
        if p >= 1.0 {
            return empty("?typical");
        }
        boxed(basic::Typical { p, min_keep })
    })
}

/// Temperature: divides the logits by `t`; t <= 0 keeps only the highest ("?temp", a
/// no-op, for t == 1).
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp(t: f32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_temp", null_mut(), {
        if t == 1.0 {
            return empty("?temp");
        }
        boxed(basic::Temp { temp: t })
    })
}

/// Dynamic (entropy-based) temperature in [t - delta, t + delta] ("?temp-ext", a no-op,
/// for t == 1 and delta <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp_ext(
    t: f32,
    delta: f32,
    exponent: f32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_temp_ext", null_mut(), {
        if t == 1.0 && delta <= 0.0 {
            return empty("?temp-ext");
        }
        boxed(basic::TempExt {
            temp: t,
            delta,
            exponent,
        })
    })
}

/// XTC (exclude top choices) with upstream's random stream for `seed` ("?xtc", a no-op,
/// for p <= 0 or t > 0.5).
#[no_mangle]
pub extern "C" fn llama_sampler_init_xtc(
    p: f32,
    t: f32,
    min_keep: usize,
    seed: u32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_xtc", null_mut(), {
        if p <= 0.0 || t > 0.5 {
            return empty("?xtc");
        }
        boxed(mirostat::Xtc::new(p, t, min_keep, seed))
    })
}

/// Top-n-sigma: masks logits more than `n` standard deviations below the highest
/// ("?top-n-sigma", a no-op, for n <= 0).
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_n_sigma(n: f32) -> *mut llama_sampler {
    boundary!("llama_sampler_init_top_n_sigma", null_mut(), {
        if n <= 0.0 {
            return empty("?top-n-sigma");
        }
        boxed(basic::TopNSigma { n })
    })
}

/// Mirostat 1.0, selecting a token with upstream's random stream for `seed`.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat(
    n_vocab: i32,
    seed: u32,
    tau: f32,
    eta: f32,
    m: i32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_mirostat", null_mut(), {
        boxed(mirostat::Mirostat::new(n_vocab, seed, tau, eta, m))
    })
}

/// Mirostat 2.0, selecting a token with upstream's random stream for `seed`.
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat_v2(
    seed: u32,
    tau: f32,
    eta: f32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_mirostat_v2", null_mut(), {
        boxed(mirostat::MirostatV2::new(seed, tau, eta))
    })
}

/// Repetition, frequency and presence penalties over the last `penalty_last_n` accepted
/// tokens ("?penalties", a no-op, when disabled: last_n == 0 or neutral values).
#[no_mangle]
pub extern "C" fn llama_sampler_init_penalties(
    n_vocab: i32,
    penalty_last_n: i32,
    penalty_repeat: f32,
    penalty_freq: f32,
    penalty_present: f32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_penalties", null_mut(), {
        let last_n = penalty_last_n.max(0);
        if penalties::Penalties::is_disabled(last_n, penalty_repeat, penalty_freq, penalty_present)
        {
            return empty("?penalties");
        }
        boxed(penalties::Penalties::new(
            n_vocab,
            last_n,
            penalty_repeat,
            penalty_freq,
            penalty_present,
        ))
    })
}

/// The vocabulary access the DRY and infill samplers use: the model's token table and the
/// tokenizer kept in the `llama_vocab` handle (pieces, detokenization, tokenization).
pub(super) struct FfiVocab {
    /// The `llama_vocab` handle (checked on every use: upstream's samplers also keep it).
    handle: usize,
    model: std::sync::Arc<crate::model::Model>,
}

impl FfiVocab {
    /// # Safety
    /// `vocab` must be NULL or a live vocab handle.
    unsafe fn new(vocab: *const llama_vocab) -> Result<FfiVocab, FfiError> {
        // SAFETY: per the contract.
        let v = unsafe { super::super::handles::vocab(vocab) }?;
        Ok(FfiVocab {
            handle: vocab as usize,
            model: v.inner.clone(),
        })
    }

    /// The handle, checked (`None` once it is freed).
    fn handle(&self) -> Option<&llama_vocab> {
        // SAFETY: the address of a vocab handle, checked by `handles::vocab`; the model
        // outlives its samplers per the API contract.
        unsafe { super::super::handles::vocab(self.handle as *const llama_vocab) }.ok()
    }

    /// Calls a length-returning conversion with a growing buffer (negative: the size needed).
    fn with_buffer(
        f: impl Fn(&mut [u8]) -> Result<i32, crate::tokenizer::TokenizerError>,
    ) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        for _ in 0..2 {
            let n = f(&mut buf).ok()?;
            if n >= 0 {
                buf.truncate(n as usize);
                return Some(buf);
            }
            buf.resize(n.unsigned_abs() as usize, 0);
        }
        None
    }
}

impl VocabAccess for FfiVocab {
    fn n_tokens(&self) -> i32 {
        self.model.vocab.tokens.len() as i32
    }
    fn is_eog(&self, id: i32) -> bool {
        self.model.vocab.eog.contains(&id)
    }
    fn eot(&self) -> i32 {
        self.model.vocab.specials.eot
    }
    fn eos(&self) -> i32 {
        self.model.vocab.specials.eos
    }
    fn piece(&self, id: i32) -> Vec<u8> {
        let vocab = &self.model.vocab;
        Self::with_buffer(|buf| crate::tokenizer::token_to_piece(vocab, id, buf, 0, false))
            .unwrap_or_default()
    }
    fn detokenize_one(&self, id: i32) -> Option<Vec<u8>> {
        let vocab = &self.model.vocab;
        Self::with_buffer(|buf| crate::tokenizer::detokenize(vocab, &[id], buf, false, true))
    }
    fn tokenize(&self, text: &[u8]) -> Option<Vec<i32>> {
        let handle = self.handle()?;
        handle
            .tokenizer
            .tokenize(&self.model.vocab, text, false, false)
            .ok()
    }
}

/// The DRY ("don't repeat yourself") sampler ("?dry", a no-op, when disabled: multiplier 0,
/// base < 1 or last_n 0). Sequence breakers are matched as upstream: every token whose
/// detokenized text contains a breaker breaks alone; a token ending with a breaker's prefix
/// heads the tokenization of the rest (a vocab whose tokenizer cannot run: NULL and a log
/// line). NULL or empty breakers are skipped with a warning, as
/// upstream; a NULL `vocab` with breakers is refused (upstream crashes).
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
    boundary!("llama_sampler_init_dry", null_mut(), {
        if !dry::Dry::enabled(dry_multiplier, dry_base, dry_penalty_last_n) {
            return empty("?dry");
        }
        let mut breakers = dry::Breakers::new();
        if !seq_breakers.is_null() && num_breakers > 0 {
            let mut texts = Vec::with_capacity(num_breakers);
            for i in 0..num_breakers {
                // SAFETY: the caller passes `num_breakers` string pointers.
                let p = unsafe { *seq_breakers.add(i) };
                if p.is_null() {
                    texts.push(Vec::new());
                } else {
                    // SAFETY: NUL-terminated per the contract.
                    texts.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes().to_vec());
                }
            }
            if texts.iter().any(|t| !t.is_empty()) {
                // SAFETY: NULL or a live vocab per the contract.
                let v = unsafe { FfiVocab::new(vocab) }?;
                breakers = dry::process_breakers(&v, &texts).map_err(FfiError::Invalid)?;
            } else {
                for i in 0..texts.len() {
                    crate::log_warn!("skipping null or empty DRY sequence breaker at index {i}");
                }
            }
        }
        boxed(dry::Dry::new(
            dry_multiplier,
            dry_base,
            dry_allowed_length,
            dry_penalty_last_n,
            breakers,
        ))
    })
}

/// Adaptive-p: selects tokens near a target probability adapted over time, with upstream's
/// random stream for `seed` (a negative target draws from the distribution unchanged).
#[no_mangle]
pub extern "C" fn llama_sampler_init_adaptive_p(
    target: f32,
    decay: f32,
    seed: u32,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_adaptive_p", null_mut(), {
        boxed(mirostat::AdaptiveP::new(target, decay, seed))
    })
}

/// Adds fixed biases to the logits of given tokens ("?logit-bias", a no-op, for
/// n_logit_bias <= 0). NULL `logit_bias` with a positive count: NULL and a log line.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_logit_bias(
    n_vocab: i32,
    n_logit_bias: i32,
    logit_bias: *const llama_logit_bias,
) -> *mut llama_sampler {
    let _ = n_vocab;
    boundary!("llama_sampler_init_logit_bias", null_mut(), {
        if n_logit_bias <= 0 {
            return empty("?logit-bias");
        }
        if logit_bias.is_null() {
            return Err(FfiError::Null("logit_bias"));
        }
        // SAFETY: the caller passes `n_logit_bias` entries.
        let biases = unsafe { std::slice::from_raw_parts(logit_bias, n_logit_bias as usize) };
        boxed(basic::LogitBias {
            biases: biases.iter().map(|b| (b.token, b.bias)).collect(),
        })
    })
}

/// The fill-in-the-middle sampler: prefers end-of-generation when text is unlikely, merges
/// tokens whose pieces are prefixes of each other, thresholds. Pieces are the tokenizer's
/// (`llama_token_to_piece` without special tokens). The model must
/// outlive the sampler, as upstream. NULL (and a log line) for a NULL or freed vocab.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_infill(
    vocab: *const llama_vocab,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_infill", null_mut(), {
        // SAFETY: NULL or a live vocab per the contract.
        let v = unsafe { FfiVocab::new(vocab) }?;
        boxed(infill::Infill::new(std::sync::Arc::new(v)))
    })
}
