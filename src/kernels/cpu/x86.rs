//! AVX2/FMA/F16C dot products, chosen at run time (`is_x86_feature_detected!`, checked once).
//!
//! The integer work follows ggml's AVX2 kernels (`ggml-cpu/arch/x86/quants.c`): unpack to
//! bytes, `maddubs` (u8 × i8 pairs into i16, sign trick for i8 × i8), `madd` into i32 (with
//! the sub-block scales for the K-quants), one FMA per block with the f32 scales. Results equal
//! the scalar reference up to f32 summation order.
//!
//! Each kernel is an `unsafe fn` with `#[target_feature]` taking raw pointers to whole blocks;
//! its safe wrapper (the [`DotFn`] installed in the table) checks the slice lengths first, and
//! the table is only handed out when the CPU has the features.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::blocks::*;
use super::DotFn;
use crate::gguf::GgmlType;

/// Whether this CPU has AVX2, FMA and F16C (checked once).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

/// The AVX2 dot product for `t`, when this CPU has AVX2+FMA+F16C.
pub fn dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    Some(match t {
        GgmlType::F32 => f32_dot,
        GgmlType::F16 => f16_dot,
        GgmlType::BF16 => bf16_dot,
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => q4_1,
        GgmlType::Q5_0 => q5_0,
        GgmlType::Q5_1 => q5_1,
        GgmlType::Q8_0 => q8_0,
        GgmlType::IQ4_NL => iq4_nl,
        GgmlType::Q2_K => q2_k,
        GgmlType::Q3_K => q3_k,
        GgmlType::Q4_K => q4_k,
        GgmlType::Q5_K => q5_k,
        GgmlType::Q6_K => q6_k,
        GgmlType::IQ4_XS => iq4_xs,
        _ => return None,
    })
}

/// Safe entry points: check that `w` and `x` hold the blocks the kernel reads, then call it.
macro_rules! entry {
    ($name:ident, $kernel:ident, $elems_per_block:expr, $w_bytes:expr, $x_bytes:expr) => {
        fn $name(n: usize, w: &[u8], x: &[u8]) -> f32 {
            let nb = n / $elems_per_block;
            assert!(
                w.len() >= nb * $w_bytes && x.len() >= nb * $x_bytes,
                "dot of {n}: {} / {} bytes",
                w.len(),
                x.len()
            );
            // SAFETY: this function is only reachable through `dot_fn`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; the kernel reads `nb` blocks of each
            // operand, whose presence was checked just above; unaligned loads throughout.
            unsafe { $kernel(nb, w.as_ptr(), x.as_ptr()) }
        }
    };
}

entry!(f32_dot, f32_avx2, 1, 4, 4);
entry!(f16_dot, f16_avx2, 1, 2, 2);
entry!(bf16_dot, bf16_avx2, 1, 2, 2);
entry!(q4_0, q4_0_avx2, QK, Q4_0_BYTES, Q8_0_BYTES);
entry!(q4_1, q4_1_avx2, QK, Q4_1_BYTES, Q8_1_BYTES);
entry!(q5_0, q5_0_avx2, QK, Q5_0_BYTES, Q8_0_BYTES);
entry!(q5_1, q5_1_avx2, QK, Q5_1_BYTES, Q8_1_BYTES);
entry!(q8_0, q8_0_avx2, QK, Q8_0_BYTES, Q8_0_BYTES);
entry!(iq4_nl, iq4_nl_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
entry!(q2_k, q2_k_avx2, QK_K, Q2_K_BYTES, Q8_K_BYTES);
entry!(q3_k, q3_k_avx2, QK_K, Q3_K_BYTES, Q8_K_BYTES);
entry!(q4_k, q4_k_avx2, QK_K, Q4_K_BYTES, Q8_K_BYTES);
entry!(q5_k, q5_k_avx2, QK_K, Q5_K_BYTES, Q8_K_BYTES);
entry!(q6_k, q6_k_avx2, QK_K, Q6_K_BYTES, Q8_K_BYTES);
entry!(iq4_xs, iq4_xs_avx2, QK_K, IQ4_XS_BYTES, Q8_K_BYTES);

// ------------------------------------------------------------------ helpers

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_f32x8(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// The f16 at `p` as f32 (one `vcvtph2ps`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_load(p: *const u8) -> f32 {
    let bits = p.cast::<u16>().read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_load(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast())
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p.cast())
}

