//! The float order of upstream's tiled K-quant matmul (`ggml-cpu/tiled/`), scalar reference.
//!
//! For Q2_K..Q6_K and IQ4_XS weights, upstream's CPU backend multiplies a MUL_MAT whose
//! activations have 8 rows or more (and each MUL_MAT_ID expert with 8 routed rows or more)
//! in 16 × 16 microtiles instead of its vec_dot. Activations are the same Q8_K rows; only the
//! float steps differ. Per 256-element block, its AVX2 microtile computes two exact integers,
//! `s1 = Σ_sub scale · Σ w·q` (weights with their offsets applied: Q6_K − 32, Q3_K − 4, IQ4_XS
//! code-book values) and, for the types with mins (Q2_K, Q4_K, Q5_K), `s2 = Σ_sub min · bsum`,
//! then rounds three times:
//!
//! ```text
//! res = d · f32(s1)            (d: the weight block's scale)
//! res = fma(−dmin, f32(s2), res)   (types with mins only)
//! acc = fma(res, d_y, acc)     (d_y: the activation block's scale; acc starts at +0)
//! ```
//!
//! blocks in order along the row. Which thread or tile computes an output does not change it,
//! so a plain per-output loop reproduces it bit for bit. The integers do not depend on the
//! order of their sums (no overflow for these types), so any SIMD unpacking may compute them.

use super::blocks::*;
use crate::gguf::GgmlType;

/// Fewest activation rows for which upstream takes its tiled path (`ggml_tiled_min_batch`).
pub const TILED_MIN_ROWS: usize = 8;

/// Whether upstream's tiled K-quant matmul computes a product of weight type `t` with `m`
/// activation rows (per batch; per expert for MUL_MAT_ID). Repacked weights never reach it
/// (upstream's repacked Q4_K takes its own kernels).
pub fn takes_tiled(t: GgmlType, m: usize) -> bool {
    m >= TILED_MIN_ROWS && tiled_type(t)
}

/// The weight types upstream's tiled matmul handles among those our kernels support.
pub fn tiled_type(t: GgmlType) -> bool {
    matches!(
        t,
        GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ4_XS
    )
}

/// The block's float scales `(d, dmin)` (dmin 0 for the types without mins).
#[inline(always)]
pub fn block_scales(t: GgmlType, wb: &[u8]) -> (f32, f32) {
    match t {
        GgmlType::Q2_K => (f16_at(wb, 80), f16_at(wb, 82)),
        GgmlType::Q3_K => (f16_at(wb, 108), 0.0),
        GgmlType::Q4_K | GgmlType::Q5_K => (f16_at(wb, 0), f16_at(wb, 2)),
        GgmlType::Q6_K => (f16_at(wb, 208), 0.0),
        GgmlType::IQ4_XS => (f16_at(wb, 0), 0.0),
        _ => unreachable!("{t} is not a tiled type"),
    }
}

/// One block's step of the chain: `acc` after adding the block with integers `(s1, s2)`.
#[inline(always)]
pub fn block_step(acc: f32, d: f32, dmin: Option<f32>, s1: i32, s2: i32, yd: f32) -> f32 {
    let mut res = d * s1 as f32;
    if let Some(dmin) = dmin {
        res = (-dmin).mul_add(s2 as f32, res);
    }
    res.mul_add(yd, acc)
}

fn q8k_q(xb: &[u8], e: usize) -> i32 {
    i32::from(xb[4 + e] as i8)
}

fn q8k_bsum(xb: &[u8], j: usize) -> i32 {
    i32::from(i16_at(xb, 4 + QK_K + 2 * j))
}

