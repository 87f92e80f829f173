//! Batch intake: a caller's batch (as `llama_batch` carries it: optional positions, sequence
//! ids and output flags) is checked and completed as upstream's `llama_batch_compat` and
//! `llama_batch_allocr::init` do, into a [`Batch`] the decode driver splits into
//! micro-batches. Every refusal logs upstream's line and makes decode return -1.

use crate::kv_cache::{KvCache, SeqSet, MAX_SEQ};

/// A batch as the caller gave it (copied out of C memory into reused buffers). A `has_*`
/// flag is false when the field was NULL.
#[derive(Default, Debug)]
pub struct RawBatch {
    pub tokens: Vec<i32>,
    /// Input embeddings (n_tokens × n_embd) when the batch has no token ids.
    pub has_embd: bool,
    pub embd: Vec<f32>,
    pub has_pos: bool,
    pub pos: Vec<i32>,
    /// Every token is in sequence 0 when false.
    pub has_seq: bool,
    /// Sequence ids of all tokens, concatenated; `seq_n[i]` of them for token i.
    pub seq_flat: Vec<i32>,
    pub seq_n: Vec<usize>,
    pub has_output: bool,
    pub output: Vec<bool>,
}

impl RawBatch {
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.has_embd = false;
        self.embd.clear();
        self.has_pos = false;
        self.pos.clear();
        self.has_seq = false;
        self.seq_flat.clear();
        self.seq_n.clear();
        self.has_output = false;
        self.output.clear();
    }
}

/// A validated batch.
#[derive(Default, Debug)]
pub struct Batch {
    pub tokens: Vec<i32>,
    pub pos: Vec<i32>,
    pub seqs: Vec<SeqSet>,
    /// First sequence id of each token.
    pub seq0: Vec<usize>,
    pub output: Vec<bool>,
    pub n_outputs: usize,
    /// Buffers of the consistency checks, reused between decodes.
    check: CheckScratch,
}

#[derive(Default, Debug)]
struct CheckScratch {
    min: Vec<i32>,
    max: Vec<i32>,
    positions: Vec<Vec<i32>>,
    coupled: Vec<(usize, usize)>,
    cur_set: Vec<SeqSet>,
    cur_pos: Vec<i32>,
}

/// Why a batch was refused (the text is upstream's log line).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BatchError(pub String);

fn err<T>(s: String) -> Result<T, BatchError> {
    Err(BatchError(s))
}

/// Checks `raw` against the vocabulary size, `n_seq_max` and the memory, fills in automatic
/// positions and default sequence/outputs, and writes the result into `out`.
/// `multi_pos`: the model rotates by multi-section positions (M-RoPE, upstream's
/// `n_pos_per_embd() > 1`): a sequence's positions may jump forward.
#[allow(clippy::too_many_arguments)]
pub fn validate(
    raw: &RawBatch,
    n_vocab: i32,
    n_seq_max: u32,
    output_all: bool,
    mem: &KvCache,
    multi_pos: bool,
    out: &mut Batch,
) -> Result<(), BatchError> {
    let n = raw.tokens.len();
    out.tokens.clear();
    out.pos.clear();
    out.seqs.clear();
    out.seq0.clear();
    out.output.clear();
    if n == 0 {
        return err("decode: n_tokens == 0".into());
    }
    // sequence ids (checked before positions: automatic positions index by them)
    let mut at = 0;
    for i in 0..n {
        let ids: &[i32] = if raw.has_seq {
            let k = raw.seq_n[i];
            at += k;
            &raw.seq_flat[at - k..at]
        } else {
            &[0]
        };
        if ids.is_empty() {
            return err(format!(
                "init: token {i} has no sequence id (n_seq_id[{i}] = 0)"
            ));
        }
        let mut set = SeqSet::default();
        for (s, &id) in ids.iter().enumerate() {
            if id < 0 || id >= n_seq_max as i32 {
                return err(format!(
                    "init: invalid seq_id[{i}][{s}] = {id} >= {n_seq_max}"
                ));
            }
            set.set(id as usize);
        }
        out.seqs.push(set);
        out.seq0.push(ids[0] as usize);
    }
    for (i, &id) in raw.tokens.iter().enumerate() {
        // an embeddings batch has no token ids to check (placeholders here)
        if !raw.has_embd && (id < 0 || id >= n_vocab) {
            return err(format!("init: invalid token[{i}] = {id}"));
        }
        out.tokens.push(id);
    }
    match raw.has_pos {
        true => out.pos.extend_from_slice(&raw.pos),
        false => {
            // continue each token's first sequence from the memory
            let mut next = [i32::MIN; MAX_SEQ];
            for i in 0..n {
                let s = out.seq0[i];
                if next[s] == i32::MIN {
                    next[s] = mem.seq_pos_max(s) + 1;
                }
                out.pos.push(next[s]);
                next[s] += 1;
            }
        }
    }
    out.n_outputs = 0;
    for i in 0..n {
        let o = if raw.has_output {
            raw.output[i]
        } else {
            i == n - 1
        };
        out.output.push(o);
    }
    if output_all && out.output.iter().any(|&o| !o) {
        crate::log_warn!(
            "init: embeddings required but some input tokens were not marked as outputs -> overriding"
        );
        out.output.fill(true);
    }
    out.n_outputs = out.output.iter().filter(|&&o| o).count();
    let mut scratch = std::mem::take(&mut out.check);
    let result = check_positions(
        out,
        n_seq_max,
        mem,
        multi_pos && !raw.has_embd,
        multi_pos,
        &mut scratch,
    );
    out.check = scratch;
    result
}

