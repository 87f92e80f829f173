//! Backend sampling: chains attached to a context's sequences (`llama_set_sampler`,
//! `llama_context_params.samplers`) whose backend prefix runs on each of the sequence's output
//! rows right after the decode, as upstream's sampling graph does, with the results kept per
//! row for `llama_get_sampled_*`.
//!
//! Upstream attaches any non-empty chain and marks its longest prefix of samplers with a
//! backend form (`crate::sampling::backend`); the rest of the chain stays on the CPU, and the
//! chain's `apply` skips the prefix from then on. Here the prefix is made of our built-in
//! samplers only: a sampler the caller built (its own `iface`) or a chain nested in the chain
//! ends it, where upstream would call the caller's `backend_init` and build its ggml graph.

use std::collections::BTreeMap;

use super::super::types::*;
use super::super::FfiError;
use super::chain::*;
use super::registry::*;
use super::rust_iface::*;
use crate::sampling::backend::Row;

/// The results of one output row (upstream's sampling buffers, rows of n_vocab entries): the
/// arrays are padded to the vocabulary size, the counts say how much of each is set.
pub(crate) struct SampledRow {
    token: llama_token,
    logits: Vec<f32>,
    n_logits: u32,
    probs: Vec<f32>,
    n_probs: u32,
    candidates: Vec<llama_token>,
    n_candidates: u32,
}

