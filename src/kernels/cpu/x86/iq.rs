//! AVX2 dot products of the non-linear quants (IQ4_NL against Q8_0, IQ4_XS against Q8_K).

use std::arch::x86_64::*;

use super::quants::blocks_q8_0;
use super::simd::{
    dot_i8_i8, f16_load, f32_load, hsum_f32x8, hsum_i32x8, load128, load256, mul_i8_pairs_i16,
};
use crate::kernels::cpu::blocks::*;

/// 16 bytes of IQ4 nibbles looked up in the code book: 32 i8 values, low nibbles first.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_lookup(p: *const u8) -> __m256i {
    let table = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast());
    let bits = load128(p);
    let m4 = _mm_set1_epi8(0xF);
    let lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4));
    _mm256_set_m128i(hi, lo)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, IQ4_NL_BYTES, x, |wb, xb| {
        dot_i8_i8(iq4_lookup(wb.add(2)), load256(xb.add(2)))
    })
}

/// ggml's `ggml_vec_dot_iq4_nl_q8_0` (AVX2 build), for mat-vecs: even and odd blocks on two
/// accumulators, added before the horizontal sum; an odd last block as one scalar FMA
/// (GCC fuses `sumf += d * sumi`).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl_vec_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 2];
    let block = |ib: usize| {
        let (wb, xb) = (w.add(ib * IQ4_NL_BYTES), x.add(ib * Q8_0_BYTES));
        let d = f16_load(xb) * f16_load(wb);
        (d, dot_i8_i8(iq4_lookup(wb.add(2)), load256(xb.add(2))))
    };
    let mut ib = 0;
    while ib + 1 < nb {
        for (h, acc) in acc.iter_mut().enumerate() {
            let (d, p) = block(ib + h);
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), *acc);
        }
        ib += 2;
    }
    let mut sumf = hsum_f32x8(_mm256_add_ps(acc[0], acc[1]));
    if ib < nb {
        let (d, p) = block(ib);
        sumf = (hsum_i32x8(p) as f32).mul_add(d, sumf);
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_xs_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (wb, xb) = (w.add(i * IQ4_XS_BYTES), x.add(i * Q8_K_BYTES));
        let block = std::slice::from_raw_parts(wb, IQ4_XS_BYTES);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let q = iq4_lookup(wb.add(8 + 16 * ib));
            let y = load256(xb.add(4 + 32 * ib));
            let ls = _mm256_set1_epi16(iq4_xs_scale(block, ib) as i16);
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(mul_i8_pairs_i16(q, y), ls));
        }
        let d = f32_load(xb) * f16_load(wb);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}
