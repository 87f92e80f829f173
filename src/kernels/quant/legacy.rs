//! The 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), MXFP4, and the newer Q1_0 /
//! Q2_0: `quantize_row_*_ref` and, with an importance matrix, upstream's `quantize_row_*_impl`.
//! One call quantizes one row; `qw` is the row's importance weights (`n_per_row` values).

use super::blocks::{Q4_0_BYTES, Q4_1_BYTES, Q5_0_BYTES, Q5_1_BYTES, Q8_0_BYTES, QK};
use super::helpers::*;

/// `sum(x²) / n` over the whole row: the sigma² the imatrix variants weight with.
fn row_sigma2(x: &[f32]) -> f32 {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    sum_x2 / x.len() as f32
}

/// The first element of largest magnitude, with its sign (Q4_0 / Q5_0 / MXFP4 references).
fn signed_absmax(xb: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in xb {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

fn min_max(xb: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn imatrix_weights(xb: &[f32], qw: &[f32], sigma2: f32, weight: &mut [f32; QK]) {
    for j in 0..QK {
        weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
    }
}

pub fn q4_0(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    match qw {
        None => {
            for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(Q4_0_BYTES)) {
                let (_, max) = signed_absmax(xb);
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                put_f16(yb, 0, d);
                for j in 0..16 {
                    let xi0 = (c_trunc_i32(xb[j] * id + 8.5) as i8).min(15) as u8;
                    let xi1 = (c_trunc_i32(xb[j + 16] * id + 8.5) as i8).min(15) as u8;
                    yb[2 + j] = xi0 | (xi1 << 4);
                }
            }
        }
        Some(qw) => {
            let sigma2 = row_sigma2(x);
            let mut weight = [0.0f32; QK];
            let mut l = [0i8; QK];
            for ((xb, yb), qb) in x
                .chunks_exact(QK)
                .zip(y.chunks_exact_mut(Q4_0_BYTES))
                .zip(qw.chunks_exact(QK))
            {
                imatrix_weights(xb, qb, sigma2, &mut weight);
                let d = make_qx_quants(8, xb, &mut l, 1, Some(&weight));
                put_f16(yb, 0, d);
                for j in 0..16 {
                    yb[2 + j] = (l[j] as u8) | ((l[j + 16] as u8) << 4);
                }
            }
        }
    }
}

pub fn q4_1(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    match qw {
        None => {
            for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(Q4_1_BYTES)) {
                let (min, max) = min_max(xb);
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                put_f16(yb, 0, d);
                put_f16(yb, 2, min);
                for j in 0..16 {
                    let x0 = (xb[j] - min) * id;
                    let x1 = (xb[j + 16] - min) * id;
                    let xi0 = (c_trunc_i32(x0 + 0.5) as i8).min(15) as u8;
                    let xi1 = (c_trunc_i32(x1 + 0.5) as i8).min(15) as u8;
                    yb[4 + j] = xi0 | (xi1 << 4);
                }
            }
        }
        Some(qw) => {
            let sigma2 = row_sigma2(x);
            let mut weight = [0.0f32; QK];
            let mut l = [0u8; QK];
            let mut laux = [0u8; QK];
            for ((xb, yb), qb) in x
                .chunks_exact(QK)
                .zip(y.chunks_exact_mut(Q4_1_BYTES))
                .zip(qw.chunks_exact(QK))
            {
                imatrix_weights(xb, qb, sigma2, &mut weight);
                let mut min = 0.0f32;
                let d = make_qkx_quants(
                    15,
                    xb,
                    Weights::Given(&weight),
                    &mut l,
                    &mut min,
                    &mut laux,
                    -0.9,
                    0.05,
                    36,
                    false,
                    false,
                );
                put_f16(yb, 0, d);
                put_f16(yb, 2, -min);
                for j in 0..16 {
                    yb[4 + j] = l[j] | (l[j + 16] << 4);
                }
            }
        }
    }
}

/// Packs 32 five-bit values: low nibbles in `qs`, fifth bits in the little-endian `qh`.
fn pack_q5(l0: impl Fn(usize) -> u8, qh_at: usize, qs_at: usize, yb: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..16 {
        let xi0 = l0(j);
        let xi1 = l0(j + 16);
        yb[qs_at + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
        qh |= ((u32::from(xi0) & 0x10) >> 4) << j;
        qh |= ((u32::from(xi1) & 0x10) >> 4) << (j + 16);
    }
    yb[qh_at..qh_at + 4].copy_from_slice(&qh.to_le_bytes());
}

pub fn q5_0(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    match qw {
        None => {
            for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(Q5_0_BYTES)) {
                let (_, max) = signed_absmax(xb);
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                put_f16(yb, 0, d);
                let q = |j: usize| (c_trunc_i32(xb[j] * id + 16.5) as i8).min(31) as u8;
                pack_q5(q, 2, 6, yb);
            }
        }
        Some(qw) => {
            let sigma2 = row_sigma2(x);
            let mut weight = [0.0f32; QK];
            let mut l = [0i8; QK];
            for ((xb, yb), qb) in x
                .chunks_exact(QK)
                .zip(y.chunks_exact_mut(Q5_0_BYTES))
                .zip(qw.chunks_exact(QK))
            {
                imatrix_weights(xb, qb, sigma2, &mut weight);
                let d = make_qx_quants(16, xb, &mut l, 1, Some(&weight));
                put_f16(yb, 0, d);
                pack_q5(|j| l[j] as u8, 2, 6, yb);
            }
        }
    }
}

pub fn q5_1(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    match qw {
        None => {
            for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(Q5_1_BYTES)) {
                let (min, max) = min_max(xb);
                let d = (max - min) / 31.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                put_f16(yb, 0, d);
                put_f16(yb, 2, min);
                let q = |j: usize| c_trunc_i32((xb[j] - min) * id + 0.5) as u8;
                pack_q5(q, 4, 8, yb);
            }
        }
        Some(qw) => {
            let sigma2 = row_sigma2(x);
            let mut weight = [0.0f32; QK];
            let mut l = [0u8; QK];
            let mut laux = [0u8; QK];
            for ((xb, yb), qb) in x
                .chunks_exact(QK)
                .zip(y.chunks_exact_mut(Q5_1_BYTES))
                .zip(qw.chunks_exact(QK))
            {
                imatrix_weights(xb, qb, sigma2, &mut weight);
                let mut min = 0.0f32;
                let d = make_qkx_quants(
                    31,
                    xb,
                    Weights::Given(&weight),
                    &mut l,
                    &mut min,
                    &mut laux,
                    -0.9,
                    0.05,
                    36,
                    false,
                    false,
                );
                put_f16(yb, 0, d);
                put_f16(yb, 2, -min);
                pack_q5(|j| l[j], 4, 8, yb);
            }
        }
    }
}