/// `(s1, s2)` of one weight block against one Q8_K block, element by element.
pub fn block_ints(t: GgmlType, wb: &[u8], xb: &[u8]) -> (i32, i32) {
    // weight value of element e (offsets applied) and the scale / min of its sub-block
    let mut value = [0i32; QK_K];
    let (mut scale, mut min) = ([0i32; 16], [0i32; 16]);
    let sub = match t {
        GgmlType::Q2_K => {
            for e in 0..QK_K {
                let (half, el) = (e / 128, e % 128);
                value[e] = i32::from((wb[16 + 32 * half + el % 32] >> (2 * (el / 32))) & 3);
            }
            for s in 0..16 {
                scale[s] = i32::from(wb[s] & 0xF);
                min[s] = i32::from(wb[s] >> 4);
            }
            16
        }
        GgmlType::Q3_K => {
            for e in 0..QK_K {
                let (half, el) = (e / 128, e % 128);
                let (group, l) = (el / 32, el % 32);
                let low = i32::from((wb[32 + 32 * half + l] >> (2 * group)) & 3);
                let high = i32::from((wb[l] >> (4 * half + group)) & 1);
                value[e] = (low | (high << 2)) - 4;
            }
            for (s, v) in q3_k_scales(&wb[96..108]).iter().enumerate() {
                scale[s] = i32::from(*v);
            }
            16
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let q5 = t == GgmlType::Q5_K;
            let qs = if q5 { 48 } else { 16 };
            for e in 0..QK_K {
                let (j, l) = (e / 32, e % 32);
                let byte = wb[qs + 32 * (j / 2) + l];
                let low = if j % 2 == 0 { byte & 0xF } else { byte >> 4 };
                let high = if q5 { (wb[16 + l] >> j) & 1 } else { 0 };
                value[e] = i32::from(low | (high << 4));
            }
            for s in 0..8 {
                let (sc, m) = scale_min_k4(s, &wb[4..16]);
                scale[s] = i32::from(sc);
                min[s] = i32::from(m);
            }
            32
        }
        GgmlType::Q6_K => {
            for e in 0..QK_K {
                let (half, el) = (e / 128, e % 128);
                let (p, l) = (el / 32, el % 32);
                let ql = wb[64 * half + l + 32 * (p % 2)];
                let low = if p < 2 { ql & 0xF } else { ql >> 4 };
                let high = (wb[128 + 32 * half + l] >> (2 * p)) & 3;
                value[e] = i32::from(low | (high << 4)) - 32;
            }
            for s in 0..16 {
                scale[s] = i32::from(wb[192 + s] as i8);
            }
            16
        }
        GgmlType::IQ4_XS => {
            for e in 0..QK_K {
                let (ib, j) = (e / 32, e % 32);
                let byte = wb[8 + 16 * ib + j % 16];
                let code = if j < 16 { byte & 0xF } else { byte >> 4 };
                value[e] = i32::from(KVALUES_IQ4NL[usize::from(code)]);
            }
            for s in 0..8 {
                scale[s] = iq4_xs_scale(wb, s);
            }
            32
        }
        _ => unreachable!("{t} is not a tiled type"),
    };
    let (mut s1, mut s2) = (0i32, 0i32);
    for s in 0..QK_K / sub {
        let raw: i32 = (s * sub..(s + 1) * sub)
            .map(|e| value[e] * q8k_q(xb, e))
            .sum();
        s1 += scale[s] * raw;
        let bsum: i32 = (s * sub / 16..(s + 1) * sub / 16)
            .map(|j| q8k_bsum(xb, j))
            .sum();
        s2 += min[s] * bsum;
    }
    (s1, s2)
}

/// Whether type `t` has per-sub-block mins (the `dmin` term).
pub fn has_min(t: GgmlType) -> bool {
    matches!(t, GgmlType::Q2_K | GgmlType::Q4_K | GgmlType::Q5_K)
}

/// One output in upstream's tiled order: weight row `w` (type `t`) · Q8_K row `x`, `n`
/// elements.
pub fn dot(t: GgmlType, n: usize, w: &[u8], x: &[u8]) -> f32 {
    let wbytes = t.type_size() as usize;
    let min = has_min(t);
    let mut acc = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(wbytes)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (s1, s2) = block_ints(t, wb, xb);
        let (d, dmin) = block_scales(t, wb);
        acc = block_step(acc, d, min.then_some(dmin), s1, s2, f32_at(xb, 0));
    }
    acc
}

pub fn q2_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::Q2_K, n, w, x)
}
pub fn q3_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::Q3_K, n, w, x)
}
pub fn q4_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::Q4_K, n, w, x)
}
pub fn q5_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::Q5_K, n, w, x)
}
pub fn q6_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::Q6_K, n, w, x)
}
pub fn iq4_xs(n: usize, w: &[u8], x: &[u8]) -> f32 {
    dot(GgmlType::IQ4_XS, n, w, x)
}
