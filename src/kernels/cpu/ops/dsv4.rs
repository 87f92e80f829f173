//! DeepSeek-V4's compressor (upstream's `build_{overlap,hca}_compressed_kv_from_state`: per
//! value a SOFT_MAX over the block's rows, MUL, SUM_ROWS, then RMS_NORM and ROPE), and
//! ROPE_BACK's sine sign.

use super::norm::rms_norm_row;
use super::rope::{rope_apply, rope_cache, RopeParams};
use crate::kernels::cpu::dispatch;

/// One compressed key of `head` values from a block's rows: `values` and `scores` hold
/// `n` rows of `head` values each (row-major, in upstream's order: the previous block's,
/// then the block's own). Per value `c`: `w = SOFT_MAX(scores[.., c])` (ggml's
/// `ggml_vec_soft_max_f32`, the sum in f64, times `1/sum` in f32), `out[c] = Σ_i values[i,
/// c] · w[i]` (the products in f32, summed in f64 in row order as SUM_ROWS). Then
/// RMS_NORM times `norm`, and ROPE at `pos` of the last `rope.n_rot` values.
#[allow(clippy::too_many_arguments)]
pub fn dsv4_compress(
    values: &[f32],
    scores: &[f32],
    head: usize,
    norm: &[f32],
    eps: f32,
    rope: &RopeParams,
    pos: i32,
    col: &mut Vec<f32>,
    cache: &mut Vec<f32>,
    out: &mut [f32],
) {
    let n = values.len() / head;
    debug_assert_eq!(scores.len(), n * head);
    col.resize(n, 0.0);
    let mut comp = vec![0.0f32; head];
    for (c, o) in comp.iter_mut().enumerate() {
        let mut max = f32::NEG_INFINITY;
        for (i, s) in col.iter_mut().enumerate() {
            *s = scores[i * head + c];
            max = max.max(*s);
        }
        let sum = dispatch::soft_max(col, max);
        let inv = (1.0 / sum) as f32;
        let mut acc = 0.0f64;
        for (i, &e) in col.iter().enumerate() {
            acc += f64::from(values[i * head + c] * (e * inv));
        }
        *o = acc as f32;
    }
    rms_norm_row(&comp, eps, out);
    for (o, &w) in out.iter_mut().zip(norm) {
        *o *= w;
    }
    let n_rot = rope.n_rot;
    cache.resize(n_rot, 0.0);
    rope_cache(rope, pos as f32, None, cache);
    rope_apply(rope, cache, n_rot, &mut out[head - n_rot..]);
}

/// ROPE_BACK's sin/cos cache: ROPE's with every sine negated (ggml's `sin_sign` -1).
pub fn rope_cache_back(p: &RopeParams, pos: f32, freq_factors: Option<&[f32]>, cache: &mut [f32]) {
    rope_cache(p, pos, freq_factors, cache);
    for s in cache.iter_mut().skip(1).step_by(2) {
        *s = -*s;
    }
}

#[cfg(test)]
mod tests {
    use super::super::rope::RopeMode;
    use super::*;

    fn params(mode: RopeMode) -> RopeParams {
        RopeParams {
            n_rot: 8,
            mode,
            n_ctx_orig: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 0.0,
            beta_slow: 0.0,
        }
    }

    /// ROPE_BACK is ggml's rotation by the negated angle: each pair turns by `-theta` (the
    /// same cos, the sine negated, ggml's `rotate_pairs` with `sin_sign = -1`), so it undoes
    /// ROPE up to rounding, and it is ROPE at the negated position exactly where the angles
    /// are exact (pos 0: the identity).
    #[test]
    fn rope_back_turns_by_the_negated_angle() {
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            let p = params(mode);
            let x: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
            let (mut fwd, mut back) = (vec![0.0; 8], vec![0.0; 8]);
            rope_cache(&p, 13.0, None, &mut fwd);
            rope_cache_back(&p, 13.0, None, &mut back);
            for i in (0..8).step_by(2) {
                assert_eq!(back[i], fwd[i]);
                assert_eq!(back[i + 1], -fwd[i + 1]);
            }
            // the pair formula with the negated sine, as ggml writes it
            let mut y = x.clone();
            rope_apply(&p, &back, 16, &mut y);
            let (c, s) = (fwd[0], fwd[1]);
            let (x0, x1) = match mode {
                RopeMode::Norm => (x[0], x[1]),
                _ => (x[0], x[4]),
            };
            let want0 = x0 * c + x1 * s;
            assert!(
                (y[0] - want0).abs() <= 1e-6,
                "{mode:?}: {} vs {want0}",
                y[0]
            );
            // forward then back: the input again (to rounding); the unrotated tail untouched
            let mut z = x.clone();
            rope_apply(&p, &fwd, 16, &mut z);
            assert_ne!(z, x);
            rope_apply(&p, &back, 16, &mut z);
            for (a, b) in z.iter().zip(&x) {
                assert!((a - b).abs() <= 1e-6, "{mode:?}: {a} vs {b}");
            }
            assert_eq!(z[8..], x[8..]);
        }
    }

    /// The compressor: per value the softmax of its scores weights its values (a block whose
    /// scores are equal averages them; a -inf score contributes nothing), then RMS_NORM, the
    /// norm's weight and the rotation of the last n_rot values at the block's position.
    #[test]
    fn compress_weights_each_value_by_its_softmax() {
        let head = 16;
        let p = params(RopeMode::Norm);
        // 4 rows: value c of row i is i + c; scores equal except row 3 at -inf
        let values: Vec<f32> = (0..4)
            .flat_map(|i| (0..head).map(move |c| (i + c) as f32))
            .collect();
        let scores: Vec<f32> = (0..4)
            .flat_map(|i| (0..head).map(move |_| if i == 3 { f32::NEG_INFINITY } else { 0.5 }))
            .collect();
        let norm = vec![2.0f32; head];
        let (mut col, mut cache) = (Vec::new(), Vec::new());
        let mut out = vec![0.0f32; head];
        dsv4_compress(
            &values, &scores, head, &norm, 1e-6, &p, 0, &mut col, &mut cache, &mut out,
        );
        // the mean of rows 0..3 is 1 + c; RMS-normed, times 2; position 0 rotates nothing
        let mean: Vec<f32> = (0..head).map(|c| 1.0 + c as f32).collect();
        let rms = (mean.iter().map(|v| v * v).sum::<f32>() / head as f32 + 1e-6).sqrt();
        for (c, (&o, &m)) in out.iter().zip(&mean).enumerate() {
            assert!(
                (o - 2.0 * m / rms).abs() <= 1e-4,
                "value {c}: {o} vs {}",
                2.0 * m / rms
            );
        }
        // at position 5 the head's last 8 values turn, the first 8 stay
        let mut turned = vec![0.0f32; head];
        dsv4_compress(
            &values,
            &scores,
            head,
            &norm,
            1e-6,
            &p,
            5,
            &mut col,
            &mut cache,
            &mut turned,
        );
        assert_eq!(turned[..8], out[..8]);
        assert_ne!(turned[8..], out[8..]);
    }
}
