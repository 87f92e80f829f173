//! Backend sampling's per-context state (the `llama_context` handle holds it): the chains
//! attached to sequences and the per-row results of the last decode, which
//! `llama_get_sampled_*_ith` read. Running the chains is `ffi::sampling::in_decode`'s.

use std::collections::BTreeMap;
use std::ffi::c_void;

use crate::sampling::backend::Row;

/// The results of one output row (upstream's sampling buffers, rows of n_vocab entries): the
/// arrays are padded to the vocabulary size, the counts say how much of each is set.
pub(crate) struct SampledRow {
    token: i32,
    logits: Vec<f32>,
    n_logits: u32,
    probs: Vec<f32>,
    n_probs: u32,
    candidates: Vec<i32>,
    n_candidates: u32,
}

impl SampledRow {
    pub(crate) fn new(row: Row, n_vocab: usize) -> Self {
        fn padded<T: Copy + Default>(v: Option<Vec<T>>, n_vocab: usize) -> (Vec<T>, u32) {
            let mut v = v.unwrap_or_default();
            let n = v.len() as u32;
            if n > 0 && v.len() < n_vocab {
                v.resize(n_vocab, T::default());
            }
            (v, n)
        }
        let (logits, n_logits) = padded(Some(row.logits), n_vocab);
        let (probs, n_probs) = padded(row.probs, n_vocab);
        let (candidates, n_candidates) = padded(row.candidates, n_vocab);
        SampledRow {
            token: row.sampled.unwrap_or(-1),
            logits,
            n_logits,
            probs,
            n_probs,
            candidates,
            n_candidates,
        }
    }

    pub(crate) fn token(&self) -> i32 {
        self.token
    }
    pub(crate) fn logits(&mut self) -> Option<(*mut f32, u32)> {
        (self.n_logits > 0).then(|| (self.logits.as_mut_ptr(), self.n_logits))
    }
    pub(crate) fn probs(&mut self) -> Option<(*mut f32, u32)> {
        (self.n_probs > 0).then(|| (self.probs.as_mut_ptr(), self.n_probs))
    }
    pub(crate) fn candidates(&mut self) -> Option<(*mut i32, u32)> {
        (self.n_candidates > 0).then(|| (self.candidates.as_mut_ptr(), self.n_candidates))
    }
    /// The kept logits, and the probabilities and candidate ids when set (each as long as its
    /// count).
    pub(crate) fn arrays(&self) -> (&[f32], Option<&[f32]>, Option<&[i32]>) {
        (
            &self.logits[..self.n_logits as usize],
            (self.n_probs > 0).then(|| &self.probs[..self.n_probs as usize]),
            (self.n_candidates > 0).then(|| &self.candidates[..self.n_candidates as usize]),
        )
    }
    pub(crate) fn n_logits(&self) -> u32 {
        self.n_logits
    }
    pub(crate) fn n_probs(&self) -> u32 {
        self.n_probs
    }
    pub(crate) fn n_candidates(&self) -> u32 {
        self.n_candidates
    }
}

/// What the getters find for one output index.
pub(crate) enum Lookup<'a> {
    /// The last decode ran without attached chains: upstream has no sampling buffers.
    NoBuffers,
    /// The index names no output row (why, in upstream's words).
    Invalid(String),
    /// The row: `None` when no chain sampled it (its sequence has none).
    Row(Option<&'a mut SampledRow>),
}

/// A context's attached chains and the results of its last decode.
pub(crate) struct BackendSampling {
    /// Sequence id -> attached chain (the caller's `struct llama_sampler *`, opaque here: this
    /// module sits below the sampler types).
    pub(crate) samplers: BTreeMap<i32, *mut c_void>,
    /// Upstream's `cparams.n_outputs_max_per_seq`.
    pub(crate) n_outputs_max_per_seq: u32,
    /// Per output row of the last decode, when chains were attached to it.
    pub(crate) outputs: Option<Vec<Option<SampledRow>>>,
}

impl BackendSampling {
    /// Upstream's resolution of `n_outputs_max` (0: n_batch) and `n_outputs_max_per_seq`
    /// (0: n_outputs_max; at most n_outputs_max) for a context of `n_batch`.
    pub(crate) fn new(n_batch: u32, n_outputs_max: u32, n_outputs_max_per_seq: u32) -> Self {
        let n_outputs_max = if n_outputs_max == 0 {
            n_batch
        } else {
            n_outputs_max
        };
        let per_seq = if n_outputs_max_per_seq == 0 {
            n_outputs_max
        } else {
            n_outputs_max_per_seq.min(n_outputs_max)
        };
        BackendSampling {
            samplers: BTreeMap::new(),
            n_outputs_max_per_seq: per_seq,
            outputs: None,
        }
    }

    /// Upstream's context constructor reserves its output buffers after attaching the chains
    /// of `llama_context_params.samplers`: with chains, the getters see empty buffers (no
    /// output rows yet) until the first decode.
    pub(crate) fn reserve_at_creation(&mut self) {
        self.outputs = (!self.samplers.is_empty()).then(Vec::new);
    }

    /// The row of output `row` (the getters resolve the index with the engine, as
    /// `llama_get_logits_ith` does).
    pub(crate) fn lookup(&mut self, row: Result<usize, String>) -> Lookup<'_> {
        let Some(outputs) = self.outputs.as_mut() else {
            return Lookup::NoBuffers;
        };
        match row {
            Err(why) => Lookup::Invalid(why),
            Ok(j) => Lookup::Row(outputs.get_mut(j).and_then(|r| r.as_mut())),
        }
    }
}

/// Upstream's `output_resolve_row`: the output row of batch index `i` (negative: from the
/// last output), or why there is none.
pub(crate) fn output_row(
    e: &crate::context::Engine,
    i: i32,
    none: bool,
    what: &str,
) -> Result<usize, String> {
    if none {
        return Err(what.to_string());
    }
    let n_outputs = e.n_outputs as i64;
    let j = if i < 0 {
        let j = n_outputs + i as i64;
        if j < 0 {
            return Err(format!("negative index out of range [0, {n_outputs})"));
        }
        j
    } else if i as usize >= e.output_ids.len() {
        return Err(format!("out of range [0, {})", e.output_ids.len()));
    } else {
        e.output_ids[i as usize] as i64
    };
    if j < 0 {
        return Err(format!("batch.logits[{i}] != true"));
    }
    if j >= n_outputs {
        return Err(format!(
            "corrupt output buffer (j={j}, n_outputs={n_outputs})"
        ));
    }
    Ok(j as usize)
}
