//! AVX2 dot products of the K-quants (Q2_K .. Q6_K) against Q8_K activations, with the
//! per-column forms the tiles reuse.

use std::arch::x86_64::*;

use super::simd::{
    f16_load, f32_load, hsum_f32x4, hsum_f32x8, hsum_i32x4, load128, load256, pair_scales,
};
use crate::kernels::cpu::blocks::*;

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xF);
    // One accumulator for the min terms and the quants alike, the mins first in each block:
    // ggml's AVX2 order, so results equal upstream's bit for bit.
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q2_K_BYTES), x.add(i * Q8_K_BYTES));
        let yd = f32_load(xb);
        let d = yd * f16_load(wb.add(80));
        let dmin = -yd * f16_load(wb.add(82));
        let packed = load128(wb);
        // Mins (high nibbles) against the 16 bsums, in one madd.
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        let m = _mm256_madd_epi16(mins, load256(xb.add(4 + QK_K)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(m), acc);
        let scv = pair_scales(_mm_and_si128(packed, m4));
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let qbits = load256(wb.add(16 + 32 * n));
            let q = [
                _mm256_and_si256(qbits, m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 6), m3),
            ];
            for (j, q) in q.iter().enumerate() {
                let y = load256(xb.add(4 + 128 * n + 32 * j));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(*q, y), scv[4 * n + j]);
                sumi = _mm256_add_epi32(sumi, p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

/// The 16 Q3_K scales (minus 32) as i8 lanes, unpacked in registers (`q3_k_scales` goes
/// through memory, and its four u32 stores read back as one vector stall store forwarding).
#[inline(always)]
pub(super) unsafe fn q3_k_scales_simd(p: *const u8) -> __m128i {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let p = p.cast::<u32>();
    let (a0, a1, tmp) = (
        p.read_unaligned(),
        p.add(1).read_unaligned(),
        p.add(2).read_unaligned(),
    );
    let v = _mm_set_epi32(
        (((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4)) as i32,
        (((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4)) as i32,
        ((a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4)) as i32,
        ((a0 & KMASK2) | ((tmp & KMASK1) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q3_K_BYTES), x.add(i * Q8_K_BYTES));
        let scv = pair_scales(q3_k_scales_simd(wb.add(96)));
        let hmask = load256(wb);
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let qbits = load256(wb.add(32 + 32 * n));
            let q = [
                _mm256_and_si256(qbits, m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(qbits, 6), m3),
            ];
            for (j, q) in q.iter().enumerate() {
                let bit = _mm256_set1_epi8((1u8 << (4 * n + j)) as i8);
                // 4 where the high bit is clear: those values are q - 4.
                let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
                let sub = _mm256_and_si256(clear, four);
                let y = load256(xb.add(4 + 128 * n + 32 * j));
                let p16 =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(*q, y), _mm256_maddubs_epi16(sub, y));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv[4 * n + j]));
            }
        }
        let d = f32_load(xb) * f16_load(wb.add(108));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

/// `_mm256_shuffle_epi8` masks broadcasting 16-bit lane `i` (of a 128-bit half) to all lanes.
static BROADCAST_I16: [[u8; 32]; 8] = {
    let mut masks = [[0u8; 32]; 8];
    let mut i = 0;
    while i < 8 {
        let mut b = 0;
        while b < 32 {
            masks[i][b] = (2 * i + b % 2) as u8;
            b += 1;
        }
        i += 1;
    }
    masks
};

/// The 8 scales of a Q4_K/Q5_K block, each broadcast to 16 i16 lanes, and its 8 mins as
/// 8 i16 lanes: the 12 packed bytes unpacked with ggml's `utmp` shuffles (one u32 pass instead
/// of eight `get_scale_min_k4` calls).
#[inline(always)]
pub(super) unsafe fn k4_scales(wb: *const u8) -> ([__m256i; 8], __m128i) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let p = wb.add(4).cast::<u32>();
    let (u0, u1, u2) = (
        p.read_unaligned(),
        p.add(1).read_unaligned(),
        p.add(2).read_unaligned(),
    );
    let scales_lo = u0 & KMASK1;
    let scales_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let mins_lo = u1 & KMASK1;
    let mins_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let both = _mm256_cvtepu8_epi16(_mm_set_epi32(
        mins_hi as i32,
        mins_lo as i32,
        scales_hi as i32,
        scales_lo as i32,
    ));
    let sc128 = _mm256_castsi256_si128(both);
    let scales = _mm256_set_m128i(sc128, sc128);
    let mut out = [_mm256_setzero_si256(); 8];
    for (j, o) in out.iter_mut().enumerate() {
        *o = _mm256_shuffle_epi8(scales, _mm256_loadu_si256(BROADCAST_I16[j].as_ptr().cast()));
    }
    (out, _mm256_extracti128_si256(both, 1))
}

