//! Scalar dot products of one weight row (bytes of `n` elements in the weight type) with one
//! activation row already in the weight type's vec_dot type. They follow ggml's generic
//! versions (`ggml-cpu/quants.c`, `vec.cpp`): exact integer sums per block, scaled in f32.
//! They are the reference the SIMD kernels are tested against, and the fallback on machines
//! without AVX2/FMA.

use super::blocks::*;

pub fn f32(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for i in 0..n {
        sum += f64::from(f32_at(w, 4 * i) * f32_at(x, 4 * i));
    }
    sum as f32
}

pub fn f16(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for i in 0..n {
        sum += f64::from(f16_at(w, 2 * i) * f16_at(x, 2 * i));
    }
    sum as f32
}

pub fn bf16(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sum = 0.0f64;
    for i in 0..n {
        sum += f64::from(bf16_at(w, 2 * i) * bf16_at(x, 2 * i));
    }
    sum as f32
}

#[inline(always)]
fn i8s(bytes: &[u8]) -> impl Iterator<Item = i32> + '_ {
    bytes.iter().map(|&b| i32::from(b as i8))
}

pub fn q4_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q4_0_BYTES)
        .zip(x.chunks_exact(Q8_0_BYTES))
        .take(n / QK)
    {
        let mut sumi = 0i32;
        for (j, yv) in i8s(&xb[2..18]).enumerate() {
            sumi += (i32::from(wb[2 + j] & 0xF) - 8) * yv;
        }
        for (j, yv) in i8s(&xb[18..34]).enumerate() {
            sumi += (i32::from(wb[2 + j] >> 4) - 8) * yv;
        }
        sumf += sumi as f32 * f16_at(wb, 0) * f16_at(xb, 0);
    }
    sumf
}

pub fn q4_1(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q4_1_BYTES)
        .zip(x.chunks_exact(Q8_1_BYTES))
        .take(n / QK)
    {
        let mut sumi = 0i32;
        for (j, yv) in i8s(&xb[4..20]).enumerate() {
            sumi += i32::from(wb[4 + j] & 0xF) * yv;
        }
        for (j, yv) in i8s(&xb[20..36]).enumerate() {
            sumi += i32::from(wb[4 + j] >> 4) * yv;
        }
        sumf += (f16_at(wb, 0) * f16_at(xb, 0)) * sumi as f32 + f16_at(wb, 2) * f16_at(xb, 2);
    }
    sumf
}

#[inline(always)]
fn q5_values(qh: u32, qs: &[u8], j: usize) -> (i32, i32) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    (
        (u32::from(qs[j] & 0xF) | h0) as i32,
        (u32::from(qs[j] >> 4) | h1) as i32,
    )
}

pub fn q5_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q5_0_BYTES)
        .zip(x.chunks_exact(Q8_0_BYTES))
        .take(n / QK)
    {
        let qh = u32_at(wb, 2);
        let mut sumi = 0i32;
        for j in 0..16 {
            let (v0, v1) = q5_values(qh, &wb[6..22], j);
            sumi += (v0 - 16) * i32::from(xb[2 + j] as i8);
            sumi += (v1 - 16) * i32::from(xb[18 + j] as i8);
        }
        sumf += sumi as f32 * f16_at(wb, 0) * f16_at(xb, 0);
    }
    sumf
}

pub fn q5_1(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q5_1_BYTES)
        .zip(x.chunks_exact(Q8_1_BYTES))
        .take(n / QK)
    {
        let qh = u32_at(wb, 4);
        let mut sumi = 0i32;
        for j in 0..16 {
            let (v0, v1) = q5_values(qh, &wb[8..24], j);
            sumi += v0 * i32::from(xb[4 + j] as i8);
            sumi += v1 * i32::from(xb[20 + j] as i8);
        }
        sumf += (f16_at(wb, 0) * f16_at(xb, 0)) * sumi as f32 + f16_at(wb, 2) * f16_at(xb, 2);
    }
    sumf
}

pub fn q8_0(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q8_0_BYTES)
        .zip(x.chunks_exact(Q8_0_BYTES))
        .take(n / QK)
    {
        let sumi: i32 = i8s(&wb[2..]).zip(i8s(&xb[2..])).map(|(a, b)| a * b).sum();
        sumf += sumi as f32 * (f16_at(wb, 0) * f16_at(xb, 0));
    }
    sumf
}

pub fn iq4_nl(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(IQ4_NL_BYTES)
        .zip(x.chunks_exact(Q8_0_BYTES))
        .take(n / QK)
    {
        let mut sumi = 0i32;
        for j in 0..16 {
            let q = wb[2 + j];
            sumi += i32::from(KVALUES_IQ4NL[usize::from(q & 0xF)]) * i32::from(xb[2 + j] as i8);
            sumi += i32::from(KVALUES_IQ4NL[usize::from(q >> 4)]) * i32::from(xb[18 + j] as i8);
        }
        sumf += f16_at(wb, 0) * f16_at(xb, 0) * sumi as f32;
    }
    sumf
}

/// Q8_K activation block fields: (d, qs, bsum(j)).
#[inline(always)]
fn q8k(xb: &[u8]) -> (f32, &[u8]) {
    (f32_at(xb, 0), &xb[4..4 + QK_K])
}

