//! Activation quantizers: f32 rows into the "vec_dot type" of a weight format, bit-exact with
//! what upstream's CPU backend runs on x86 (`ggml-cpu/arch/x86/quants.c`):
//! - Q8_0 / Q8_1: the AVX2 versions, which differ from `quantize_row_q8_0_ref`: the inverse
//!   scale is `127 / amax` (not `1 / (amax / 127)`) and rounding is to nearest *even*
//!   (`_mm256_round_ps`), where the reference uses `roundf` (half away from zero). A scalar
//!   build of upstream would round differently in rare ties; we match the SIMD build since that
//!   is what runs on every x86-64 machine with AVX2.
//! - Q8_K: `quantize_row_q8_K_ref` (x86 has no SIMD version).
//! - F16: round to nearest even (`_mm256_cvtps_ph(x, 0)` / `half`); BF16:
//!   `ggml_compute_fp32_to_bf16`.

use half::f16;

use super::blocks::*;
use crate::gguf::quant::f32_to_bf16_bits;

/// Quantizes one row of `x.len()` (a multiple of 32) values into Q8_0 blocks in `dst`.
pub fn q8_0(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, id) = q8_scale(xb);
        yb[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for (q, &v) in yb[2..].iter_mut().zip(xb) {
            *q = round_to_i8(v * id) as u8;
        }
    }
}

/// Quantizes one row into Q8_1 blocks: as Q8_0, plus `s = d * sum(qs)` as f16.
pub fn q8_1(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, id) = q8_scale(xb);
        let mut sum = 0i32;
        for (q, &v) in yb[4..].iter_mut().zip(xb) {
            let qi = round_to_i8(v * id);
            sum += i32::from(qi);
            *q = qi as u8;
        }
        yb[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        yb[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_bits().to_le_bytes());
    }
}

/// `d = amax / 127` and the multiplier `127 / amax` (0 for an all-zero block), as the AVX2
/// quantizer computes them.
#[inline(always)]
fn q8_scale(xb: &[f32]) -> (f32, f32) {
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (d, id)
}

/// `_mm256_round_ps(_MM_ROUND_NEAREST)` then `cvtps_epi32` and the saturating packs.
#[inline(always)]
fn round_to_i8(v: f32) -> i8 {
    let r = v.round_ties_even();
    if r.is_nan() {
        // cvtps_epi32 gives INT_MIN for NaN, which the packs saturate to -128.
        return i8::MIN;
    }
    r.clamp(-128.0, 127.0) as i8
}

/// ggml's `nearest_int`: round to nearest even through the float magic-number trick.
#[inline(always)]
fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// `quantize_row_q8_K_ref`: one f32 scale per 256 values, chosen from the value of largest
/// magnitude (its sign kept, so that value maps to -127), plus 16 sums of 16 quants.
pub fn q8_k(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let (max, amax) = q8_k_extreme(xb);
        if amax == 0.0 {
            yb.fill(0);
            continue;
        }
        q8_k_block(xb, yb, -127.0 / max);
    }
}

/// The first value of largest magnitude in a Q8_K super-block (sign kept) and that magnitude.
pub(super) fn q8_k_extreme(xb: &[f32]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in xb {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// One Q8_K super-block quantized with `iscale`: the quants, the scale `1 / iscale` and the
/// 16 sums of 16 quants.
pub(super) fn q8_k_block(xb: &[f32], yb: &mut [u8], iscale: f32) {
    for (q, &v) in yb[4..4 + QK_K].iter_mut().zip(xb) {
        *q = nearest_int(iscale * v).min(127) as i8 as u8;
    }
    for j in 0..QK_K / 16 {
        let sum: i32 = yb[4 + 16 * j..4 + 16 * j + 16]
            .iter()
            .map(|&q| i32::from(q as i8))
            .sum();
        let at = 4 + QK_K + 2 * j;
        yb[at..at + 2].copy_from_slice(&(sum as i16).to_le_bytes());
    }
    yb[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

pub fn f16_row(x: &[f32], dst: &mut [u8]) {
    for (v, out) in x.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

pub fn bf16_row(x: &[f32], dst: &mut [u8]) {
    for (v, out) in x.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
    }
}

pub fn f32_row(x: &[f32], dst: &mut [u8]) {
    for (v, out) in x.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&v.to_le_bytes());
    }
}

/// `quantize_row_q4_0_ref` (what the CPU backend's SET_ROWS runs for a Q4_0 KV cache):
/// per block `d = max / -8` of the value with the largest magnitude, codes
/// `min(15, trunc(x / d + 8.5))`.
pub fn q4_0(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_0_BYTES)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        for j in 0..QK / 2 {
            let lo = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let hi = ((xb[QK / 2 + j] * id + 8.5) as i8).min(15) as u8;
            yb[2 + j] = lo | (hi << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`: per block `d = (max - min) / 15`, `m = min`, codes
/// `min(15, trunc((x - min) / d + 0.5))`.
pub fn q4_1(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK).zip(dst.chunks_exact_mut(Q4_1_BYTES)) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xb {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        yb[2..4].copy_from_slice(&f16::from_f32(min).to_bits().to_le_bytes());
        for j in 0..QK / 2 {
            let lo = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let hi = (((xb[QK / 2 + j] - min) * id + 0.5) as i8).min(15) as u8;
            yb[4 + j] = lo | (hi << 4);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Known answers from gguf-py's `quantize` (a numpy port of the reference quantizers) on
    /// `sin(0.7 i)`, i < 64.
    #[test]
    fn q4_0_and_q4_1_match_gguf_py() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.7).sin()).collect();
        let hex = |b: &[u8]| b.iter().map(|v| format!("{v:02x}")).collect::<String>();
        let mut q = vec![0u8; 36];
        super::q4_0(&x, &mut q);
        assert_eq!(
            hex(&q),
            "f1aff8d38031051b6fbffdf8d38031051b6ffbaf1b6fbffdf7d27021062b6fcffdf7c270"
        );
        let mut q = vec![0u8; 40];
        super::q4_1(&x, &mut q);
        assert_eq!(
            hex(&q),
            "3730dcbb073c8fdefae5a15013083c8fdefae5a13430c6bbe4914003083d8fdef9e4914003083d8f"
        );
    }
}
