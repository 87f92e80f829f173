//! Backend sampling: the forms samplers take inside upstream's decode graph
//! (`backend_apply` in src/llama-sampler.cpp), computed here on one output row with ggml's
//! CPU arithmetic and ggml's own quirks, so a chain attached with `llama_set_sampler` gives
//! upstream's tokens, probabilities, logits and candidate ids.
//!
//! A row starts as the output's full logits. Each sampler of a chain's backend prefix rewrites
//! it as upstream's graph does: filters keep the logits shorter (top-k, temp <= 0, with the
//! `candidates` naming the token ids) or mask them with -inf in place (top-p sorts them first,
//! min-p keeps the order), dist adds the probabilities and the sampled token. Upstream's
//! oddities are kept on purpose, because a program sees them: ggml's top-k swaps its first two
//! results ("the order is not important"); greedy's argmax takes the *last* of equal maxima
//! and is not mapped through the candidates (after top-k it answers a position, not a token
//! id); logit-bias indexes the current row by token id, also without the candidates; top-p
//! ignores `min_keep`; min-p keeps only logits strictly above its threshold.

use std::collections::HashMap;

use crate::cpp;

/// One output row as upstream's sampling graph carries it through a chain (its
/// `llama_sampler_data`): logits always, the rest once a sampler produces them.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub logits: Vec<f32>,
    pub probs: Option<Vec<f32>>,
    pub sampled: Option<i32>,
    /// The token ids of `logits` (absent: position i is token i).
    pub candidates: Option<Vec<i32>>,
}

impl Row {
    pub fn new(logits: Vec<f32>) -> Self {
        Row {
            logits,
            probs: None,
            sampled: None,
            candidates: None,
        }
    }

    /// The candidates at `idx` (ggml_get_rows on the candidates), or `idx` itself.
    fn candidates_at(&self, idx: &[i32]) -> Vec<i32> {
        match &self.candidates {
            Some(c) => idx.iter().map(|&i| c[i as usize]).collect(),
            None => idx.to_vec(),
        }
    }
}

/// ggml's `argmax` (ggml_vec_argmax_f32): the last index of the running maximum.
fn argmax(x: &[f32]) -> usize {
    let mut max = f32::NEG_INFINITY;
    let mut idx = 0;
    for (i, &v) in x.iter().enumerate() {
        max = if max > v { max } else { v };
        if max == v {
            idx = i;
        }
    }
    idx
}

/// ggml's `soft_max` on one row: exp(x - max), summed in f64, scaled by the f32 reciprocal.
fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    let mut y: Vec<f32> = x.iter().map(|&v| (v - max).exp()).collect();
    let sum: f64 = y.iter().map(|&v| v as f64).sum();
    let scale = (1.0 / sum) as f32;
    for v in &mut y {
        *v *= scale;
    }
    y
}

/// ggml's `cumsum`: a running f32 sum.
fn cumsum(x: &[f32]) -> Vec<f32> {
    let mut acc = 0.0f32;
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            acc = if i == 0 { v } else { acc + v };
            acc
        })
        .collect()
}

/// ggml's `sum` of a mask of ones and zeros, as the f32 it stores.
fn sum_f32(x: &[f32]) -> f32 {
    x.iter().map(|&v| v as f64).sum::<f64>() as f32
}

/// ggml's `step`: 1 where x > 0, else 0.
fn step(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else {
        0.0
    }
}

/// Greedy: the sampled "token" is ggml's argmax position in the current row.
pub fn greedy(row: &mut Row) {
    row.sampled = Some(argmax(&row.logits) as i32);
}

/// Dist with the uniform `u` (upstream draws it in f64 and casts it to f32): the probabilities
/// are the row's softmax; the sampled position is the first whose cumulative sum exceeds `u`
/// (the last when none does), mapped through the candidates.
pub fn dist(row: &mut Row, u: f32) {
    let n = row.logits.len();
    if n == 0 {
        return;
    }
    let probs = softmax(&row.logits);
    let mask: Vec<f32> = cumsum(&probs).iter().map(|&c| step(c - u)).collect();
    let idxf = cpp::clamp_f32(sum_f32(&mask), 1.0, n as f32);
    let idx = cpp::f32_to_int(idxf * -1.0 + n as f32);
    row.sampled = Some(row.candidates_at(&[idx])[0]);
    row.probs = Some(probs);
}

/// Top-k: ggml's `top_k` (std::partial_sort by descending logit, then the first two results
/// swapped), the logits and candidates gathered in that order. `k` beyond the row keeps the
/// whole row (upstream's graph asserts).
pub fn top_k(row: &mut Row, k: i32) {
    let n = row.logits.len();
    let k = (k.max(0) as usize).min(n);
    let mut idx: Vec<i32> = (0..n as i32).collect();
    let logits = &row.logits;
    cpp::partial_sort(&mut idx, k, &|a: &i32, b: &i32| {
        logits[*a as usize] > logits[*b as usize]
    });
    idx.truncate(k);
    if k > 1 {
        idx.swap(0, 1);
    }
    row.candidates = Some(row.candidates_at(&idx));
    row.logits = idx.iter().map(|&i| logits[i as usize]).collect();
}