#[inline(always)]
fn q8k_bsum(xb: &[u8], j: usize) -> i32 {
    i32::from(i16_at(xb, 4 + QK_K + 2 * j))
}

pub fn q2_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q2_K_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let scales = &wb[0..16];
        let summs: i32 = (0..16)
            .map(|j| q8k_bsum(xb, j) * i32::from(scales[j] >> 4))
            .sum();
        let mut isum = 0i32;
        let mut is = 0;
        let mut out = 0;
        for nn in 0..2 {
            let q = &wb[16 + 32 * nn..48 + 32 * nn];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let sc = i32::from(scales[is] & 0xF);
                    is += 1;
                    let mut s = 0i32;
                    for l in 0..16 {
                        s += i32::from((q[l + 16 * half] >> shift) & 3) * i32::from(yq[out] as i8);
                        out += 1;
                    }
                    isum += sc * s;
                }
            }
        }
        let dall = yd * f16_at(wb, 80);
        let dmin = yd * f16_at(wb, 82);
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

pub fn q3_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q3_K_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let hmask = &wb[0..32];
        let scales = q3_k_scales(&wb[96..108]);
        let mut isum = 0i32;
        let mut is = 0;
        let mut out = 0;
        let mut m = 1u8;
        for nn in 0..2 {
            let q = &wb[32 + 32 * nn..64 + 32 * nn];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let mut s = 0i32;
                    for l in 0..16 {
                        let i = l + 16 * half;
                        let v =
                            i32::from((q[i] >> shift) & 3) - if hmask[i] & m != 0 { 0 } else { 4 };
                        s += v * i32::from(yq[out] as i8);
                        out += 1;
                    }
                    isum += i32::from(scales[is]) * s;
                    is += 1;
                }
                m <<= 1;
            }
        }
        sumf += f16_at(wb, 108) * yd * isum as f32;
    }
    sumf
}

/// Shared by Q4_K and Q5_K: `values(j, l)` gives element `l` (0..32) of sub-block `j` (0..8).
#[inline(always)]
fn k4_block(wb: &[u8], xb: &[u8], values: impl Fn(usize, usize) -> i32) -> f32 {
    let (yd, yq) = q8k(xb);
    let scales = &wb[4..16];
    let mut isum = 0i32;
    let mut summ = 0i32;
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        let mut s = 0i32;
        for l in 0..32 {
            s += values(j, l) * i32::from(yq[32 * j + l] as i8);
        }
        isum += i32::from(sc) * s;
        summ += i32::from(m) * (q8k_bsum(xb, 2 * j) + q8k_bsum(xb, 2 * j + 1));
    }
    let d = yd * f16_at(wb, 0);
    let dmin = yd * f16_at(wb, 2);
    d * isum as f32 - dmin * summ as f32
}

pub fn q4_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q4_K_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        sumf += k4_block(wb, xb, |j, l| {
            let q = wb[16 + 32 * (j / 2) + l];
            i32::from(if j % 2 == 0 { q & 0xF } else { q >> 4 })
        });
    }
    sumf
}

pub fn q5_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q5_K_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        sumf += k4_block(wb, xb, |j, l| {
            let q = wb[48 + 32 * (j / 2) + l];
            let low = if j % 2 == 0 { q & 0xF } else { q >> 4 };
            let high = (wb[16 + l] >> j) & 1;
            i32::from(low | (high << 4))
        });
    }
    sumf
}

pub fn q6_k(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(Q6_K_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let mut isum = 0i32;
        for nn in 0..2 {
            let ql = &wb[64 * nn..64 * nn + 64];
            let qh = &wb[128 + 32 * nn..160 + 32 * nn];
            let sc = &wb[192 + 8 * nn..200 + 8 * nn];
            let y = &yq[128 * nn..128 * nn + 128];
            // 8 sub-blocks of 16: quarter `p` (0..4) of the 128, half `h` of the 32 lanes.
            for p in 0..4 {
                for h in 0..2 {
                    let mut s = 0i32;
                    for l in 16 * h..16 * h + 16 {
                        let lq = match p {
                            0 => ql[l] & 0xF,
                            1 => ql[l + 32] & 0xF,
                            2 => ql[l] >> 4,
                            _ => ql[l + 32] >> 4,
                        };
                        let hq = (qh[l] >> (2 * p)) & 3;
                        let v = i32::from(lq | (hq << 4)) - 32;
                        s += v * i32::from(y[32 * p + l] as i8);
                    }
                    isum += i32::from(sc[h + 2 * p] as i8) * s;
                }
            }
        }
        sumf += f16_at(wb, 208) * yd * isum as f32;
    }
    sumf
}

pub fn iq4_xs(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (wb, xb) in w
        .chunks_exact(IQ4_XS_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let mut isum = 0i32;
        for ib in 0..8 {
            let qs = &wb[8 + 16 * ib..24 + 16 * ib];
            let y = &yq[32 * ib..32 * ib + 32];
            let mut s = 0i32;
            for j in 0..16 {
                s += i32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0xF)]) * i32::from(y[j] as i8);
                s += i32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]) * i32::from(y[j + 16] as i8);
            }
            isum += iq4_xs_scale(wb, ib) * s;
        }
        sumf += f16_at(wb, 0) * yd * isum as f32;
    }
    sumf
}
