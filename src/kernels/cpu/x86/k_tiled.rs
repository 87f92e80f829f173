//! AVX2 products in the float order of upstream's tiled K-quant matmul (`ggml-cpu/tiled/`,
//! see `dot_tiled.rs` for the order): Q2_K..Q6_K and IQ4_XS against Q8_K activations, a weight
//! block unpacked once for `C` activation rows. The integer sums reuse the vec_dot kernels'
//! unpacking (`k_quants.rs`, `iq.rs`); only the per-block float steps differ from them.

use std::arch::x86_64::*;

use super::iq::iq4_lookup;
use super::k_quants::{k4_mins_dot, k4_scales, q3_k_scales_simd};
use super::simd::{
    f16_load, f32_load, hsum_i32x4, hsum_i32x8, load128, load256, mul_i8_pairs_i16, pair_scales,
};
use crate::kernels::cpu::blocks::*;

/// The tiled chain over `nb` blocks for `C` activation rows (`xs` bytes apart): per block
/// the weight's `(d, dmin)` and unpacked form once, then per row the exact integers
/// `(s1, s2)` and upstream's three roundings (`dmin` only where `MIN`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chain<const C: usize, const MIN: bool, U>(
    nb: usize,
    w: *const u8,
    w_bytes: usize,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
    scales: impl Fn(*const u8) -> (f32, f32),
    unpack: impl Fn(*const u8) -> U,
    ints: impl Fn(&U, *const u8) -> (i32, i32),
) {
    let mut acc = [0f32; C];
    for i in 0..nb {
        let wb = w.add(i * w_bytes);
        let (d, dmin) = scales(wb);
        let u = unpack(wb);
        for (c, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(c * xs + i * Q8_K_BYTES);
            let (s1, s2) = ints(&u, xb);
            let mut res = d * s1 as f32;
            if MIN {
                res = (-dmin).mul_add(s2 as f32, res);
            }
            *acc = res.mul_add(f32_load(xb), *acc);
        }
    }
    *out = acc;
}

/// Σ_g madd(maddubs(q[g], y_g), scales[g]) over the 8 32-byte groups of a Q8_K block, summed.
#[inline(always)]
unsafe fn scaled_sum(q: &[__m256i; 8], sc: &[__m256i; 8], xb: *const u8) -> i32 {
    let mut sumi = _mm256_setzero_si256();
    for g in 0..8 {
        let y = load256(xb.add(4 + 32 * g));
        sumi = _mm256_add_epi32(
            sumi,
            _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], y), sc[g]),
        );
    }
    hsum_i32x8(sumi)
}

/// The 2-bit codes of a Q2_K / Q3_K block (`qs` at `p`, 64 bytes) as 8 groups of 32 bytes in
/// element order.
#[inline(always)]
unsafe fn codes_2bit(p: *const u8) -> [__m256i; 8] {
    let m3 = _mm256_set1_epi8(3);
    let mut q = [_mm256_setzero_si256(); 8];
    for n in 0..2 {
        let bits = load256(p.add(32 * n));
        for j in 0..4 {
            let shift = _mm_cvtsi32_si128(2 * j as i32);
            q[4 * n + j] = _mm256_and_si256(_mm256_srl_epi16(bits, shift), m3);
        }
    }
    q
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_k_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    let m4 = _mm_set1_epi8(0xF);
    chain::<C, true, _>(
        nb,
        w,
        Q2_K_BYTES,
        x,
        xs,
        out,
        |wb| (f16_load(wb.add(80)), f16_load(wb.add(82))),
        |wb| {
            let packed = load128(wb);
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
            let scv = pair_scales(_mm_and_si128(packed, m4));
            (codes_2bit(wb.add(16)), scv, mins)
        },
        |(q, scv, mins), xb| {
            let s2 = hsum_i32x8(_mm256_madd_epi16(*mins, load256(xb.add(4 + QK_K))));
            (scaled_sum(q, scv, xb), s2)
        },
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q3_k_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    let four = _mm256_set1_epi8(4);
    chain::<C, false, _>(
        nb,
        w,
        Q3_K_BYTES,
        x,
        xs,
        out,
        |wb| (f16_load(wb.add(108)), 0.0),
        |wb| {
            let hmask = load256(wb);
            // 4 where the high bit is clear: those values are code - 4
            let mut sub = [_mm256_setzero_si256(); 8];
            for (g, s) in sub.iter_mut().enumerate() {
                let bit = _mm256_set1_epi8((1u8 << g) as i8);
                let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
                *s = _mm256_and_si256(clear, four);
            }
            (
                codes_2bit(wb.add(32)),
                sub,
                pair_scales(q3_k_scales_simd(wb.add(96))),
            )
        },
        |(q, sub, scv), xb| {
            let mut sumi = _mm256_setzero_si256();
            for g in 0..8 {
                let y = load256(xb.add(4 + 32 * g));
                let p16 = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(q[g], y),
                    _mm256_maddubs_epi16(sub[g], y),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv[g]));
            }
            (hsum_i32x8(sumi), 0)
        },
    )
}

