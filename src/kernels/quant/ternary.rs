//! The ternary formats of BitNet b1.58 / TriLMs: `quantize_row_tq1_0_ref` and
//! `quantize_row_tq2_0_ref` (the imatrix is unused).

use super::blocks::{QK_K, TQ1_0_BYTES, TQ2_0_BYTES};
use super::helpers::*;

/// `lroundf(v) + 1`: -1, 0, 1 → 0, 1, 2.
#[inline(always)]
fn trit(v: f32) -> u8 {
    (c_trunc_i32(v.round()) + 1) as u8
}

fn absmax_scale(xb: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in xb {
        amax = if amax > v.abs() { amax } else { v.abs() };
    }
    let d = amax;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

pub fn tq1_0(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(TQ1_0_BYTES)) {
        let (d, id) = absmax_scale(xb);
        put_f16(yb, 52, d);
        // Five trits per byte: 32 bytes over 160 values, then 16 bytes over 80 values.
        let mut base = 0usize;
        for (start, width) in [(0usize, 32usize), (32, 16)] {
            for m in 0..width {
                let mut q = 0u8;
                for n in 0..5 {
                    q = q
                        .wrapping_mul(3)
                        .wrapping_add(trit(xb[base + m + n * width] * id));
                }
                yb[start + m] = ((u16::from(q) * 256 + 242) / 243) as u8;
            }
            base += 5 * width;
        }
        // Four trits per byte in qh, the first shifted to the most significant trit.
        for j in 0..4 {
            let mut q = 0u8;
            for m in 0..4 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(xb[base + j + m * 4] * id));
            }
            q = q.wrapping_mul(3);
            yb[48 + j] = ((u16::from(q) * 256 + 242) / 243) as u8;
        }
    }
}

pub fn tq2_0(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(TQ2_0_BYTES)) {
        let (d, id) = absmax_scale(xb);
        put_f16(yb, 64, d);
        for j in (0..64).step_by(32) {
            let xs = &xb[4 * j..];
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    let xi = i32::from(trit(xs[m + n * 32] * id));
                    q = q.wrapping_add(((xi & 3) << (2 * n)) as u8);
                }
                yb[j + m] = q;
            }
        }
    }
}
