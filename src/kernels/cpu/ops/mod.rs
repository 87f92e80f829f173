//! Element-wise and row-wise CPU ops of the graph executor (everything but matrix products),
//! with ggml-cpu's arithmetic: same accumulation types and the same order of rounding steps,
//! so that results track upstream's closely.
//!
//! One file per op (ggml's `ops.cpp` split): `norm`, `rope`, `unary`, `softmax`, `hadamard`,
//! `kpool`, and attention in `attn/`. The scalar helpers they share live in `cpu/vec.rs`. This file
//! only declares and re-exports them.

mod attn;
mod dsv4;
mod hadamard;
mod hc;
mod kpool;
mod norm;
mod rope;
mod softmax;
mod ssm;
mod unary;

pub use super::vec::{axpy, dot_f32, gelu, ggml_expf, silu};
pub use attn::{
    flash_attn, indexer_scores, msa_blocks, msa_n_pos, msa_score_dot, top_k_ordered, top_k_set,
    upstream_n_kv, Attn, AttnScratch, AttnShape, KvRows, TILE_Q,
};
pub use dsv4::{dsv4_compress, rope_cache_back};
pub use hadamard::{hadamard_rows, hadamard_rows_dense};
pub use hc::{hc_mix, HcMixKind};
pub use kpool::kpool_pooled;
pub use norm::{norm_row, rms_norm_row};
pub use rope::{rope_apply, rope_cache, yarn_corr_dims, RopeMode, RopeParams};
pub use softmax::soft_max_row;
pub use ssm::{
    gated_delta_net_step, lightning_attn_step, lightning_slopes, softplus, ssm_conv_step,
    ssm_conv_step_dilated, ssm_scan_step, GdnShape, ScanShape,
};
pub use unary::silu_rows;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dispatch::{dot_f16_ggml, f16_scale_mad};
    use crate::kernels::cpu::vec::{dot_f16_ggml_scalar, f16_scale_mad_scalar};

    /// The vector rows equal the scalar silu (ggml's exp) bit for bit, except each row's last
    /// `row_len % 8` values, which follow libm's expf as ggml's scalar tail (wide range, both
    /// forms, a row length with a tail).
    #[test]
    fn silu_rows_equal_scalar_silu() {
        let gate: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) * 0.0731).collect();
        let up: Vec<f32> = (0..4000).map(|i| 1.0 - i as f32 * 1e-3).collect();
        let row_len = 100; // 12 vectors and a tail of 4 per row
        let (mut a, mut b) = (vec![0f32; 4000], vec![0f32; 4000]);
        silu_rows(&mut a, &gate, Some(&up), row_len);
        silu_rows(&mut b, &gate, None, row_len);
        let simd = cfg!(target_arch = "x86_64") && crate::kernels::cpu::x86::available();
        for i in 0..4000 {
            let x = gate[i];
            let s = if simd && i % row_len >= 96 {
                x / (1.0 + (-x).exp())
            } else {
                silu(x)
            };
            assert_eq!(a[i].to_bits(), (s * up[i]).to_bits(), "{x}");
            assert_eq!(b[i].to_bits(), s.to_bits(), "{x}");
        }
    }

    /// The SIMD ggml-order F16 dot equals the scalar one bit for bit (with leftovers).
    #[test]
    fn dot_f16_ggml_matches_scalar() {
        let mut seed = 0x9e37_79b9_u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            half::f16::from_f32((seed as f32 / u32::MAX as f32) * 4.0 - 2.0)
        };
        for n in [1usize, 31, 32, 64, 80, 128, 131] {
            let x: Vec<half::f16> = (0..n).map(|_| rnd()).collect();
            let y: Vec<half::f16> = (0..n).map(|_| rnd()).collect();
            let (a, b) = (dot_f16_ggml(&x, &y), dot_f16_ggml_scalar(&x, &y));
            assert_eq!(a.to_bits(), b.to_bits(), "n {n}: {a} vs {b}");
            let exact: f64 = x
                .iter()
                .zip(&y)
                .map(|(p, q)| f64::from(p.to_f32() * q.to_f32()))
                .sum();
            assert!(
                (f64::from(a) - exact).abs() < 1e-4 * (1.0 + exact.abs()),
                "n {n}"
            );
        }
    }

    /// The SIMD half-precision scale + FMA (when the CPU has it) equals the scalar one bit for
    /// bit, tail included, with and without the rescale.
    #[test]
    fn f16_scale_mad_matches_scalar() {
        let mut seed = 0x2545_f491_u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 8.0 - 4.0
        };
        for n in [1usize, 7, 8, 64, 67, 128] {
            let v: Vec<half::f16> = (0..n).map(|_| half::f16::from_f32(rnd())).collect();
            let acc0: Vec<half::f16> = (0..n).map(|_| half::f16::from_f32(rnd() * 50.0)).collect();
            for ms in [None, Some(0.37f32), Some(1e-3)] {
                let vs = rnd().abs();
                let (mut a, mut b) = (acc0.clone(), acc0.clone());
                f16_scale_mad(&mut a, &v, ms, vs);
                f16_scale_mad_scalar(&mut b, &v, ms, vs);
                let bits = |x: &[half::f16]| x.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "n {n} ms {ms:?}");
                assert_ne!(bits(&a), bits(&acc0), "the accumulator changed");
            }
        }
    }

    #[test]
    fn rms_norm_unit_rms() {
        let x = [3.0f32, -4.0];
        let mut y = [0.0; 2];
        rms_norm_row(&x, 0.0, &mut y);
        let rms = ((y[0] * y[0] + y[1] * y[1]) / 2.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-6);
        assert!((y[0] / y[1] + 0.75).abs() < 1e-6);
    }

    #[test]
    fn norm_zero_mean_unit_variance() {
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let mut y = [0.0; 4];
        norm_row(&x, 0.0, &mut y);
        let mean: f32 = y.iter().sum::<f32>() / 4.0;
        let var: f32 = y.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5);
    }

    fn params(mode: RopeMode) -> RopeParams {
        RopeParams {
            n_rot: 4,
            mode,
            n_ctx_orig: 2048,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    #[test]
    fn rope_rotates_pairs_by_position_times_frequency() {
        let p = params(RopeMode::Norm);
        let mut cache = [0.0; 4];
        rope_cache(&p, 3.0, None, &mut cache);
        let mut x = [1.0, 0.0, 1.0, 0.0, 7.0];
        rope_apply(&p, &cache, 5, &mut x);
        // pair 0: angle 3; pair 1: angle 3 * 10000^(-1/2) = 0.03
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[1] - 3f32.sin()).abs() < 1e-6);
        assert!((x[2] - 0.03f32.cos()).abs() < 1e-6 && (x[3] - 0.03f32.sin()).abs() < 1e-6);
        assert_eq!(x[4], 7.0, "dimensions past n_rot are kept");
        let p = params(RopeMode::Neox);
        let mut x = [1.0, 1.0, 0.0, 0.0];
        rope_apply(&p, &cache, 4, &mut x);
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[2] - 3f32.sin()).abs() < 1e-6);
        // position 0 is the identity
        rope_cache(&p, 0.0, Some(&[2.0, 4.0]), &mut cache);
        assert_eq!(cache, [1.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn softmax_sums_to_one_and_ignores_minus_infinity() {
        let mut x = [1.0f32, 2.0, f32::NEG_INFINITY, 3.0];
        soft_max_row(&mut x, 1.0);
        assert_eq!(x[2], 0.0);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] > x[1] && x[1] > x[0]);
    }

    #[test]
    fn gelu_and_silu_values() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-3);
        assert_eq!(gelu(20.0), 20.0);
        assert_eq!(gelu(-20.0), 0.0);
    }
}