/// `quantize_row_q8_0_ref` (the imatrix is not used by Q8_0).
pub fn q8_0(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(Q8_0_BYTES)) {
        let mut amax = 0.0f32;
        for &v in xb {
            amax = if amax > v.abs() { amax } else { v.abs() };
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        put_f16(yb, 0, d);
        for j in 0..QK {
            yb[2 + j] = c_trunc_i32((xb[j] * id).round()) as u8;
        }
    }
}

/// `kvalues_mxfp4`: twice the E2M1 values.
const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
pub const MXFP4_BYTES: usize = 17;

fn best_index_mxfp4(x: f32, e: f32) -> u8 {
    let mut best_index = 0u8;
    let mut best_err = (f32::from(KVALUES_MXFP4[0]) * e - x).abs();
    for i in 1..16u8 {
        let err = (f32::from(KVALUES_MXFP4[i as usize]) * e - x).abs();
        if err < best_err {
            best_index = i;
            best_err = err;
        }
    }
    best_index
}

/// `ggml_e8m0_to_fp32_half`: half of 2^(e - 127).
fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// `quantize_row_mxfp4_ref` (no imatrix variant upstream).
pub fn mxfp4(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.chunks_exact_mut(MXFP4_BYTES)) {
        let (amax, _) = signed_absmax(xb);
        let e = if amax > 0.0 {
            c_trunc_i32(amax.log2().floor() - 2.0 + 127.0) as u8
        } else {
            0
        };
        let d = e8m0_to_fp32_half(e);
        yb[0] = e;
        for j in 0..16 {
            yb[1 + j] = best_index_mxfp4(xb[j], d) | (best_index_mxfp4(xb[j + 16], d) << 4);
        }
    }
}