/// Σⱼ minⱼ · (bsum₂ⱼ + bsum₂ⱼ₊₁) of a Q8_K block as 4 i32 lanes (ggml's hadd + madd).
#[inline(always)]
pub(super) unsafe fn k4_mins_dot(xb: *const u8, mins: __m128i) -> __m128i {
    let bsums = load256(xb.add(4 + QK_K));
    let pairs = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    _mm_madd_epi16(mins, pairs)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut out = [0f32; 1];
    q4_k_cols::<1>(nb, w, x, 0, &mut out);
    out[0]
}

/// Q4_K against `C` activation rows `xs` bytes apart: the weight block's scales and nibbles
/// are unpacked once for all columns; each column's arithmetic is the same for any `C`.
#[inline(always)]
pub(super) unsafe fn q4_k_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); C];
    let mut acc_min = [_mm_setzero_ps(); C];
    for i in 0..nb {
        let wb = w.add(i * Q4_K_BYTES);
        let (scv, mins) = k4_scales(wb);
        let (d, dmin) = (f16_load(wb), f16_load(wb.add(2)));
        let mut q = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let qbits = load256(wb.add(16 + 32 * j));
            q[2 * j] = _mm256_and_si256(qbits, m4);
            q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(qbits, 4), m4);
        }
        for c in 0..C {
            let xb = x.add(c * xs + i * Q8_K_BYTES);
            let yd = f32_load(xb);
            let m = _mm_cvtepi32_ps(k4_mins_dot(xb, mins));
            acc_min[c] = _mm_fmadd_ps(_mm_set1_ps(yd * dmin), m, acc_min[c]);
            let mut sumi = _mm256_setzero_si256();
            for g in 0..8 {
                let y = load256(xb.add(4 + 32 * g));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], y), scv[g]);
                sumi = _mm256_add_epi32(sumi, p);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(yd * d), _mm256_cvtepi32_ps(sumi), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = hsum_f32x8(acc[c]) - hsum_f32x4(acc_min[c]);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = _mm256_setzero_ps();
    // The min terms: each block's integer sum, then one scalar FMA into `summs` (ggml's AVX2
    // kernel, as GCC fuses `summs += dmin * sum`), added after the horizontal sum.
    let mut summs = 0f32;
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q5_K_BYTES), x.add(i * Q8_K_BYTES));
        let yd = f32_load(xb);
        let (scv, mins) = k4_scales(wb);
        let dmin = -yd * f16_load(wb.add(2));
        summs = (hsum_i32x4(k4_mins_dot(xb, mins)) as f32).mul_add(dmin, summs);
        let hbits = load256(wb.add(16));
        let high = |bit: usize| {
            let b = _mm256_set1_epi8((1u8 << bit) as i8);
            _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, b), b), sixteen)
        };
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let qbits = load256(wb.add(48 + 32 * j));
            let ql = _mm256_or_si256(_mm256_and_si256(qbits, m4), high(2 * j));
            let qh = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(qbits, 4), m4),
                high(2 * j + 1),
            );
            let yl = load256(xb.add(4 + 64 * j));
            let yh = load256(xb.add(4 + 64 * j + 32));
            let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(ql, yl), scv[2 * j]);
            let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(qh, yh), scv[2 * j + 1]);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(yd * f16_load(wb)),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum_f32x8(acc) + summs
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut out = [0f32; 1];
    q6_k_cols::<1>(nb, w, x, 0, &mut out);
    out[0]
}

/// Q6_K against `C` activation rows `xs` bytes apart (weights unpacked once per block).
#[inline(always)]
pub(super) unsafe fn q6_k_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    let m4 = _mm256_set1_epi8(0xF);
    let m2 = _mm256_set1_epi8(3);
    let mut acc = [_mm256_setzero_ps(); C];
    for i in 0..nb {
        let wb = w.add(i * Q6_K_BYTES);
        let scv = pair_scales(load128(wb.add(192)));
        let mut q = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            let ql0 = load256(wb.add(64 * n));
            let ql1 = load256(wb.add(64 * n + 32));
            let qh = load256(wb.add(128 + 32 * n));
            let high = |s: i32| {
                let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), m2);
                _mm256_slli_epi16(h, 4)
            };
            q[4 * n] = _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0));
            q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2));
            q[4 * n + 2] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4));
            q[4 * n + 3] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6));
        }
        let d = f16_load(wb.add(208));
        let scales16 = _mm256_cvtepi8_epi16(load128(wb.add(192)));
        for (c, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(c * xs + i * Q8_K_BYTES);
            // q·y with q in 0..63, then the offset: 32 · Σ scale · bsum per lane pair (ggml's
            // AVX2 kernel; the i32 lanes, not only their total, must be ggml's for the f32
            // FMAs per lane to round alike)
            let mut sumi = _mm256_setzero_si256();
            for g in 0..8 {
                let y = load256(xb.add(4 + 32 * g));
                let p16 = _mm256_maddubs_epi16(q[g], y);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv[g]));
            }
            let bsums = load256(xb.add(4 + QK_K));
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
            sumi = _mm256_sub_epi32(sumi, offset);
            let dd = f32_load(xb) * d;
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), *acc);
        }
    }
    for c in 0..C {
        out[c] = hsum_f32x8(acc[c]);
    }
}