/// Q4_K (`Q5 = false`) and Q5_K codes, scales and mins of one block.
#[inline(always)]
unsafe fn k4_unpack<const Q5: bool>(wb: *const u8) -> ([__m256i; 8], [__m256i; 8], __m128i) {
    let m4 = _mm256_set1_epi8(0xF);
    let (scv, mins) = k4_scales(wb);
    let qs = wb.add(if Q5 { 48 } else { 16 });
    let hbits = load256(wb.add(16));
    let sixteen = _mm256_set1_epi8(16);
    let mut q = [_mm256_setzero_si256(); 8];
    for j in 0..4 {
        let bits = load256(qs.add(32 * j));
        q[2 * j] = _mm256_and_si256(bits, m4);
        q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    }
    if Q5 {
        for (g, q) in q.iter_mut().enumerate() {
            let b = _mm256_set1_epi8((1u8 << g) as i8);
            let high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, b), b), sixteen);
            *q = _mm256_or_si256(*q, high);
        }
    }
    (q, scv, mins)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    k4_tiled::<C, false>(nb, w, Q4_K_BYTES, x, xs, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    k4_tiled::<C, true>(nb, w, Q5_K_BYTES, x, xs, out)
}

#[inline(always)]
unsafe fn k4_tiled<const C: usize, const Q5: bool>(
    nb: usize,
    w: *const u8,
    w_bytes: usize,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    chain::<C, true, _>(
        nb,
        w,
        w_bytes,
        x,
        xs,
        out,
        |wb| (f16_load(wb), f16_load(wb.add(2))),
        |wb| k4_unpack::<Q5>(wb),
        |(q, scv, mins), xb| (scaled_sum(q, scv, xb), hsum_i32x4(k4_mins_dot(xb, *mins))),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    let m4 = _mm256_set1_epi8(0xF);
    let m2 = _mm256_set1_epi8(3);
    chain::<C, false, _>(
        nb,
        w,
        Q6_K_BYTES,
        x,
        xs,
        out,
        |wb| (f16_load(wb.add(208)), 0.0),
        |wb| {
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
            let scv = pair_scales(load128(wb.add(192)));
            (q, scv, _mm256_cvtepi8_epi16(load128(wb.add(192))))
        },
        |(q, scv, scales16), xb| {
            // codes 0..63, then the -32 offset as 32 · Σ scale · bsum
            let offset = _mm256_madd_epi16(load256(xb.add(4 + QK_K)), *scales16);
            (scaled_sum(q, scv, xb) - 32 * hsum_i32x8(offset), 0)
        },
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs_tiled_cols<const C: usize>(
    nb: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
) {
    chain::<C, false, _>(
        nb,
        w,
        IQ4_XS_BYTES,
        x,
        xs,
        out,
        |wb| (f16_load(wb), 0.0),
        |wb| {
            let block = std::slice::from_raw_parts(wb, IQ4_XS_BYTES);
            let mut q = [_mm256_setzero_si256(); 8];
            let mut ls = [_mm256_setzero_si256(); 8];
            for ib in 0..8 {
                q[ib] = iq4_lookup(wb.add(8 + 16 * ib));
                ls[ib] = _mm256_set1_epi16(iq4_xs_scale(block, ib) as i16);
            }
            (q, ls)
        },
        |(q, ls), xb| {
            let mut sumi = _mm256_setzero_si256();
            for ib in 0..8 {
                let y = load256(xb.add(4 + 32 * ib));
                sumi =
                    _mm256_add_epi32(sumi, _mm256_madd_epi16(mul_i8_pairs_i16(q[ib], y), ls[ib]));
            }
            (hsum_i32x8(sumi), 0)
        },
    )
}