/// NVFP4: 64 values in four sub-blocks of 16, each with a UE4M3 scale, values E2M1.
pub const QK_NVFP4: usize = 64;
const QK_NVFP4_SUB: usize = 16;
pub const NVFP4_BYTES: usize = 36;

/// `ggml_ue4m3_to_fp32`: an unsigned E4M3 scale (bias 7), halved as `kvalues_mxfp4` are
/// twice the E2M1 values.
fn ue4m3_to_fp32(x: u8) -> f32 {
    if x == 0 || x == 0x7f {
        return 0.0;
    }
    let (exp, man) = (i32::from((x >> 3) & 0xf), f32::from(x & 7));
    let raw = if exp == 0 {
        man * (-9f32).exp2()
    } else {
        (1.0 + man / 8.0) * ((exp - 7) as f32).exp2()
    };
    raw * 0.5
}

/// `ggml_fp32_to_ue4m3`: round to nearest (ties up) on the mantissa's fourth bit, saturating
/// at 0x7E (448), subnormals rounded as `(int)(x * 512 + 0.5)`.
fn fp32_to_ue4m3(x: f32) -> u8 {
    if !(x > 0.0) {
        return 0;
    }
    let x = x.min(448.0);
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xff) as i32 - 127;
    let fp32_man = ((bits >> 20) & 7) as i32;
    let mut exp = fp32_exp + 7;
    if exp <= 0 {
        let man = c_trunc_i32(x * 512.0 + 0.5).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7e;
    }
    let mut man = fp32_man + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7e;
        }
    }
    ((exp << 3) | man) as u8
}

/// `quantize_row_nvfp4_ref` (upstream's `quantize_nvfp4` ignores an imatrix).
pub fn nvfp4(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x
        .chunks_exact(QK_NVFP4)
        .zip(y.chunks_exact_mut(NVFP4_BYTES))
    {
        let (scales, qs) = yb.split_at_mut(QK_NVFP4 / QK_NVFP4_SUB);
        for (s, xs) in xb.chunks_exact(QK_NVFP4_SUB).enumerate() {
            let amax = xs
                .iter()
                .fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
            let ue = fp32_to_ue4m3(amax / 6.0);
            scales[s] = ue;
            let d = ue4m3_to_fp32(ue);
            let half = QK_NVFP4_SUB / 2;
            for j in 0..half {
                qs[s * half + j] =
                    best_index_mxfp4(xs[j], d) | (best_index_mxfp4(xs[half + j], d) << 4);
            }
        }
    }
}

pub const QK1_0: usize = 128;
pub const Q1_0_BYTES: usize = 18;
pub const QK2_0: usize = 64;
pub const Q2_0_BYTES: usize = 18;

/// `quantize_row_q1_0_ref`: d = mean |x|, one sign bit per element (the imatrix is unused).
pub fn q1_0(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK1_0).zip(y.chunks_exact_mut(Q1_0_BYTES)) {
        let mut sum_abs = 0.0f32;
        for &v in xb {
            sum_abs += v.abs();
        }
        put_f16(yb, 0, sum_abs / QK1_0 as f32);
        yb[2..].fill(0);
        for (j, &v) in xb.iter().enumerate() {
            if v >= 0.0 {
                yb[2 + j / 8] |= 1 << (j % 8);
            }
        }
    }
}

/// `quantize_row_q2_0_ref`: d = max |x|, q = clamp(round(x / d) + 1, 0, 3).
pub fn q2_0(x: &[f32], y: &mut [u8], _qw: Option<&[f32]>) {
    for (xb, yb) in x.chunks_exact(QK2_0).zip(y.chunks_exact_mut(Q2_0_BYTES)) {
        let mut amax = 0.0f32;
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        put_f16(yb, 0, d);
        yb[2..].fill(0);
        for (j, &w) in xb.iter().enumerate() {
            let q = (c_trunc_i32((w * id).round()) + 1).clamp(0, 3);
            yb[2 + j / 4] |= (q as u8) << ((j % 4) * 2);
        }
    }
}