/// 16 bytes of nibbles into 32 bytes: low nibbles in the low half (elements 0..16), high
/// nibbles in the high half (16..32), as ggml's `bytes_from_nibbles_32`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles_32(p: *const u8) -> __m256i {
    let tmp = load128(p);
    let bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    _mm256_and_si256(bytes, _mm256_set1_epi8(0xF))
}

/// 32 bits into 32 bytes: 0xFF where the bit is set (ggml's `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bits_32(p: *const u8) -> __m256i {
    let x32 = p.cast::<u32>().read_unaligned() as i32;
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Pairwise u8 × i8 products summed into 8 × i32 (ggml's `maddubs` + `madd(1)`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_u8_i8(ax: __m256i, sy: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// i8 × i8 through the sign trick (|x| × sign(x)·y), into 8 × i32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_i8_i8(x: __m256i, y: __m256i) -> __m256i {
    dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// i8 × i8 pairwise into 16 × i16 (sign trick), for the K-quant scale `madd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mul_i8_pairs_i16(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// A 16 × i16 vector: `lo` in lanes 0..8 (elements 0..16 of a 32-byte product), `hi` in 8..16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_2x16(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

// ------------------------------------------------------------------ float types

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_avx2(n: usize, w: *const u8, x: *const u8) -> f32 {
    let (w, x) = (w.cast::<f32>(), x.cast::<f32>());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (a, acc) in acc.iter_mut().enumerate() {
            let o = i + 8 * a;
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(o)), _mm256_loadu_ps(x.add(o)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(w.add(i)), _mm256_loadu_ps(x.add(i)), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum_f32x8(sum);
    while i < n {
        s += w.add(i).read_unaligned() * x.add(i).read_unaligned();
        i += 1;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_avx2(n: usize, w: *const u8, x: *const u8) -> f32 {
    let load = |p: *const u8, i: usize| _mm256_cvtph_ps(load128(p.add(2 * i)));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (a, acc) in acc.iter_mut().enumerate() {
            let o = i + 8 * a;
            *acc = _mm256_fmadd_ps(load(w, o), load(x, o), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load(w, i), load(x, i), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum_f32x8(sum);
    while i < n {
        s += f16_load(w.add(2 * i)) * f16_load(x.add(2 * i));
        i += 1;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16_avx2(n: usize, w: *const u8, x: *const u8) -> f32 {
    let load = |p: *const u8, i: usize| {
        _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(load128(p.add(2 * i))),
            16,
        ))
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (a, acc) in acc.iter_mut().enumerate() {
            let o = i + 8 * a;
            *acc = _mm256_fmadd_ps(load(w, o), load(x, o), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load(w, i), load(x, i), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum_f32x8(sum);
    let bf = |p: *const u8| f32::from_bits(u32::from(p.cast::<u16>().read_unaligned()) << 16);
    while i < n {
        s += bf(w.add(2 * i)) * bf(x.add(2 * i));
        i += 1;
    }
    s
}

// ------------------------------------------------------------------ 32-element blocks

/// Shared loop of the Q8_0-activation kernels: `block(wb, xb)` gives the 8 × i32 partial sums
/// of one block; two blocks per iteration on two accumulators.
#[inline(always)]
unsafe fn blocks_q8_0(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    x: *const u8,
    block: impl Fn(*const u8, *const u8) -> __m256i,
) -> f32 {
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut ib = 0;
    while ib + 1 < nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_0_BYTES));
        let (w1, x1) = (w0.add(wbytes), x0.add(Q8_0_BYTES));
        let d0 = _mm256_set1_ps(f16_load(w0) * f16_load(x0));
        let d1 = _mm256_set1_ps(f16_load(w1) * f16_load(x1));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(block(w0, x0)), acc0);
        acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(block(w1, x1)), acc1);
        ib += 2;
    }
    if ib < nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_0_BYTES));
        let d0 = _mm256_set1_ps(f16_load(w0) * f16_load(x0));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(block(w0, x0)), acc0);
    }
    hsum_f32x8(_mm256_add_ps(acc0, acc1))
}

