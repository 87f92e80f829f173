//! Scalar dequantization, the same arithmetic in the same order as ggml's `dequantize_row_*`
//! (`ggml-quants.c`), so results are bit-identical to ggml's reference and to gguf-py.

use super::blocks::*;

pub fn f32_row(src: &[u8], dst: &mut [f32]) {
    for (i, y) in dst.iter_mut().enumerate() {
        *y = f32_at(src, 4 * i);
    }
}

pub fn f16_row(src: &[u8], dst: &mut [f32]) {
    for (i, y) in dst.iter_mut().enumerate() {
        *y = f16_at(src, 2 * i);
    }
}

pub fn bf16_row(src: &[u8], dst: &mut [f32]) {
    for (i, y) in dst.iter_mut().enumerate() {
        *y = bf16_at(src, 2 * i);
    }
}

pub fn q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            y[j] = (i32::from(q & 0xF) - 8) as f32 * d;
            y[j + 16] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

pub fn q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        for j in 0..16 {
            let q = b[4 + j];
            y[j] = f32::from(q & 0xF) * d + m;
            y[j + 16] = f32::from(q >> 4) * d + m;
        }
    }
}

/// The 5th bits of element `j` and `j + 16` of a Q5 block, as ggml's `xh_0` / `xh_1`.
#[inline(always)]
fn q5_high(qh: u32, j: usize) -> (u8, u8) {
    (
        (((qh >> j) << 4) & 0x10) as u8,
        ((qh >> (j + 12)) & 0x10) as u8,
    )
}

pub fn q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32_at(b, 2);
        for j in 0..16 {
            let q = b[6 + j];
            let (h0, h1) = q5_high(qh, j);
            y[j] = (i32::from((q & 0xF) | h0) - 16) as f32 * d;
            y[j + 16] = (i32::from((q >> 4) | h1) - 16) as f32 * d;
        }
    }
}

pub fn q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qh = u32_at(b, 4);
        for j in 0..16 {
            let q = b[8 + j];
            let (h0, h1) = q5_high(qh, j);
            y[j] = f32::from((q & 0xF) | h0) * d + m;
            y[j + 16] = f32::from((q >> 4) | h1) * d + m;
        }
    }
}

pub fn q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_0_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            y[j] = f32::from(b[2 + j] as i8) * d;
        }
    }
}

pub fn q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q2_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let scales = &b[0..16];
        let d = f16_at(b, 80);
        let min = f16_at(b, 82);
        let mut out = 0;
        let mut is = 0;
        for n in 0..2 {
            let q = &b[16 + 32 * n..16 + 32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let sc = scales[is];
                    is += 1;
                    let dl = d * f32::from(sc & 0xF);
                    let ml = min * f32::from(sc >> 4);
                    for l in 0..16 {
                        let v = (q[l + 16 * half] >> shift) & 3;
                        y[out] = dl * f32::from(v) - ml;
                        out += 1;
                    }
                }
            }
        }
    }
}

pub fn q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q3_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let hmask = &b[0..32];
        let scales = q3_k_scales(&b[96..108]);
        let d_all = f16_at(b, 108);
        let mut out = 0;
        let mut is = 0;
        let mut m = 1u8;
        for n in 0..2 {
            let q = &b[32 + 32 * n..32 + 32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let dl = d_all * f32::from(scales[is]);
                    is += 1;
                    for l in 0..16 {
                        let i = l + 16 * half;
                        let low = i32::from((q[i] >> shift) & 3);
                        let v = low - if hmask[i] & m != 0 { 0 } else { 4 };
                        y[out] = dl * v as f32;
                        out += 1;
                    }
                }
                m <<= 1;
            }
        }
    }
}

pub fn q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let min = f16_at(b, 2);
        let scales = &b[4..16];
        for j in 0..4 {
            let q = &b[16 + 32 * j..16 + 32 * j + 32];
            let (sc1, m1) = scale_min_k4(2 * j, scales);
            let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let y = &mut y[64 * j..64 * j + 64];
            for l in 0..32 {
                y[l] = d1 * f32::from(q[l] & 0xF) - m1;
                y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

pub fn q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let min = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        for j in 0..4 {
            let ql = &b[48 + 32 * j..48 + 32 * j + 32];
            let (sc1, m1) = scale_min_k4(2 * j, scales);
            let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
            let y = &mut y[64 * j..64 * j + 64];
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * f32::from((ql[l] & 0xF) + h1) - m1;
                y[l + 32] = d2 * f32::from((ql[l] >> 4) + h2) - m2;
            }
        }
    }
}

pub fn q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q6_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 208);
        for n in 0..2 {
            let ql = &b[64 * n..64 * n + 64];
            let qh = &b[128 + 32 * n..128 + 32 * n + 32];
            let sc = &b[192 + 8 * n..192 + 8 * n + 8];
            let y = &mut y[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * f32::from(sc[is] as i8) * q1 as f32;
                y[l + 32] = d * f32::from(sc[is + 2] as i8) * q2 as f32;
                y[l + 64] = d * f32::from(sc[is + 4] as i8) * q3 as f32;
                y[l + 96] = d * f32::from(sc[is + 6] as i8) * q4 as f32;
            }
        }
    }
}

pub fn iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(IQ4_NL_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..16 {
            let q = b[2 + j];
            y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0xF)]);
            y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    }
}

pub fn iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ4_XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib in 0..8 {
            let dl = d * iq4_xs_scale(b, ib) as f32;
            let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
            let y = &mut y[32 * ib..32 * ib + 32];
            for j in 0..16 {
                y[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0xF)]);
                y[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]);
            }
        }
    }
}

/// `dequantize_row_q8_K` (activations only; used by tests).
pub fn q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f32_at(b, 0);
        for j in 0..QK_K {
            y[j] = d * f32::from(b[4 + j] as i8);
        }
    }
}

/// Q8_1 to f32 (activations only; used by tests).
pub fn q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_1_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            y[j] = f32::from(b[4 + j] as i8) * d;
        }
    }
}