/// Top-p: the row sorted by descending logit (std::sort), its softmax's cumulative sum; logits
/// past the first position where the sum reaches `p` become -inf (the row keeps its length).
pub fn top_p(row: &mut Row, p: f32) {
    let n = row.logits.len();
    if n == 0 {
        return;
    }
    let mut idx: Vec<i32> = (0..n as i32).collect();
    let logits = &row.logits;
    cpp::sort(&mut idx, &|a: &i32, b: &i32| {
        logits[*a as usize] > logits[*b as usize]
    });
    let sorted: Vec<f32> = idx.iter().map(|&i| logits[i as usize]).collect();
    let cdf = cumsum(&softmax(&sorted));
    let mut mask: Vec<f32> = cdf.iter().map(|&c| step(c * -1.0 + p)).collect();
    let last = cpp::clamp_f32(sum_f32(&mask), 0.0, (n - 1) as f32);
    mask[cpp::f32_to_int(last) as usize] = 1.0;
    row.candidates = Some(row.candidates_at(&idx));
    row.logits = sorted
        .iter()
        .zip(&mask)
        .map(|(&l, &m)| l + m.ln())
        .collect();
}

/// Min-p: logits not strictly above max + ln(p) become -inf, in place.
pub fn min_p(row: &mut Row, p: f32) {
    if row.logits.is_empty() {
        return;
    }
    let threshold = row.logits[argmax(&row.logits)] + p.ln();
    for l in &mut row.logits {
        *l += step(*l - threshold).ln();
    }
}

/// Temperature: t <= 0 keeps only ggml's argmax (one logit, with its candidate); otherwise the
/// logits times 1/t.
pub fn temp(row: &mut Row, t: f32) {
    if t <= 0.0 {
        if row.logits.is_empty() {
            return;
        }
        let i = argmax(&row.logits);
        row.candidates = Some(row.candidates_at(&[i as i32]));
        row.logits = vec![row.logits[i]];
        return;
    }
    let s = 1.0 / t;
    for l in &mut row.logits {
        *l *= s;
    }
}

/// Dynamic temperature from the entropy of the row's softmax (probabilities clamped to
/// [1e-10, 1]); plain [`temp`] when `delta` or `t` is not positive.
pub fn temp_ext(row: &mut Row, t: f32, delta: f32, exponent: f32) {
    if delta <= 0.0 || t <= 0.0 {
        temp(row, t);
        return;
    }
    let min_temp = (t - delta).max(0.0);
    let max_temp = t + delta;
    let max_entropy = (row.logits.len() as f32).ln();
    let p_log_p: Vec<f32> = softmax(&row.logits)
        .iter()
        .map(|&p| {
            let p = cpp::clamp_f32(p, 1e-10, 1.0);
            p * p.ln()
        })
        .collect();
    let entropy = sum_f32(&p_log_p) * -1.0;
    let norm_entropy = entropy * (1.0 / max_entropy);
    let pow_entropy = (norm_entropy.ln() * exponent).exp();
    let dyn_temp = pow_entropy * (max_temp - min_temp) + min_temp;
    for l in &mut row.logits {
        *l /= dyn_temp;
    }
}

/// Penalties on the tokens of `counts` (token id -> occurrences among the last accepted):
/// each counted logit times 1/repeat when positive, else times repeat, then minus
/// count × freq and minus present.
pub fn penalties(row: &mut Row, counts: &HashMap<i32, i32>, repeat: f32, freq: f32, present: f32) {
    let penalize = |l: f32, count: i32| {
        let active = step(count as f32);
        let mut x = l;
        if repeat != 1.0 {
            let pos = step(x);
            let scale = pos * (1.0 / repeat) + (1.0 - pos) * repeat;
            x *= scale * active + (1.0 - active);
        }
        if freq != 0.0 {
            x -= count as f32 * freq;
        }
        if present != 0.0 {
            x -= active * present;
        }
        x
    };
    match &row.candidates {
        Some(c) => {
            for (l, id) in row.logits.iter_mut().zip(c) {
                let count = counts.get(id).copied().unwrap_or(0);
                if count > 0 {
                    *l = penalize(*l, count);
                }
            }
        }
        None => {
            for (&id, &count) in counts {
                if let Some(l) = usize::try_from(id).ok().and_then(|i| row.logits.get_mut(i)) {
                    if count > 0 {
                        *l = penalize(*l, count);
                    }
                }
            }
        }
    }
}