/// Shared loop of the Q8_1-activation kernels (unsigned quants plus a min): `block` gives the
/// u8 × i8 sums; the min contributes `m · s` per block.
#[inline(always)]
unsafe fn blocks_q8_1(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    x: *const u8,
    block: impl Fn(*const u8, *const u8) -> __m256i,
) -> f32 {
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    let mut ib = 0;
    while ib + 1 < nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_1_BYTES));
        let (w1, x1) = (w0.add(wbytes), x0.add(Q8_1_BYTES));
        summs +=
            f16_load(w0.add(2)) * f16_load(x0.add(2)) + f16_load(w1.add(2)) * f16_load(x1.add(2));
        let d0 = _mm256_set1_ps(f16_load(w0) * f16_load(x0));
        let d1 = _mm256_set1_ps(f16_load(w1) * f16_load(x1));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(block(w0, x0)), acc0);
        acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(block(w1, x1)), acc1);
        ib += 2;
    }
    if ib < nb {
        let (w0, x0) = (w.add(ib * wbytes), x.add(ib * Q8_1_BYTES));
        summs += f16_load(w0.add(2)) * f16_load(x0.add(2));
        let d0 = _mm256_set1_ps(f16_load(w0) * f16_load(x0));
        acc0 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(block(w0, x0)), acc0);
    }
    hsum_f32x8(_mm256_add_ps(acc0, acc1)) + summs
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q4_0_BYTES, x, |wb, xb| {
        let qx = _mm256_sub_epi8(nibbles_32(wb.add(2)), _mm256_set1_epi8(8));
        dot_i8_i8(qx, load256(xb.add(2)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_1(nb, w, Q4_1_BYTES, x, |wb, xb| {
        dot_u8_i8(nibbles_32(wb.add(4)), load256(xb.add(4)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q5_0_BYTES, x, |wb, xb| {
        // Bit clear: the value is nibble - 16, i.e. the nibble with 0xF0 set, as an i8.
        let hi = _mm256_andnot_si256(bits_32(wb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        let qx = _mm256_or_si256(nibbles_32(wb.add(6)), hi);
        dot_i8_i8(qx, load256(xb.add(2)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_1(nb, w, Q5_1_BYTES, x, |wb, xb| {
        let hi = _mm256_and_si256(bits_32(wb.add(4)), _mm256_set1_epi8(0x10));
        let qx = _mm256_or_si256(nibbles_32(wb.add(8)), hi);
        dot_u8_i8(qx, load256(xb.add(4)))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, Q8_0_BYTES, x, |wb, xb| {
        dot_i8_i8(load256(wb.add(2)), load256(xb.add(2)))
    })
}

/// 16 bytes of IQ4 nibbles looked up in the code book: 32 i8 values, low nibbles first.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_lookup(p: *const u8) -> __m256i {
    let table = _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast());
    let bits = load128(p);
    let m4 = _mm_set1_epi8(0xF);
    let lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bits, 4), m4));
    _mm256_set_m128i(hi, lo)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    blocks_q8_0(nb, w, IQ4_NL_BYTES, x, |wb, xb| {
        dot_i8_i8(iq4_lookup(wb.add(2)), load256(xb.add(2)))
    })
}

// ------------------------------------------------------------------ K-quants (Q8_K activations)

/// Σ over the 16 activation bsums weighted by 16 i32 weights (the K-quant mins).
#[inline(always)]
unsafe fn bsums_dot(xb: *const u8, weights: &[i32; 16]) -> i32 {
    let mut s = 0;
    for (j, wgt) in weights.iter().enumerate() {
        s += i32::from(xb.add(4 + QK_K + 2 * j).cast::<i16>().read_unaligned()) * wgt;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0.0f32;
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q2_K_BYTES), x.add(i * Q8_K_BYTES));
        let yd = f32_load(xb);
        let scales = std::slice::from_raw_parts(wb, 16);
        let mins: [i32; 16] = std::array::from_fn(|j| i32::from(scales[j] >> 4));
        acc_min += yd * f16_load(wb.add(82)) * bsums_dot(xb, &mins) as f32;
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let qbits = load256(wb.add(16 + 32 * n));
            for j in 0..4 {
                let q =
                    _mm256_and_si256(_mm256_srl_epi16(qbits, _mm_cvtsi32_si128(2 * j as i32)), m3);
                let y = load256(xb.add(4 + 128 * n + 32 * j));
                let is = 8 * n + 2 * j;
                let sc = scales_2x16(i32::from(scales[is] & 0xF), i32::from(scales[is + 1] & 0xF));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc));
            }
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(yd * f16_load(wb.add(80))),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum_f32x8(acc) - acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q3_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q3_K_BYTES), x.add(i * Q8_K_BYTES));
        let scales = q3_k_scales(std::slice::from_raw_parts(wb.add(96), 12));
        let hmask = load256(wb);
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let qbits = load256(wb.add(32 + 32 * n));
            for j in 0..4 {
                let shift = _mm_cvtsi32_si128(2 * j as i32);
                let q = _mm256_and_si256(_mm256_srl_epi16(qbits, shift), m3);
                let bit = _mm256_set1_epi8((1u8 << (4 * n + j)) as i8);
                // 4 where the high bit is clear: those values are q - 4.
                let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
                let sub = _mm256_and_si256(clear, four);
                let y = load256(xb.add(4 + 128 * n + 32 * j));
                let p16 =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(sub, y));
                let is = 8 * n + 2 * j;
                let sc = scales_2x16(i32::from(scales[is]), i32::from(scales[is + 1]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, sc));
            }
        }
        let d = f32_load(xb) * f16_load(wb.add(108));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

/// The 8 scales and 8 mins of a Q4_K/Q5_K block.
#[inline(always)]
unsafe fn k4_scales(wb: *const u8) -> ([i32; 8], [i32; 16]) {
    let packed = std::slice::from_raw_parts(wb.add(4), 12);
    let mut sc = [0i32; 8];
    let mut mins = [0i32; 16];
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, packed);
        sc[j] = i32::from(s);
        // Each min covers 32 values = two bsums.
        mins[2 * j] = i32::from(m);
        mins[2 * j + 1] = i32::from(m);
    }
    (sc, mins)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0.0f32;
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q4_K_BYTES), x.add(i * Q8_K_BYTES));
        let yd = f32_load(xb);
        let (sc, mins) = k4_scales(wb);
        acc_min += yd * f16_load(wb.add(2)) * bsums_dot(xb, &mins) as f32;
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let qbits = load256(wb.add(16 + 32 * j));
            let ql = _mm256_and_si256(qbits, m4);
            let qh = _mm256_and_si256(_mm256_srli_epi16(qbits, 4), m4);
            let yl = load256(xb.add(4 + 64 * j));
            let yh = load256(xb.add(4 + 64 * j + 32));
            let pl = _mm256_madd_epi16(
                _mm256_maddubs_epi16(ql, yl),
                _mm256_set1_epi16(sc[2 * j] as i16),
            );
            let ph = _mm256_madd_epi16(
                _mm256_maddubs_epi16(qh, yh),
                _mm256_set1_epi16(sc[2 * j + 1] as i16),
            );
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(yd * f16_load(wb)),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum_f32x8(acc) - acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0.0f32;
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q5_K_BYTES), x.add(i * Q8_K_BYTES));
        let yd = f32_load(xb);
        let (sc, mins) = k4_scales(wb);
        acc_min += yd * f16_load(wb.add(2)) * bsums_dot(xb, &mins) as f32;
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
            let pl = _mm256_madd_epi16(
                _mm256_maddubs_epi16(ql, yl),
                _mm256_set1_epi16(sc[2 * j] as i16),
            );
            let ph = _mm256_madd_epi16(
                _mm256_maddubs_epi16(qh, yh),
                _mm256_set1_epi16(sc[2 * j + 1] as i16),
            );
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(yd * f16_load(wb)),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum_f32x8(acc) - acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let m2 = _mm256_set1_epi8(3);
    let m32 = _mm256_set1_epi8(32);
    let mut acc = _mm256_setzero_ps();
    for i in 0..nb {
        let (wb, xb) = (w.add(i * Q6_K_BYTES), x.add(i * Q8_K_BYTES));
        let sc = std::slice::from_raw_parts(wb.add(192), 16);
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let ql0 = load256(wb.add(64 * n));
            let ql1 = load256(wb.add(64 * n + 32));
            let qh = load256(wb.add(128 + 32 * n));
            let high = |s: i32| {
                let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), m2);
                _mm256_slli_epi16(h, 4)
            };
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6)),
            ];
            for (p, qp) in q.iter().enumerate() {
                let y = load256(xb.add(4 + 128 * n + 32 * p));
                // (q - 32)·y as q·y - 32·y, both through maddubs (q is 0..63).
                let p16 =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(*qp, y), _mm256_maddubs_epi16(m32, y));
                let s = &sc[8 * n + 2 * p..];
                let scv = scales_2x16(i32::from(s[0] as i8), i32::from(s[1] as i8));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, scv));
            }
        }
        let d = f32_load(xb) * f16_load(wb.add(208));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_f32x8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_xs_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
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
