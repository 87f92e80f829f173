//! GLM5-Next's k-pool indexer: the pooled key of one pool of cells.

use crate::kernels::cpu::dispatch;

/// The pooled key of one pool (upstream's `build_kpool_select`) into `out` (`head` values):
/// `members` are the pool's cached rows `[key | gate | ..]` (`head` values each part), and
/// per value `d` the softmax over the members of `gate[d] + ape[k * head + d]` weights their
/// `key[d]`, with ggml's arithmetic: SOFT_MAX (the AVX2 build's exp, the sum in f64, times
/// 1/sum), MUL, SUM_ROWS (in f64). `logits` is scratch.
pub fn kpool_pooled(
    members: &[&[f32]],
    ape: &[f32],
    head: usize,
    logits: &mut Vec<f32>,
    out: &mut [f32],
) {
    logits.resize(members.len(), 0.0);
    for (d, o) in out.iter_mut().enumerate().take(head) {
        let mut max = f32::NEG_INFINITY;
        for (k, (l, m)) in logits.iter_mut().zip(members).enumerate() {
            *l = m[head + d] + ape[k * head + d];
            max = max.max(*l);
        }
        let inv = (1.0 / dispatch::soft_max(logits, max)) as f32;
        let mut acc = 0.0f64;
        for (l, m) in logits.iter().zip(members) {
            acc += f64::from(*l * inv * m[d]);
        }
        *o = acc as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal gates weigh the members equally: four copies of one row pool to its key exactly
    /// (upstream's pooling of a micro-batch that completes no pool); a dominant gate picks
    /// its member's key.
    #[test]
    fn pooled_key_weights_members_by_gate() {
        let head = 3;
        let row = [1.5f32, -2.0, 0.25, 0.0, 0.0, 0.0];
        let ape = vec![0.0f32; 4 * head];
        let mut out = [0.0f32; 3];
        let mut scratch = Vec::new();
        kpool_pooled(&[&row[..]; 4], &ape, head, &mut scratch, &mut out);
        assert_eq!(out, [1.5, -2.0, 0.25]);
        let a = [1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0];
        let b = [7.0f32, 8.0, 9.0, 100.0, 100.0, 100.0];
        kpool_pooled(&[&a[..], &b[..]], &ape, head, &mut scratch, &mut out);
        assert_eq!(out, [7.0, 8.0, 9.0]);
    }
}
