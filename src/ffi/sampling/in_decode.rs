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
use std::ffi::c_void;

use super::super::sampled::{BackendSampling, SampledRow};
use super::super::types::*;
use super::super::FfiError;
use super::chain::*;
use super::registry::*;
use super::rust_iface::*;
use crate::sampling::backend::Row;

impl BackendSampling {
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
        self.samplers.insert(seq_id, smpl.cast::<c_void>());
        Ok(true)
    }

    /// Before a decode: upstream's limit of `n_outputs_max_per_seq` outputs for a sequence
    /// with a chain (Err: its log line, and the decode returns -1), then the start of each
    /// chain's sampling transaction. Chains freed while attached are detached with a log line.
    pub(crate) fn before_decode(&mut self, ctx: &crate::context::Context) -> Result<(), String> {
        self.samplers.retain(|&seq, &mut smpl| {
            let smpl = smpl.cast::<llama_sampler>();
            // SAFETY: checked against the registry before `chain_of` reads it.
            let alive = owner_of(smpl).is_some() && unsafe { chain_of(smpl) }.is_some();
            if !alive {
                crate::log_error!(
                    "llama_decode: the chain attached to seq_id = {seq} was freed; detached"
                );
            }
            alive
        });
        // a model without memory is encoded (upstream's decode calls encode): no sampling
        if self.samplers.is_empty() || ctx.memoryless {
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
            if let Some(chain) = unsafe { chain_of(smpl.cast::<llama_sampler>()) } {
                // SAFETY: a live chain of ours.
                unsafe { chain_backend_begin(chain) };
            }
        }
        Ok(())
    }

    /// After a successful decode: each output row of a sequence with a chain goes through the
    /// chain's backend prefix (rows in batch order, so each chain draws in its sequence's
    /// order); the results replace the last decode's. After an encode (a model without memory)
    /// the rows stay empty, as upstream's encode leaves its sampling buffers.
    pub(crate) fn after_decode(&mut self, ctx: &crate::context::Context) {
        if self.samplers.is_empty() {
            self.outputs = None;
            return;
        }
        let n_vocab = ctx.n_vocab();
        let e = ctx.engine();
        let n_outputs = e.n_outputs;
        let mut rows: Vec<Option<SampledRow>> = (0..n_outputs).map(|_| None).collect();
        if !ctx.memoryless && e.logits.len() >= n_outputs * n_vocab {
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
                let Some(chain) = (unsafe { chain_of(smpl.cast::<llama_sampler>()) }) else {
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