/// Upstream's consistency checks: each sequence continues its memory, its positions in the
/// batch are continuous and non-decreasing, coupled sequences agree, and no token's set of
/// sequences is incompatible with an earlier one.
fn check_positions(
    b: &Batch,
    n_seq_max: u32,
    mem: &KvCache,
    multi_pos_tokens: bool,
    multi_pos: bool,
    sc: &mut CheckScratch,
) -> Result<(), BatchError> {
    let n_seq = n_seq_max as usize;
    // per sequence: min, max, count of distinct positions in the batch
    sc.min.clear();
    sc.min.resize(n_seq, i32::MAX);
    sc.max.clear();
    sc.max.resize(n_seq, i32::MIN);
    sc.positions.resize(n_seq, Vec::new());
    for p in &mut sc.positions {
        p.clear();
    }
    sc.coupled.clear();
    let (min, max, positions, coupled) =
        (&mut sc.min, &mut sc.max, &mut sc.positions, &mut sc.coupled);
    for i in 0..b.tokens.len() {
        let s0 = b.seq0[i];
        for s in b.seqs[i].iter() {
            min[s] = min[s].min(b.pos[i]);
            max[s] = max[s].max(b.pos[i]);
            positions[s].push(b.pos[i]);
            if s != s0 {
                coupled.push((s, s0));
            }
        }
    }
    for s in 0..n_seq {
        if positions[s].is_empty() {
            continue;
        }
        let p0 = mem.seq_pos_max(s);
        if multi_pos {
            // M-RoPE: positions may jump forward (embeddings may also overlap the last)
            let behind = if multi_pos_tokens {
                p0 >= min[s]
            } else {
                p0 > min[s]
            };
            if p0 >= 0 && behind {
                return err(format!(
                    "init: the tokens of sequence {s} in the input batch have inconsistent sequence positions:\n \
                     - the last position stored in the memory module of the context (i.e. the KV cache) for sequence {s} is X = {p0}\n \
                     - the tokens for sequence {s} in the input batch have a starting position of Y = {}\n \
                     for M-RoPE, it is required that the position satisfies: X {} Y",
                    min[s],
                    if multi_pos_tokens { "<" } else { "<=" }
                ));
            }
            continue;
        }
        if p0 >= 0 && min[s] != p0 + 1 {
            return err(format!(
                "init: the tokens of sequence {s} in the input batch have inconsistent sequence positions:\n \
                 - the last position stored in the memory module of the context (i.e. the KV cache) for sequence {s} is X = {p0}\n \
                 - the tokens for sequence {s} in the input batch have a starting position of Y = {}\n \
                 it is required that the sequence positions remain consecutive: Y = X + 1",
                min[s]
            ));
        }
        let p = &mut positions[s];
        p.sort_unstable();
        p.dedup();
        if (max[s] as i64 - min[s] as i64 + 1) > p.len() as i64 {
            return err(format!("init: sequence {s} positions are not continuous"));
        }
    }
    for &(s0, s1) in coupled.iter() {
        if mem.seq_pos_min(s0) != mem.seq_pos_min(s1) || mem.seq_pos_max(s0) != mem.seq_pos_max(s1)
        {
            return err(format!(
                "init: sequence {s0} is coupled to {s1} in the input batch, but have divereged"
            ));
        }
    }
    let mut all = SeqSet::default();
    for s in 0..MAX_SEQ {
        all.set(s);
    }
    sc.cur_set.clear();
    sc.cur_set.resize(n_seq, all);
    sc.cur_pos.clear();
    sc.cur_pos.resize(n_seq, -1);
    let (cur_set, cur_pos) = (&mut sc.cur_set, &mut sc.cur_pos);
    for i in 0..b.tokens.len() {
        for s in b.seqs[i].iter() {
            cur_set[s] = cur_set[s].and(&b.seqs[i]);
            if cur_set[s].none() {
                return err(format!(
                    "init: sequence {s} belongs to incompatible sequence sets (not allowed)"
                ));
            }
            if b.pos[i] < cur_pos[s] {
                return err(format!(
                    "init: sequence {s} positions are decreasing (not allowed)"
                ));
            }
            cur_pos[s] = b.pos[i];
        }
    }
    Ok(())
}
