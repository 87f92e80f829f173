//! Micro-batch splitting, as upstream's `llama_batch_allocr`: `split_simple` (consecutive
//! tokens, for a unified KV cache) and `split_equal` in its sequential form (for one KV
//! stream per sequence: each micro-batch takes the same number of tokens from each of a run
//! of consecutive sequence ids, and they go to the streams of those sequences).

use super::batch::Batch;
use crate::kv_cache::MAX_SEQ;

/// One micro-batch: `idx[start..end]` are its tokens (indices into the batch), in `n_seqs`
/// equal groups of consecutive entries, one per sequence (1 for a simple split).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ubatch {
    pub start: usize,
    pub end: usize,
    pub n_seqs: usize,
}

impl Ubatch {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The micro-batches of one batch (buffers reused between decodes).
#[derive(Default, Debug)]
pub struct Split {
    pub idx: Vec<usize>,
    pub ubatches: Vec<Ubatch>,
    used: Vec<bool>,
    /// Per sequence id, its tokens in batch order.
    per_seq: Vec<Vec<usize>>,
    cur: Vec<usize>,
    seqs: Vec<usize>,
}

/// Why a batch cannot be split (the text is upstream's log line).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SplitError(pub String);

impl Split {
    /// Upstream's `split_simple` until the batch is used up: runs of `n_ubatch` tokens.
    pub fn simple(&mut self, n_tokens: usize, n_ubatch: usize) {
        self.idx.clear();
        self.ubatches.clear();
        self.idx.extend(0..n_tokens);
        let mut start = 0;
        while start < n_tokens {
            let end = (start + n_ubatch).min(n_tokens);
            self.ubatches.push(Ubatch {
                start,
                end,
                n_seqs: 1,
            });
            start = end;
        }
    }

    /// Upstream's `split_equal(n_ubatch, sequential = true)` until the batch is used up. Each
    /// micro-batch takes, from the first unused token on, the sequences whose ids follow each
    /// other (s, s+1, ...), then one token of each in turn while every one has tokens left
    /// and the micro-batch stays within `n_ubatch` (at least one token each, as upstream).
    /// A token in several sequences cannot go to one stream: refused, as upstream.
    pub fn equal(&mut self, b: &Batch, n_ubatch: usize) -> Result<(), SplitError> {
        self.idx.clear();
        self.ubatches.clear();
        let n = b.tokens.len();
        if b.seqs.iter().any(|s| s.count() > 1) {
            return Err(SplitError(
                "split_equal: sequential split is not supported when there are coupled sequences in the input batch (you may need to use the -kvu flag)".into(),
            ));
        }
        self.per_seq.resize_with(MAX_SEQ, Vec::new);
        for v in &mut self.per_seq {
            v.clear();
        }
        for (i, &s) in b.seq0.iter().enumerate() {
            self.per_seq[s].push(i);
        }
        self.used.clear();
        self.used.resize(n, false);
        self.cur.clear();
        self.cur.resize(MAX_SEQ, 0);
        let mut n_used = 0;
        while n_used < n {
            // the sequences of this micro-batch: consecutive ids from the first unused token
            self.seqs.clear();
            let mut last: Option<usize> = None;
            for i in 0..n {
                if self.used[i] {
                    continue;
                }
                let s = b.seq0[i];
                if self.seqs.contains(&s) {
                    continue;
                }
                if last.is_some_and(|l| s != l + 1) {
                    continue;
                }
                self.seqs.push(s);
                last = Some(s);
                if self.seqs.len() > n_ubatch {
                    break;
                }
            }
            let n_seqs = self.seqs.len();
            let start = self.idx.len();
            let mut per_seq_taken = 0;
            loop {
                let can_expand = self
                    .seqs
                    .iter()
                    .all(|&s| self.cur[s] < self.per_seq[s].len());
                if !can_expand {
                    break;
                }
                for &s in &self.seqs {
                    let i = self.per_seq[s][self.cur[s]];
                    self.used[i] = true;
                    self.cur[s] += 1;
                    n_used += 1;
                }
                per_seq_taken += 1;
                if (per_seq_taken + 1) * n_seqs > n_ubatch {
                    break;
                }
            }
            // concatenated per sequence
            for &s in &self.seqs {
                let end = self.cur[s];
                self.idx
                    .extend_from_slice(&self.per_seq[s][end - per_seq_taken..end]);
            }
            self.ubatches.push(Ubatch {
                start,
                end: self.idx.len(),
                n_seqs,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::SeqSet;

    fn batch(seqs: &[usize]) -> Batch {
        let mut b = Batch::default();
        for (i, &s) in seqs.iter().enumerate() {
            b.tokens.push(i as i32);
            b.pos.push(i as i32);
            b.seqs.push(SeqSet::single(s));
            b.seq0.push(s);
            b.output.push(true);
        }
        b
    }

    fn groups(sp: &Split) -> Vec<(Vec<usize>, usize)> {
        sp.ubatches
            .iter()
            .map(|u| (sp.idx[u.start..u.end].to_vec(), u.n_seqs))
            .collect()
    }

    #[test]
    fn equal_split_takes_the_same_count_from_consecutive_sequences() {
        let mut sp = Split::default();
        // two sequences of 3 and 1 tokens, interleaved
        sp.equal(&batch(&[0, 1, 0, 0]), 512).unwrap();
        assert_eq!(groups(&sp), vec![(vec![0, 1], 2), (vec![2, 3], 1)]);
        // n_ubatch bounds the tokens per sequence: (k + 1) * n_seqs > n_ubatch stops
        sp.equal(&batch(&[0, 0, 0, 1, 1, 1]), 5).unwrap();
        assert_eq!(groups(&sp), vec![(vec![0, 1, 3, 4], 2), (vec![2, 5], 2)]);
        // ids must follow each other: 2 then 0 go to separate micro-batches
        sp.equal(&batch(&[2, 0, 1, 2]), 512).unwrap();
        assert_eq!(groups(&sp), vec![(vec![0, 3], 1), (vec![1, 2], 2)]);
        // at least one token per sequence even past n_ubatch, as upstream
        sp.equal(&batch(&[0, 1]), 1).unwrap();
        assert_eq!(groups(&sp), vec![(vec![0, 1], 2)]);
    }

    #[test]
    fn coupled_sequences_cannot_be_split_by_stream() {
        let mut b = batch(&[0, 1]);
        b.seqs[0].set(1);
        assert!(Split::default().equal(&b, 512).is_err());
    }

    #[test]
    fn simple_split_is_consecutive_runs() {
        let mut sp = Split::default();
        sp.simple(7, 3);
        assert_eq!(
            groups(&sp),
            vec![(vec![0, 1, 2], 1), (vec![3, 4, 5], 1), (vec![6], 1)]
        );
    }
}