/// Logit bias: a row of zeros with each bias written at its token id as a *position* of the
/// current row (a later entry for the same position replaces an earlier one), added to the
/// logits. Positions outside the row are skipped (upstream's graph asserts).
pub fn logit_bias(row: &mut Row, biases: &[(i32, f32)]) {
    if biases.is_empty() {
        return;
    }
    let mut add = vec![0.0f32; row.logits.len()];
    for &(token, bias) in biases {
        if let Some(slot) = usize::try_from(token).ok().and_then(|i| add.get_mut(i)) {
            *slot = bias;
        }
    }
    for (l, a) in row.logits.iter_mut().zip(&add) {
        *l += a;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(l: &[f32]) -> Row {
        Row::new(l.to_vec())
    }

    #[test]
    fn argmax_takes_the_last_of_equal_maxima() {
        let mut r = row(&[1.0, 3.0, 2.0, 3.0]);
        greedy(&mut r);
        assert_eq!(r.sampled, Some(3));
    }

    #[test]
    fn top_k_swaps_the_first_two_and_greedy_answers_a_position() {
        let mut r = row(&[0.5, 4.0, 1.0, 3.0, 2.0]);
        top_k(&mut r, 3);
        assert_eq!(r.candidates, Some(vec![3, 1, 4]));
        assert_eq!(r.logits, vec![3.0, 4.0, 2.0]);
        greedy(&mut r);
        assert_eq!(r.sampled, Some(1)); // the position of token 1, not a token id
    }

    #[test]
    fn dist_picks_the_first_cumulative_sum_above_u_through_the_candidates() {
        let mut r = row(&[0.0, 0.0, 0.0, 0.0]);
        top_k(&mut r, 4);
        let cands = r.candidates.clone().unwrap();
        for (u, pos) in [(0.1f32, 0usize), (0.3, 1), (0.6, 2), (0.9, 3), (1.5, 3)] {
            let mut x = r.clone();
            dist(&mut x, u);
            assert_eq!(x.sampled, Some(cands[pos]), "u = {u}");
            let p = x.probs.unwrap();
            assert!(p.iter().all(|&v| (v - 0.25).abs() < 1e-7));
        }
    }

    #[test]
    fn top_p_masks_past_the_cut_and_keeps_the_length() {
        // softmax of [ln 4, ln 3, ln 2, ln 1] = [0.4, 0.3, 0.2, 0.1]
        let l = [2f32.ln(), 4f32.ln(), 1f32.ln(), 3f32.ln()];
        let mut r = row(&l);
        top_p(&mut r, 0.65);
        assert_eq!(r.candidates, Some(vec![1, 3, 0, 2]));
        assert_eq!(r.logits.len(), 4);
        assert!(r.logits[..2].iter().all(|v| v.is_finite()));
        assert!(r.logits[2..].iter().all(|&v| v == f32::NEG_INFINITY));
    }

    #[test]
    fn min_p_keeps_only_logits_strictly_above_the_threshold() {
        let mut r = row(&[0.0, -1.0, 2.0f32.ln() * -1.0, -5.0]);
        min_p(&mut r, 0.5);
        assert_eq!(r.logits[0], 0.0);
        assert_eq!(r.logits[1], f32::NEG_INFINITY);
        assert_eq!(r.logits[3], f32::NEG_INFINITY);
    }

    #[test]
    fn temp_zero_keeps_the_argmax_with_its_candidate() {
        let mut r = row(&[1.0, 5.0, 2.0]);
        top_k(&mut r, 3);
        temp(&mut r, 0.0);
        assert_eq!(r.logits, vec![5.0]);
        assert_eq!(r.candidates, Some(vec![1]));
        let mut r = row(&[1.0, 2.0]);
        temp(&mut r, 0.5);
        assert_eq!(r.logits, vec![2.0, 4.0]);
    }

    #[test]
    fn penalties_follow_the_cpu_rule_on_counted_tokens_only() {
        let counts: HashMap<i32, i32> = [(0, 2), (2, 1)].into_iter().collect();
        let mut r = row(&[2.0, 1.0, -1.0]);
        penalties(&mut r, &counts, 2.0, 0.5, 0.25);
        assert_eq!(
            r.logits,
            vec![2.0 / 2.0 - 1.0 - 0.25, 1.0, -2.0 - 0.5 - 0.25]
        );
        // through candidates: ids, not positions
        let mut r = row(&[2.0, 1.0, -1.0]);
        r.candidates = Some(vec![2, 1, 0]);
        penalties(&mut r, &counts, 2.0, 0.0, 0.0);
        assert_eq!(r.logits, vec![1.0, 1.0, -2.0]);
    }

    #[test]
    fn logit_bias_writes_by_position_last_entry_wins() {
        let mut r = row(&[0.0, 0.0, 0.0]);
        logit_bias(&mut r, &[(1, 1.0), (1, 3.0), (7, 9.0)]);
        assert_eq!(r.logits, vec![0.0, 3.0, 0.0]);
    }

    #[test]
    fn temp_ext_of_a_uniform_row_is_max_temp() {
        let mut r = row(&[1.0, 1.0, 1.0, 1.0]);
        temp_ext(&mut r, 1.0, 0.5, 1.0);
        // normalized entropy 1 -> dyn_temp = 1.5
        assert!(
            r.logits.iter().all(|&v| (v - 1.0 / 1.5).abs() < 1e-5),
            "{:?}",
            r.logits
        );
    }
}