impl SampledRow {
    fn new(row: Row, n_vocab: usize) -> Self {
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
            token: row.sampled.unwrap_or(LLAMA_TOKEN_NULL),
            logits,
            n_logits,
            probs,
            n_probs,
            candidates,
            n_candidates,
        }
    }

    pub(crate) fn token(&self) -> llama_token {
        self.token
    }
    pub(crate) fn logits(&mut self) -> Option<(*mut f32, u32)> {
        (self.n_logits > 0).then(|| (self.logits.as_mut_ptr(), self.n_logits))
    }
    pub(crate) fn probs(&mut self) -> Option<(*mut f32, u32)> {
        (self.n_probs > 0).then(|| (self.probs.as_mut_ptr(), self.n_probs))
    }
    pub(crate) fn candidates(&mut self) -> Option<(*mut llama_token, u32)> {
        (self.n_candidates > 0).then(|| (self.candidates.as_mut_ptr(), self.n_candidates))
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
    /// Sequence id -> attached chain (the caller's; it must outlive the attachment).
    samplers: BTreeMap<llama_seq_id, *mut llama_sampler>,
    /// Upstream's `cparams.n_outputs_max_per_seq`.
    n_outputs_max_per_seq: u32,
    /// Per output row of the last decode, when chains were attached to it.
    outputs: Option<Vec<Option<SampledRow>>>,
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

    /// `llama_set_sampler`: attaches `smpl` to sequence `seq_id` (NULL detaches). True when
    /// attached or detached; false with upstream's warning for a sampler that is not a
    /// non-empty chain of this library (the sequence then has none).
    ///
    /// # Safety
    /// `smpl` must be NULL or a sampler handle (checked against the registry before use).
    pub(crate) unsafe fn attach(
        &mut self,
        seq_id: llama_seq_id,
        smpl: *mut llama_sampler,
        n_seq_max: u32,
    ) -> Result<bool, FfiError> {
        if smpl.is_null() {
            self.samplers.remove(&seq_id);
            return Ok(true);
        }
        let chain = if owner_of(smpl).is_some() {
            // SAFETY: live per the registry.
            unsafe { chain_of(smpl) }
        } else {
            None
        };
        let Some(chain) = chain.filter(|c| !c.samplers.is_empty()) else {
            // SAFETY: a sampler handle per the contract.
            unsafe { super::sample::not_offloaded(seq_id, smpl) };
            self.samplers.remove(&seq_id);
            return Ok(false);
        };
        if chain.is_init {
            return Err(FfiError::Invalid(format!(
                "the chain for seq_id = {seq_id} was already attached to a context (upstream \
                 aborts); not attached: attach a new chain (llama_sampler_chain_init or \
                 llama_sampler_clone)"
            )));
        }
        if seq_id < 0 || seq_id as u32 >= n_seq_max {
            // upstream accepts any id; such a chain never sees an output
            crate::log_warn!(
                "llama_set_sampler: seq_id = {seq_id} is outside [0, {n_seq_max}): the chain \
                 is attached but no batch can reach it"
            );
        }
        // SAFETY: a live chain of ours.
        unsafe { chain_backend_init(chain, self.n_outputs_max_per_seq) };
        self.samplers.insert(seq_id, smpl);
        Ok(true)
    }

    /// Upstream's context constructor reserves its output buffers after attaching the chains
    /// of `llama_context_params.samplers`: with chains, the getters see empty buffers (no
    /// output rows yet) until the first decode.
    pub(crate) fn reserve_at_creation(&mut self) {
        self.outputs = (!self.samplers.is_empty()).then(Vec::new);
    }

    /// Before a decode: upstream's limit of `n_outputs_max_per_seq` outputs for a sequence
    /// with a chain (Err: its log line, and the decode returns -1), then the start of each
    /// chain's sampling transaction. Chains freed while attached are detached with a log line.
    pub(crate) fn before_decode(&mut self, ctx: &crate::context::Context) -> Result<(), String> {
        self.samplers.retain(|&seq, &mut smpl| {
            // SAFETY: checked against the registry before `chain_of` reads it.
            let alive = owner_of(smpl).is_some() && unsafe { chain_of(smpl) }.is_some();
            if !alive {
                crate::log_error!(
                    "llama_decode: the chain attached to seq_id = {seq} was freed; detached"
                );
            }
            alive
        });
        if self.samplers.is_empty() {
            return Ok(());
        }
        {
            let e = ctx.engine();
            let raw = &e.raw;
            let n = raw.tokens.len();
            let output_all = e.cparams.embeddings;
            let mut counts: BTreeMap<llama_seq_id, u32> = BTreeMap::new();
            let mut flat = 0;
            for i in 0..n {
                let ids: &[i32] = if raw.has_seq {
                    let k = raw.seq_n.get(i).copied().unwrap_or(0);
                    let ids = raw.seq_flat.get(flat..flat + k).unwrap_or(&[]);
                    flat += k;
                    ids
                } else {
                    &[0]
                };
                let output = output_all
                    || if raw.has_output {
                        raw.output.get(i).copied().unwrap_or(false)
                    } else {
                        i + 1 == n
                    };
                if !output {
                    continue;
                }
                let mut seen: Vec<i32> = ids.to_vec();
                seen.sort_unstable();
                seen.dedup();
                for seq in seen {
                    let c = counts.entry(seq).or_insert(0);
                    *c += 1;
                    if self.samplers.contains_key(&seq) && *c > self.n_outputs_max_per_seq {
                        return Err(format!(
                            "decode: backend sampling supports at most {} outputs per sequence \
                             (seq_id {seq} had {c})",
                            self.n_outputs_max_per_seq
                        ));
                    }
                }
            }
        }
        for &smpl in self.samplers.values() {
            // SAFETY: live chains (checked above).
            if let Some(chain) = unsafe { chain_of(smpl) } {
                // SAFETY: a live chain of ours.
                unsafe { chain_backend_begin(chain) };
            }
        }
        Ok(())
    }

    /// After a successful decode: each output row of a sequence with a chain goes through the
    /// chain's backend prefix (rows in batch order, so each chain draws in its sequence's
    /// order); the results replace the last decode's.
    pub(crate) fn after_decode(&mut self, ctx: &crate::context::Context) {
        if self.samplers.is_empty() {
            self.outputs = None;
            return;
        }
        let n_vocab = ctx.n_vocab();
        let e = ctx.engine();
        let n_outputs = e.n_outputs;
        let mut rows: Vec<Option<SampledRow>> = (0..n_outputs).map(|_| None).collect();
        if e.logits.len() >= n_outputs * n_vocab {
            let raw = &e.raw;
            let mut flat = 0;
            for i in 0..raw.tokens.len() {
                // the token's sequences are a set upstream: the first is the smallest
                let seq = if raw.has_seq {
                    let k = raw.seq_n.get(i).copied().unwrap_or(0);
                    let ids = raw.seq_flat.get(flat..flat + k).unwrap_or(&[]);
                    flat += k;
                    ids.iter().copied().min()
                } else {
                    Some(0)
                };
                let Some(j) = e.output_ids.get(i).and_then(|&j| usize::try_from(j).ok()) else {
                    continue;
                };
                let Some(&smpl) = seq.and_then(|s| self.samplers.get(&s)) else {
                    continue;
                };
                if j >= n_outputs {
                    continue;
                }
                // SAFETY: live chains (checked before the decode; the caller's thread is here).
                let Some(chain) = (unsafe { chain_of(smpl) }) else {
                    continue;
                };
                let mut row = Row::new(e.logits[j * n_vocab..(j + 1) * n_vocab].to_vec());
                // SAFETY: a live chain of ours.
                unsafe { chain_backend_apply(chain, &mut row) };
                rows[j] = Some(SampledRow::new(row, n_vocab));
            }
        }
        self.outputs = Some(rows);
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

/// Upstream's `llama_sampler_chain_backend_init`: marks the longest prefix of samplers with a
/// backend form that accept `n_outputs_max_per_seq`; they show "+name" (or "-name" for the
/// one that refused) in `llama_sampler_name`.
///
/// # Safety
/// `chain` must be a live chain, owning live samplers.
unsafe fn chain_backend_init(chain: &mut Chain, n_outputs_max_per_seq: u32) {
    chain.is_init = true;
    let mut prefix = true;
    for (i, &s) in chain.samplers.iter().enumerate() {
        if prefix {
            // SAFETY: the chain's samplers are live.
            prefix = match unsafe { rust_sampler(s) } {
                Some(rs) => match rs.inner.backend_init(n_outputs_max_per_seq) {
                    Some(ok) => {
                        rs.backend = Some(ok);
                        ok
                    }
                    None => false,
                },
                // the caller's own samplers and nested chains stay on the CPU
                None => false,
            };
        }
        chain.is_backend[i] = prefix;
    }
}

/// The start of a decode for the chain's backend prefix (dist's transactional generator).
///
/// # Safety
/// As [`chain_backend_init`].
unsafe fn chain_backend_begin(chain: &mut Chain) {
    for (&s, _) in chain
        .samplers
        .iter()
        .zip(&chain.is_backend)
        .take_while(|(_, &b)| b)
    {
        // SAFETY: the chain's samplers are live.
        if let Some(rs) = unsafe { rust_sampler(s) } {
            rs.inner.backend_begin();
        }
    }
}

/// Runs the chain's backend prefix on one output row.
///
/// # Safety
/// As [`chain_backend_init`].
unsafe fn chain_backend_apply(chain: &mut Chain, row: &mut Row) {
    for (&s, _) in chain
        .samplers
        .iter()
        .zip(&chain.is_backend)
        .take_while(|(_, &b)| b)
    {
        // SAFETY: the chain's samplers are live.
        if let Some(rs) = unsafe { rust_sampler(s) } {
            rs.inner.backend_apply(row);
        }
    }
}
