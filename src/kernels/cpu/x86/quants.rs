//! AVX2 dot products of the legacy 32-element quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against
//! Q8_0 / Q8_1 activations (ggml's `arch/x86/quants.c`).

use std::arch::x86_64::*;

use super::simd::{bits_32, dot_i8_i8, dot_u8_i8, hsum_f32x8, load256, nibbles_32};
use crate::kernels::cpu::blocks::*;

/// `d_w · d_x` of a block and its Q8_0 activation block (both f16 at offset 0), converted in
/// one instruction, broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_q8_0(wb: *const u8, xb: *const u8) -> __m256 {
    let w = i32::from(wb.cast::<u16>().read_unaligned());
    let x = i32::from(xb.cast::<u16>().read_unaligned());
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(w | (x << 16)));
    _mm256_broadcastss_ps(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// Shared loop of the Q8_0-activation kernels: `block(wb, xb)` gives the 8 × i32 partial sums
/// of one block; two blocks per iteration on two accumulators.
#[inline(always)]
pub(super) unsafe fn blocks_q8_0(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    x: *const u8,
    block: impl Fn(*const u8, *const u8) -> __m256i,
) -> f32 {
    // One accumulator, blocks in order: the float order of ggml's AVX2 kernels, so results
    // are bit-identical to upstream's.
    let mut acc = _mm256_setzero_ps();
    for ib in 0..nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_0_BYTES));
        acc = _mm256_fmadd_ps(scale_q8_0(w0, x0), _mm256_cvtepi32_ps(block(w0, x0)), acc);
    }
    hsum_f32x8(acc)
}

/// `[d_w, m_w, d_x, s_x]` of a Q4_1/Q5_1 block and its Q8_1 activation block, converted
/// from f16 in one instruction (both pairs sit at offset 0), multiplied pairwise:
/// `[d_w·d_x, m_w·s_x, _, _]`. One conversion instead of four scalar ones per block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_q8_1(wb: *const u8, xb: *const u8) -> __m128 {
    let w = wb.cast::<i32>().read_unaligned();
    let x = xb.cast::<i32>().read_unaligned();
    let v = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(w), x, 1));
    _mm_mul_ps(v, _mm_movehl_ps(v, v))
}

/// Shared loop of the Q8_1-activation kernels (unsigned quants plus a min): `block` gives the
/// u8 × i8 sums; the min contributes `m · s` per block (lane 1 of the scale products).
#[inline(always)]
unsafe fn blocks_q8_1(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    x: *const u8,
    block: impl Fn(*const u8, *const u8) -> __m256i,
) -> f32 {
    // One accumulator and the min terms summed block by block, as ggml's AVX2 kernels: the
    // same float order, so results are bit-identical to upstream's.
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for ib in 0..nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_1_BYTES));
        let s0 = scales_q8_1(w0, x0);
        summs += _mm_cvtss_f32(_mm_movehdup_ps(s0));
        acc = _mm256_fmadd_ps(
            _mm256_broadcastss_ps(s0),
            _mm256_cvtepi32_ps(block(w0, x0)),
            acc,
        );
    }
    hsum_f32x8(acc) + summs
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q4_0_BYTES, x, |wb, xb| {
        let qx = _mm256_sub_epi8(nibbles_32(wb.add(2)), _mm256_set1_epi8(8));
        dot_i8_i8(qx, load256(xb.add(2)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_1(nb, w, Q4_1_BYTES, x, |wb, xb| {
        dot_u8_i8(nibbles_32(wb.add(4)), load256(xb.add(4)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q5_0_BYTES, x, |wb, xb| {
        // Bit clear: the value is nibble - 16, i.e. the nibble with 0xF0 set, as an i8.
        let hi = _mm256_andnot_si256(bits_32(wb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        let qx = _mm256_or_si256(nibbles_32(wb.add(6)), hi);
        dot_i8_i8(qx, load256(xb.add(2)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_1(nb, w, Q5_1_BYTES, x, |wb, xb| {
        let hi = _mm256_and_si256(bits_32(wb.add(4)), _mm256_set1_epi8(0x10));
        let qx = _mm256_or_si256(nibbles_32(wb.add(8)), hi);
        dot_u8_i8(qx, load256(xb.add(4)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q8_0_BYTES, x, |wb, xb| {
        dot_i8_i8(load256(wb.add(2)), load256(xb.add(2)))
    })
}
