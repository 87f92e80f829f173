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
use super::{DotFn, Tile, TileFn, TileOut, TILE_COLS, TILE_RUN_ROWS};
use crate::gguf::GgmlType;

/// Whether this CPU has AVX2, FMA and F16C (checked once), and the SIMD kernels are not
/// turned off with `LLAMA_HOTSWAP_KERNELS=scalar` (to run the scalar reference end to end, as
/// on a CPU without AVX2).
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let forced_scalar =
            std::env::var_os("LLAMA_HOTSWAP_KERNELS").is_some_and(|v| v == "scalar");
        !forced_scalar
            && is_x86_feature_detected!("avx2")
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

/// The AVX2 dot for `t` in a matrix-vector product (one activation row), where upstream's
/// order differs from its batched products: F16 and BF16 run ggml's `ggml_vec_dot_f16` /
/// `ggml_vec_dot_bf16` there (four 8-lane accumulators over 32-element steps), IQ4_NL its
/// `ggml_vec_dot_iq4_nl_q8_0` (even and odd blocks on two accumulators), while batched
/// products run llamafile's tinyBLAS (one accumulator, [`dot_fn`]'s order). Other types:
/// [`dot_fn`].
pub fn matvec_dot_fn(t: GgmlType) -> Option<DotFn> {
    if !available() {
        return None;
    }
    match t {
        GgmlType::F16 => Some(dot_f16_ggml_bytes),
        GgmlType::BF16 => Some(bf16_vec_dot),
        GgmlType::IQ4_NL => Some(iq4_nl_vec),
        _ => dot_fn(t),
    }
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
entry!(bf16_vec_dot, bf16_vec_avx2, 1, 2, 2);
entry!(q4_0, q4_0_avx2, QK, Q4_0_BYTES, Q8_0_BYTES);
entry!(q4_1, q4_1_avx2, QK, Q4_1_BYTES, Q8_1_BYTES);
entry!(q5_0, q5_0_avx2, QK, Q5_0_BYTES, Q8_0_BYTES);
entry!(q5_1, q5_1_avx2, QK, Q5_1_BYTES, Q8_1_BYTES);
entry!(q8_0, q8_0_avx2, QK, Q8_0_BYTES, Q8_0_BYTES);
entry!(iq4_nl, iq4_nl_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
entry!(iq4_nl_vec, iq4_nl_vec_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
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

/// `_mm256_shuffle_epi8` masks for [`pair_scales`]: from 8 i16 (duplicated in both halves),
/// lane 2h to the low half and lane 2h + 1 to the high half.
static PAIR_MASKS: [[u8; 32]; 4] = {
    let mut masks = [[0u8; 32]; 4];
    let mut h = 0;
    while h < 4 {
        let mut b = 0;
        while b < 32 {
            let lane = 2 * h + b / 16;
            masks[h][b] = (2 * lane + b % 2) as u8;
            b += 1;
        }
        h += 1;
    }
    masks
};

/// 16 i8 sub-block scales (of 16 values each) as 8 vectors: vector g holds scale 2g in its
/// low 8 i16 lanes and scale 2g + 1 in its high 8, matching a 32-byte `maddubs` product.
#[inline(always)]
unsafe fn pair_scales(sc: __m128i) -> [__m256i; 8] {
    let lo = _mm_cvtepi8_epi16(sc);
    let hi = _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8));
    let (vlo, vhi) = (_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi));
    let mut out = [_mm256_setzero_si256(); 8];
    for (g, o) in out.iter_mut().enumerate() {
        let mask = _mm256_loadu_si256(PAIR_MASKS[g % 4].as_ptr().cast());
        *o = _mm256_shuffle_epi8(if g < 4 { vlo } else { vhi }, mask);
    }
    out
}

// ------------------------------------------------------------------ float types

/// Own kernels rather than the `gemm` crate (measured 2026-11-23, one thread, same process):
/// for F16 (the KV cache's default type and F16 models) ours is as fast or faster (K·Q 512×64
/// ·128: 0.32 vs 0.33 ms; V·P 64×512·128: 0.15 vs 0.29 ms; 1536×576·128: 3.8 vs 5.5 ms) and
/// keeps ggml's semantics (f16-rounded activations, f32 accumulation; gemm's f16 path returns
/// f16); for F32 gemm is 1.3–2.5× faster, but F32 matmuls are rare in the models served (F32
/// KV cache only), and batch-size-invariant results need one arithmetic per output.
///
/// Dot products of one float row `w` with `C` activation rows `xs` bytes apart. Per output the
/// arithmetic is fixed whatever `C` is — one 8-lane FMA accumulator over 8-element steps, the
/// horizontal sum of ggml's kernels, then the scalar tail in order (llamafile's tinyBLAS, which
/// upstream runs for float matmuls, sums in this order) — so batched products (the 1 × 4 tile)
/// equal mat-vecs bit for bit.
/// `load(p, i)` gives 8 values from element `i`, `scalar(p, i)` one.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_cols<const C: usize>(
    n: usize,
    w: *const u8,
    x: *const u8,
    xs: usize,
    out: &mut [f32; C],
    load: impl Fn(*const u8, usize) -> __m256,
    scalar: impl Fn(*const u8, usize) -> f32,
) {
    // one 8-lane FMA accumulator per output over 8-element steps, then ggml's horizontal sum:
    // the order of llamafile's tinyBLAS, which upstream runs for float matmuls
    let mut acc = [_mm256_setzero_ps(); C];
    let mut i = 0;
    while i + 8 <= n {
        let a0 = load(w, i);
        for (c, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(a0, load(x.add(c * xs), i), *acc);
        }
        i += 8;
    }
    for (c, acc) in acc.iter().enumerate() {
        let mut s = hsum_f32x8(*acc);
        for e in i..n {
            s += scalar(w, e) * scalar(x.add(c * xs), e);
        }
        out[c] = s;
    }
}

#[inline(always)]
unsafe fn load_f32(p: *const u8, i: usize) -> __m256 {
    _mm256_loadu_ps(p.cast::<f32>().add(i))
}

#[inline(always)]
unsafe fn scalar_f32(p: *const u8, i: usize) -> f32 {
    p.cast::<f32>().add(i).read_unaligned()
}

#[inline(always)]
unsafe fn load_f16(p: *const u8, i: usize) -> __m256 {
    _mm256_cvtph_ps(load128(p.add(2 * i)))
}

#[inline(always)]
unsafe fn scalar_f16(p: *const u8, i: usize) -> f32 {
    f16_load(p.add(2 * i))
}

#[inline(always)]
unsafe fn load_bf16(p: *const u8, i: usize) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(load128(p.add(2 * i))),
        16,
    ))
}

#[inline(always)]
unsafe fn scalar_bf16(p: *const u8, i: usize) -> f32 {
    f32::from_bits(u32::from(p.add(2 * i).cast::<u16>().read_unaligned()) << 16)
}

/// `$name(n, w, x)`: the one-row float dot of [`float_cols`] for the element type that `$load`
/// (8 lanes) and `$scalar` (the tail) read.
macro_rules! float_dot {
    ($name:ident, $load:ident, $scalar:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name(n: usize, w: *const u8, x: *const u8) -> f32 {
            let mut out = [0f32; 1];
            float_cols::<1>(
                n,
                w,
                x,
                0,
                &mut out,
                |p, i| $load(p, i),
                |p, i| $scalar(p, i),
            );
            out[0]
        }
    };
}

float_dot!(f32_avx2, load_f32, scalar_f32);
float_dot!(f16_avx2, load_f16, scalar_f16);
float_dot!(bf16_avx2, load_bf16, scalar_bf16);

/// ggml's `ggml_vec_dot_bf16` in upstream's AVX2 build: four 8-lane accumulators over
/// 32-element steps (GCC fuses its `add(mul(x, y), c)` into FMAs), summed as
/// `(c1 + c3) + (c2 + c4)`, then the horizontal sum, and the tail in f64.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16_vec_avx2(n: usize, w: *const u8, x: *const u8) -> f32 {
    let np = n & !31;
    let mut c = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < np {
        for (j, c) in c.iter_mut().enumerate() {
            *c = _mm256_fmadd_ps(load_bf16(w, i + 8 * j), load_bf16(x, i + 8 * j), *c);
        }
        i += 32;
    }
    let s = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    let mut sumf = f64::from(hsum_f32x8(s));
    for e in np..n {
        sumf += f64::from(scalar_bf16(w, e) * scalar_bf16(x, e));
    }
    sumf as f32
}

// ------------------------------------------------------------------ 32-element blocks

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
unsafe fn blocks_q8_0(
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

/// ggml's `ggml_vec_dot_iq4_nl_q8_0` (AVX2 build), for mat-vecs: even and odd blocks on two
/// accumulators, added before the horizontal sum; an odd last block as one scalar FMA
/// (GCC fuses `sumf += d * sumi`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_vec_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
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

// ------------------------------------------------------------------ K-quants (Q8_K activations)

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
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
unsafe fn q3_k_scales_simd(p: *const u8) -> __m128i {
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
unsafe fn q3_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
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
unsafe fn k4_scales(wb: *const u8) -> ([__m256i; 8], __m128i) {
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
unsafe fn k4_mins_dot(xb: *const u8, mins: __m128i) -> __m128i {
    let bsums = load256(xb.add(4 + QK_K));
    let pairs = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    _mm_madd_epi16(mins, pairs)
}

/// Σ of 4 i32 lanes (exact: integer).
#[inline(always)]
unsafe fn hsum_i32x4(x: __m128i) -> i32 {
    let r = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
    _mm_cvtsi128_si32(_mm_add_epi32(r, _mm_shuffle_epi32(r, 0b01)))
}

#[inline(always)]
unsafe fn hsum_f32x4(x: __m128) -> f32 {
    let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut out = [0f32; 1];
    q4_k_cols::<1>(nb, w, x, 0, &mut out);
    out[0]
}

/// Q4_K against `C` activation rows `xs` bytes apart: the weight block's scales and nibbles
/// are unpacked once for all columns; each column's arithmetic is the same for any `C`.
#[inline(always)]
unsafe fn q4_k_cols<const C: usize>(
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
unsafe fn q5_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
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
unsafe fn q6_k_avx2(nb: usize, w: *const u8, x: *const u8) -> f32 {
    let mut out = [0f32; 1];
    q6_k_cols::<1>(nb, w, x, 0, &mut out);
    out[0]
}

/// Q6_K against `C` activation rows `xs` bytes apart (weights unpacked once per block).
#[inline(always)]
unsafe fn q6_k_cols<const C: usize>(
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

// ------------------------------------------------------------------ tiles (batched products)

/// The main tile shape for `t` (weight rows × activation rows per call), when this CPU has
/// AVX2 and tiles are written for `t`. Register tiles as llamafile's tinyBLAS on a 16-register
/// AVX2 machine: 4 × 2 for the Q8_0-activation types (its `tinyBLAS_Q0_AVX` `gemm4xN<2>`;
/// Q8_0's in hand-allocated registers), 4 × 3 for F16 (tinyBLAS's `gemm<4, 3>`, in
/// hand-allocated registers: compiled from the generic tile it spilled its 12 accumulators),
/// 4 × 2 for F32/BF16; Q4_1/Q5_1 (which upstream multiplies one dot at a time) 2 × 4; the
/// K-quants 1 × 4. Smaller shapes for the
/// edges come from [`tile_shape`].
pub fn tile_fn(t: GgmlType) -> Option<Tile> {
    let (rows, cols) = match t {
        GgmlType::F16 => (4, 3),
        GgmlType::F32 | GgmlType::BF16 => (4, 2),
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => (4, 2),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (2, 4),
        GgmlType::Q4_K | GgmlType::Q6_K => (1, 4),
        _ => return None,
    };
    tile_shape(t, rows, cols)
}

/// The tile kernel of exactly `rows` × `cols` outputs for `t` (each at most the main shape's,
/// see [`tile_fn`]), when this CPU has AVX2 and one exists.
pub fn tile_shape(t: GgmlType, rows: usize, cols: usize) -> Option<Tile> {
    if !available() {
        return None;
    }
    /// `$entry::<R, C>` for the requested shape (R, C in 1..=4).
    macro_rules! shapes {
        ($entry:ident) => {
            match (rows, cols) {
                (1, 1) => $entry::<1, 1> as TileFn,
                (1, 2) => $entry::<1, 2>,
                (1, 3) => $entry::<1, 3>,
                (1, 4) => $entry::<1, 4>,
                (2, 1) => $entry::<2, 1>,
                (2, 2) => $entry::<2, 2>,
                (2, 3) => $entry::<2, 3>,
                (2, 4) => $entry::<2, 4>,
                (3, 1) => $entry::<3, 1>,
                (3, 2) => $entry::<3, 2>,
                (3, 3) => $entry::<3, 3>,
                (3, 4) => $entry::<3, 4>,
                (4, 1) => $entry::<4, 1>,
                (4, 2) => $entry::<4, 2>,
                (4, 3) => $entry::<4, 3>,
                (4, 4) => $entry::<4, 4>,
                _ => return None,
            }
        };
    }
    let f = match t {
        GgmlType::F32 => shapes!(f32_tile),
        GgmlType::F16 => shapes!(f16_tile),
        GgmlType::BF16 => shapes!(bf16_tile),
        GgmlType::Q4_0 => shapes!(q4_0_tile),
        GgmlType::Q4_1 => shapes!(q4_1_tile),
        GgmlType::Q5_0 => shapes!(q5_0_tile),
        GgmlType::Q5_1 => shapes!(q5_1_tile),
        GgmlType::Q8_0 => shapes!(q8_0_tile),
        GgmlType::IQ4_NL => shapes!(iq4_nl_tile),
        GgmlType::Q4_K if rows == 1 => shapes!(q4_k_tile),
        GgmlType::Q6_K if rows == 1 => shapes!(q6_k_tile),
        _ => return None,
    };
    Some(Tile { rows, cols, f })
}

/// Where a tile kernel puts its `R` × `C` outputs: the run's output columns, from weight row
/// `row0` of the run (written straight there: a copy through a small buffer stalled on
/// store forwarding).
struct TileDst<'a> {
    out: &'a mut TileOut,
    row0: usize,
}

impl TileDst<'_> {
    /// The output of weight row `r` and activation row `c` of this tile.
    #[inline(always)]
    fn set(&mut self, r: usize, c: usize, v: f32) {
        self.out[c][self.row0 + r] = v;
    }
}

/// Safe entry points of the tile kernels (`R` weight rows × `C` activation rows), for a run of
/// `tiles` tiles along the weight rows: check that every row the kernels read is inside the
/// slices, then call the kernel once per tile (a direct call; the checks and the dispatch
/// are paid once per run).
macro_rules! tile_entry {
    ($name:ident, $kernel:ident, $elems_per_block:expr, $w_bytes:expr, $x_bytes:expr) => {
        fn $name<const R: usize, const C: usize>(
            k: usize,
            tiles: usize,
            w: &[u8],
            w_stride: usize,
            x: &[u8],
            x_stride: usize,
            out: &mut TileOut,
        ) {
            let nb = k / $elems_per_block;
            let rows = tiles * R;
            assert!(
                tiles > 0
                    && rows <= TILE_RUN_ROWS
                    && C <= TILE_COLS
                    && w.len() >= (rows - 1) * w_stride + nb * $w_bytes
                    && x.len() >= (C - 1) * x_stride + nb * $x_bytes,
                "{tiles} tiles of {k}: {} / {} bytes",
                w.len(),
                x.len()
            );
            /// The run's tiles, one kernel call each, compiled with the kernel's features so
            /// the kernel inlines here (no call per tile).
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn run<const R: usize, const C: usize>(
                nb: usize,
                tiles: usize,
                w: *const u8,
                w_stride: usize,
                x: *const u8,
                x_stride: usize,
                out: &mut TileOut,
            ) {
                for t in 0..tiles {
                    let mut dst = TileDst {
                        out: &mut *out,
                        row0: t * R,
                    };
                    // SAFETY: as `run`'s caller guarantees for the whole run
                    unsafe {
                        $kernel::<R, C>(
                            nb,
                            w.add(t * R * w_stride),
                            w_stride,
                            x,
                            x_stride,
                            &mut dst,
                        )
                    };
                }
            }
            // SAFETY: reachable only through `tile_shape`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; each kernel reads `nb` blocks of `R` weight
            // rows from row `t * R` (below `rows`) and of the `C` activation rows at the given
            // strides, all inside the slices as checked above, and writes its `R` × `C`
            // outputs at rows `t * R..` of `out` (bounds-checked).
            unsafe { run::<R, C>(nb, tiles, w.as_ptr(), w_stride, x.as_ptr(), x_stride, out) }
        }
    };
}

tile_entry!(f32_tile, f32_tile_avx2, 1, 4, 4);
tile_entry!(f16_tile, f16_tile_avx2, 1, 2, 2);
tile_entry!(bf16_tile, bf16_tile_avx2, 1, 2, 2);
tile_entry!(q4_0_tile, q4_0_tile_avx2, QK, Q4_0_BYTES, Q8_0_BYTES);
tile_entry!(q4_1_tile, q4_1_tile_avx2, QK, Q4_1_BYTES, Q8_1_BYTES);
tile_entry!(q8_0_tile, q8_0_tile_avx2, QK, Q8_0_BYTES, Q8_0_BYTES);
tile_entry!(q5_0_tile, q5_0_tile_avx2, QK, Q5_0_BYTES, Q8_0_BYTES);
tile_entry!(q5_1_tile, q5_1_tile_avx2, QK, Q5_1_BYTES, Q8_1_BYTES);
tile_entry!(iq4_nl_tile, iq4_nl_tile_avx2, QK, IQ4_NL_BYTES, Q8_0_BYTES);
tile_entry!(q4_k_tile, q4_k_tile_avx2, QK_K, Q4_K_BYTES, Q8_K_BYTES);
tile_entry!(q6_k_tile, q6_k_tile_avx2, QK_K, Q6_K_BYTES, Q8_K_BYTES);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    _ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut cols = [0f32; C];
    q4_k_cols::<C>(nb, w, x, xs, &mut cols);
    for (c, &v) in cols.iter().enumerate() {
        out.set(0, c, v);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    _ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut cols = [0f32; C];
    q6_k_cols::<C>(nb, w, x, xs, &mut cols);
    for (c, &v) in cols.iter().enumerate() {
        out.set(0, c, v);
    }
}

/// `R` × `C` outputs of a float product (weight rows `ws` bytes apart, activation rows `xs`
/// apart): every 8-element step loads each operand row once and feeds `R · C` accumulators,
/// as tinyBLAS's `gemm_bloc`. Per output the arithmetic is [`float_cols`]'s (one 8-lane FMA
/// accumulator, ggml's horizontal sum, the scalar tail in order), so a tile equals the dot
/// products of its outputs bit for bit.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_tile<const R: usize, const C: usize>(
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    load: impl Fn(*const u8, usize) -> __m256,
    scalar: impl Fn(*const u8, usize) -> f32,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    let mut i = 0;
    while i + 8 <= n {
        // keep the smaller side's vectors in registers (tinyBLAS's "help compiler" split)
        if R <= C {
            let a: [__m256; R] = std::array::from_fn(|r| load(w.add(r * ws), i));
            for (c, acc) in acc.iter_mut().enumerate() {
                let b = load(x.add(c * xs), i);
                for (acc, a) in acc.iter_mut().zip(&a) {
                    *acc = _mm256_fmadd_ps(*a, b, *acc);
                }
            }
        } else {
            let b: [__m256; C] = std::array::from_fn(|c| load(x.add(c * xs), i));
            for r in 0..R {
                let a = load(w.add(r * ws), i);
                for (acc, b) in acc.iter_mut().zip(&b) {
                    acc[r] = _mm256_fmadd_ps(a, *b, acc[r]);
                }
            }
        }
        i += 8;
    }
    float_tile_finish::<R, C>(&acc, i, n, w, ws, x, xs, out, scalar);
}

/// The end of a float tile: each accumulator's horizontal sum, then the scalar tail from
/// element `i` on, in order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn float_tile_finish<const R: usize, const C: usize>(
    acc: &[[__m256; R]; C],
    i: usize,
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    scalar: impl Fn(*const u8, usize) -> f32,
) {
    for (c, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            let mut s = hsum_f32x8(*acc);
            for e in i..n {
                s += scalar(w.add(r * ws), e) * scalar(x.add(c * xs), e);
            }
            out.set(r, c, s);
        }
    }
}

/// The 4 × 3 F16 tile (the main shape, tinyBLAS's `gemm<4, 3>` on AVX2) with its registers
/// assigned by hand: [`float_tile`]'s operations in its order (so the same bits), which LLVM
/// could only compile with spilled accumulators (it measured slower than 4 × 2 that way).
/// Registers: ymm0–11 the accumulators (`acc[c][r]` in ymm`4c + r`), ymm12–14 the three
/// activation vectors of a step, ymm15 one weight vector.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_tile_4x3_asm(
    n: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut acc = [[_mm256_setzero_ps(); 4]; 3];
    let steps = n / 8;
    if steps > 0 {
        let [[a0, a1, a2, a3], [a4, a5, a6, a7], [a8, a9, a10, a11]] = &mut acc;
        // SAFETY: the caller guarantees `n` f16 values in each of the 4 weight rows `ws` bytes
        // apart and the 3 activation rows `xs` bytes apart, and AVX2/FMA/F16C; the loop reads
        // the first `8 * steps` values of each row and writes only the registers named as
        // outputs or clobbers.
        std::arch::asm!(
            ".p2align 6",
            "2:",
            "vcvtph2ps ymm12, xmmword ptr [{x}]",
            "vcvtph2ps ymm13, xmmword ptr [{x} + {xs}]",
            "vcvtph2ps ymm14, xmmword ptr [{x} + {xs}*2]",
            "vcvtph2ps ymm15, xmmword ptr [{w}]",
            "vfmadd231ps ymm0, ymm15, ymm12",
            "vfmadd231ps ymm4, ymm15, ymm13",
            "vfmadd231ps ymm8, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w} + {ws}]",
            "vfmadd231ps ymm1, ymm15, ymm12",
            "vfmadd231ps ymm5, ymm15, ymm13",
            "vfmadd231ps ymm9, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w} + {ws}*2]",
            "vfmadd231ps ymm2, ymm15, ymm12",
            "vfmadd231ps ymm6, ymm15, ymm13",
            "vfmadd231ps ymm10, ymm15, ymm14",
            "vcvtph2ps ymm15, xmmword ptr [{w3}]",
            "vfmadd231ps ymm3, ymm15, ymm12",
            "vfmadd231ps ymm7, ymm15, ymm13",
            "vfmadd231ps ymm11, ymm15, ymm14",
            "add {w}, 16",
            "add {w3}, 16",
            "add {x}, 16",
            "dec {n}",
            "jnz 2b",
            w = inout(reg) w => _,
            w3 = inout(reg) w.add(3 * ws) => _,
            ws = in(reg) ws,
            x = inout(reg) x => _,
            xs = in(reg) xs,
            n = inout(reg) steps => _,
            inout("ymm0") *a0,
            inout("ymm1") *a1,
            inout("ymm2") *a2,
            inout("ymm3") *a3,
            inout("ymm4") *a4,
            inout("ymm5") *a5,
            inout("ymm6") *a6,
            inout("ymm7") *a7,
            inout("ymm8") *a8,
            inout("ymm9") *a9,
            inout("ymm10") *a10,
            inout("ymm11") *a11,
            out("ymm12") _,
            out("ymm13") _,
            out("ymm14") _,
            out("ymm15") _,
            options(nostack, readonly),
        );
    }
    let scalar = |p, i| scalar_f16(p, i);
    float_tile_finish::<4, 3>(&acc, 8 * steps, n, w, ws, x, xs, out, scalar);
}

/// `$name::<R, C>`: the float tile of [`float_tile`] for the element type that `$load` and
/// `$scalar` read; with `fast: $asm`, the 4 × 3 shape goes to that hand-allocated kernel.
macro_rules! float_tile_entry {
    ($name:ident, $load:ident, $scalar:ident $(, fast: $asm:ident)?) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const R: usize, const C: usize>(
            n: usize,
            w: *const u8,
            ws: usize,
            x: *const u8,
            xs: usize,
            out: &mut TileDst<'_>,
        ) {
            $(
                if R == 4 && C == 3 {
                    return $asm(n, w, ws, x, xs, out);
                }
            )?
            float_tile::<R, C>(
                n,
                w,
                ws,
                x,
                xs,
                out,
                |p, i| $load(p, i),
                |p, i| $scalar(p, i),
            );
        }
    };
}

float_tile_entry!(f32_tile_avx2, load_f32, scalar_f32);
float_tile_entry!(f16_tile_avx2, load_f16, scalar_f16, fast: f16_tile_4x3_asm);
float_tile_entry!(bf16_tile_avx2, load_bf16, scalar_bf16);

/// Up to 4 f16 values `stride` bytes apart (the first `N`; the other lanes 0) as f32 lanes,
/// converted in one instruction.
#[inline(always)]
unsafe fn f16_lanes<const N: usize>(p: *const u8, stride: usize) -> __m128 {
    let h = |i: usize| {
        if i < N {
            i32::from(p.add(i * stride).cast::<u16>().read_unaligned())
        } else {
            0
        }
    };
    _mm_cvtph_ps(_mm_setr_epi32(
        h(0) | (h(1) << 16),
        h(2) | (h(3) << 16),
        0,
        0,
    ))
}

/// Lane `i` (0..4) of each 128-bit half of `v` in every lane of that half.
#[inline(always)]
unsafe fn lane256(v: __m256, i: usize) -> __m256 {
    match i {
        0 => _mm256_permute_ps::<0x00>(v),
        1 => _mm256_permute_ps::<0x55>(v),
        2 => _mm256_permute_ps::<0xAA>(v),
        _ => _mm256_permute_ps::<0xFF>(v),
    }
}

/// `R` × `C` outputs of a Q8_0-activation product (weight rows `ws` bytes apart, activation
/// rows `xs` apart): each weight block is unpacked once (`prepare`) and used for `C`
/// activation blocks (`dot`), as tinyBLAS_Q0_AVX's `gemm4xN`. Per output the arithmetic is
/// exactly the mat-vec kernel's ([`blocks_q8_0`]: `d_w · d_x` rounded to f32, one FMA into one
/// accumulator per block, blocks in order, ggml's horizontal sum), so results do not depend on
/// the tiling.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q8_0<const R: usize, const C: usize, P: Copy>(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    prepare: impl Fn(*const u8) -> P,
    dot: impl Fn(P, *const u8) -> __m256i,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    // the products d_w · d_x of one block, read back with broadcast loads: kept in memory
    // (`black_box`) so that they hold no vector register in the loop below, where the
    // R × C accumulators, one weight block, its |q| and the C activation blocks must fit
    // in the 16 registers of AVX2 (spilled accumulators cost 1.5× on a 4 × 2 tile)
    let mut dd = [[0f32; 4]; C];
    for ib in 0..nb {
        let wb = w.add(ib * wbytes);
        let xb = x.add(ib * Q8_0_BYTES);
        // the R weight scales and the C activation scales, one conversion each; one multiply
        // per column gives its R products (each rounds as `scale_q8_0`'s)
        let wd = f16_lanes::<R>(wb, ws);
        let xd = f16_lanes::<C>(xb, xs);
        for (c, dd) in dd.iter_mut().enumerate() {
            let xc = _mm256_castps256_ps128(lane256(_mm256_set_m128(xd, xd), c));
            _mm_storeu_ps(dd.as_mut_ptr(), _mm_mul_ps(wd, xc));
        }
        let dd = std::hint::black_box(&dd);
        for r in 0..R {
            let q = prepare(wb.add(r * ws));
            for (c, acc) in acc.iter_mut().enumerate() {
                let p = _mm256_cvtepi32_ps(dot(q, xb.add(c * xs)));
                acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&dd[c][r]), p, acc[r]);
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        for (r, acc) in acc.iter().enumerate() {
            out.set(r, c, hsum_f32x8(*acc));
        }
    }
}

/// Signed weight quants `q` against the Q8_0 activation block at `xb` (the sign trick of
/// [`dot_i8_i8`]; `|q|` is recomputed per use rather than kept: fewer live registers).
#[inline(always)]
unsafe fn signed_dot(q: __m256i, xb: *const u8) -> __m256i {
    dot_i8_i8(q, load256(xb.add(2)))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q4_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| _mm256_sub_epi8(nibbles_32(wb.add(2)), _mm256_set1_epi8(8)),
        |p, xb| signed_dot(p, xb),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    if R == 4 && C == 2 {
        return q8_0_tile_4x2_asm(nb, w, ws, x, xs, out);
    }
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q8_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| load256(wb.add(2)),
        |p, xb| signed_dot(p, xb),
    )
}

/// Every f16 value as f32, indexed by its bits (upstream's `ggml_table_f32_f16`): the Q8_0 tile
/// converts activation scales by one load each instead of vector work, as tinyBLAS does.
/// Exact conversions, so the scale products keep their bits.
static F16_TO_F32: [f32; 1 << 16] = {
    let mut table = [0f32; 1 << 16];
    let mut i = 0;
    while i < table.len() {
        table[i] = half::f16::from_bits(i as u16).to_f32_const();
        i += 1;
    }
    table
};

/// The 4 × 2 Q8_0 tile (the main shape) with its registers assigned by hand: the same
/// operations in the same order as [`tile_q8_0`] (so the same bits), but LLVM's allocation of
/// the generic kernel spilled accumulators and block values every block and ran 1.35–1.45×
/// slower than upstream's tinyBLAS `gemm4xN<2>`. Registers: ymm0–7 the accumulators
/// (`acc[c][r]` in ymm`4c + r`), ymm8/9 the two activation blocks, ymm10/11 one weight block
/// and its `|q|`, ymm12/13 a product and its scale, ymm14/15 the 4 scale products
/// `d_w · d_x` of each column, in both halves (`madd`'s i16 ones are read from memory). The
/// vector pipes are the limit, so the scales take as few vector operations as tinyBLAS's:
/// the weights' gathered in a general register, the activations' read from [`F16_TO_F32`]
/// (broadcasting each product from a stored copy by loads instead of shuffles measured
/// slower).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_tile_4x2_asm(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    let mut acc = [_mm256_setzero_ps(); 8];
    if nb > 0 {
        let ones = _mm256_set1_epi16(1);
        let [a0, a1, a2, a3, a4, a5, a6, a7] = &mut acc;
        // SAFETY: the caller guarantees `nb` Q8_0 blocks (34 bytes) in each of the 4 weight
        // rows `ws` bytes apart and the 2 activation rows `xs` bytes apart, and AVX2/FMA/F16C;
        // the loop reads only those blocks, `ones` and entries of the 65536-entry table indexed
        // by 16-bit values, and writes only the registers named as outputs or clobbers.
        std::arch::asm!(
            ".p2align 6",
            "2:",
            // the 4 weight scales gathered in a general register (integer work), converted
            // at once and copied to both halves; the 2 activation scales from the f16 table
            // (loads, no vector work); their 8 products, 4 per column
            "movzx {t:e}, word ptr [{w}]",
            "movzx {u:e}, word ptr [{w} + {ws}]",
            "shl {u}, 16",
            "or {t}, {u}",
            "movzx {u:e}, word ptr [{w} + {ws}*2]",
            "shl {u}, 32",
            "or {t}, {u}",
            "movzx {u:e}, word ptr [{w3}]",
            "shl {u}, 48",
            "or {t}, {u}",
            "vmovq xmm12, {t}",
            "vcvtph2ps xmm12, xmm12",
            "vinsertf128 ymm12, ymm12, xmm12, 1",
            "movzx {t:e}, word ptr [{x}]",
            "vbroadcastss ymm14, dword ptr [{tab} + {t}*4]",
            "vmulps ymm14, ymm14, ymm12",
            "movzx {t:e}, word ptr [{x} + {xs}]",
            "vbroadcastss ymm15, dword ptr [{tab} + {t}*4]",
            "vmulps ymm15, ymm15, ymm12",
            "vmovdqu ymm8, ymmword ptr [{x} + 2]",
            "vmovdqu ymm9, ymmword ptr [{x} + {xs} + 2]",
            // weight row 0: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0x00",
            "vfmadd231ps ymm0, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0x00",
            "vfmadd231ps ymm4, ymm12, ymm13",
            // weight row 1: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + {ws} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0x55",
            "vfmadd231ps ymm1, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0x55",
            "vfmadd231ps ymm5, ymm12, ymm13",
            // weight row 2: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w} + {ws}*2 + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0xAA",
            "vfmadd231ps ymm2, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0xAA",
            "vfmadd231ps ymm6, ymm12, ymm13",
            // weight row 3: |q| and its products with both activation blocks
            "vmovdqu ymm10, ymmword ptr [{w3} + 2]",
            "vpsignb ymm11, ymm10, ymm10",
            "vpsignb ymm12, ymm8, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm14, 0xFF",
            "vfmadd231ps ymm3, ymm12, ymm13",
            "vpsignb ymm12, ymm9, ymm10",
            "vpmaddubsw ymm12, ymm11, ymm12",
            "vpmaddwd ymm12, ymm12, ymmword ptr [{ones}]",
            "vcvtdq2ps ymm12, ymm12",
            "vpermilps ymm13, ymm15, 0xFF",
            "vfmadd231ps ymm7, ymm12, ymm13",
            "add {w}, 34",
            "add {w3}, 34",
            "add {x}, 34",
            "dec {n}",
            "jnz 2b",
            w = inout(reg) w => _,
            w3 = inout(reg) w.add(3 * ws) => _,
            ws = in(reg) ws,
            x = inout(reg) x => _,
            xs = in(reg) xs,
            n = inout(reg) nb => _,
            ones = in(reg) &ones,
            tab = in(reg) F16_TO_F32.as_ptr(),
            t = out(reg) _,
            u = out(reg) _,
            inout("ymm0") *a0,
            inout("ymm1") *a1,
            inout("ymm2") *a2,
            inout("ymm3") *a3,
            inout("ymm4") *a4,
            inout("ymm5") *a5,
            inout("ymm6") *a6,
            inout("ymm7") *a7,
            out("ymm8") _,
            out("ymm9") _,
            out("ymm10") _,
            out("ymm11") _,
            out("ymm12") _,
            out("ymm13") _,
            out("ymm14") _,
            out("ymm15") _,
            options(nostack, readonly),
        );
    }
    for (i, a) in acc.iter().enumerate() {
        out.set(i % 4, i / 4, hsum_f32x8(*a));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        Q5_0_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| {
            let hi = _mm256_andnot_si256(bits_32(wb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles_32(wb.add(6)), hi)
        },
        |p, xb| signed_dot(p, xb),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nl_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_0::<R, C, _>(
        nb,
        w,
        IQ4_NL_BYTES,
        ws,
        x,
        xs,
        out,
        |wb| iq4_lookup(wb.add(2)),
        |p, xb| signed_dot(p, xb),
    )
}

/// `R` × `C` outputs of a Q8_1-activation product (Q4_1, Q5_1): each weight block unpacked
/// once (`unpack` gives its 32 unsigned quants) and used for `C` activation blocks. Per output
/// exactly the mat-vec kernel's arithmetic ([`blocks_q8_1`]: `d_w · d_x` and `m_w · s_x`
/// rounded to f32, one FMA per block into one accumulator, the min terms summed block by
/// block, both in block order), so results do not depend on the tiling.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_q8_1<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    wbytes: usize,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
    unpack: impl Fn(*const u8) -> __m256i,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; C];
    // per column, lane 2r + 1 sums row r's min terms (the even lanes are unused)
    let mut summs = [_mm256_setzero_ps(); C];
    let pair = |p: *const u8| p.cast::<i32>().read_unaligned();
    for ib in 0..nb {
        let wb = w.add(ib * wbytes);
        let xb = x.add(ib * Q8_1_BYTES);
        // [d_0, m_0, d_1, m_1, ...] of the R weight blocks, one conversion
        let row = |r: usize| if r < R { pair(wb.add(r * ws)) } else { 0 };
        let wdm = _mm256_cvtph_ps(_mm_setr_epi32(row(0), row(1), row(2), row(3)));
        let q: [__m256i; R] = std::array::from_fn(|r| unpack(wb.add(r * ws)));
        for c in 0..C {
            let xc = xb.add(c * xs);
            // [d_r · d_x, m_r · s_x] for every row r, one conversion and one multiply
            let prod = _mm256_mul_ps(wdm, _mm256_cvtph_ps(_mm_set1_epi32(pair(xc))));
            summs[c] = _mm256_add_ps(summs[c], prod);
            let mut d = [0f32; 8];
            _mm256_storeu_ps(d.as_mut_ptr(), prod);
            let y = load256(xc.add(4));
            for (r, q) in q.iter().enumerate() {
                let p = _mm256_cvtepi32_ps(dot_u8_i8(*q, y));
                acc[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(d[2 * r]), p, acc[c][r]);
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        let mut s = [0f32; 8];
        _mm256_storeu_ps(s.as_mut_ptr(), summs[c]);
        for (r, acc) in acc.iter().enumerate() {
            out.set(r, c, hsum_f32x8(*acc) + s[2 * r + 1]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_1::<R, C>(nb, w, Q4_1_BYTES, ws, x, xs, out, |wb| {
        nibbles_32(wb.add(4))
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1_tile_avx2<const R: usize, const C: usize>(
    nb: usize,
    w: *const u8,
    ws: usize,
    x: *const u8,
    xs: usize,
    out: &mut TileDst<'_>,
) {
    tile_q8_1::<R, C>(nb, w, Q5_1_BYTES, ws, x, xs, out, |wb| {
        let hi = _mm256_and_si256(bits_32(wb.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles_32(wb.add(8)), hi)
    })
}

// ------------------------------------------------------------------ activation quantizers

/// Q8_0 (`sum == false`) or Q8_1 (`sum == true`) quantization of `x` (a multiple of 32
/// values), bit-exact with the scalar `quantize::q8_0` / `q8_1` (ggml's AVX2 quantizer: scale
/// from the block's largest magnitude, multiply by 127 / amax, round half to even, saturating
/// packs). Returns false when the SIMD path is unavailable.
pub fn quantize_q8(x: &[f32], dst: &mut [u8], sum: bool) -> bool {
    if !available() {
        return false;
    }
    let nb = x.len() / QK;
    let block = if sum { Q8_1_BYTES } else { Q8_0_BYTES };
    assert!(
        dst.len() >= nb * block,
        "quantize_q8: {} bytes for {nb} blocks",
        dst.len()
    );
    // SAFETY: AVX2/FMA/F16C are available (checked above); the kernel reads nb * 32 floats of
    // `x` and writes nb blocks of `dst`, both within the slices (x.len() >= nb * 32 by the
    // definition of nb, dst checked above).
    unsafe { quantize_q8_avx2(x.as_ptr(), nb, dst.as_mut_ptr(), sum) };
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8_avx2(x: *const f32, nb: usize, dst: *mut u8, sum: bool) {
    let sign = _mm256_set1_ps(-0.0);
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let (block, qs) = if sum {
        (Q8_1_BYTES, 4)
    } else {
        (Q8_0_BYTES, 2)
    };
    for i in 0..nb {
        let xp = x.add(i * QK);
        let v = [
            _mm256_loadu_ps(xp),
            _mm256_loadu_ps(xp.add(8)),
            _mm256_loadu_ps(xp.add(16)),
            _mm256_loadu_ps(xp.add(24)),
        ];
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vv in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vv));
        }
        let mut m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let mul = _mm256_set1_ps(id);
        let q: [__m256i; 4] = std::array::from_fn(|j| {
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm256_mul_ps(v[j], mul),
            );
            _mm256_cvtps_epi32(r)
        });
        let out = dst.add(i * block);
        let d_bits = _mm_extract_epi16::<0>(_mm_cvtps_ph::<0>(_mm_set_ss(d))) as u16;
        out.cast::<u16>().write_unaligned(d_bits);
        if sum {
            let total =
                _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s = d * hsum_i32x8(total) as f32;
            let s_bits = _mm_extract_epi16::<0>(_mm_cvtps_ph::<0>(_mm_set_ss(s))) as u16;
            out.add(2).cast::<u16>().write_unaligned(s_bits);
        }
        let p16a = _mm256_packs_epi32(q[0], q[1]);
        let p16b = _mm256_packs_epi32(q[2], q[3]);
        let p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), perm);
        _mm256_storeu_si256(out.add(qs).cast(), p8);
    }
}

#[inline(always)]
unsafe fn hsum_i32x8(x: __m256i) -> i32 {
    let r = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
    let r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    let r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0b01));
    _mm_cvtsi128_si32(r)
}

/// f32 to f16 (round to nearest even, as `half` and ggml's `_mm256_cvtps_ph(x, 0)`), 8 at a
/// time. Returns false when the SIMD path is unavailable.
pub fn convert_f16(x: &[f32], dst: &mut [u8]) -> bool {
    if !available() {
        return false;
    }
    assert!(
        dst.len() >= 2 * x.len(),
        "convert_f16: {} bytes for {} values",
        dst.len(),
        x.len()
    );
    let n8 = x.len() / 8 * 8;
    // SAFETY: F16C is available (checked above); reads x[..n8] and writes dst[..2 * n8], both
    // inside the slices (dst checked above).
    unsafe { convert_f16_f16c(x.as_ptr(), n8, dst.as_mut_ptr()) };
    for (v, out) in x[n8..].iter().zip(dst[2 * n8..].chunks_exact_mut(2)) {
        out.copy_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
    }
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn convert_f16_f16c(x: *const f32, n8: usize, dst: *mut u8) {
    let mut i = 0;
    while i < n8 {
        let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(x.add(i)));
        _mm_storeu_si128(dst.add(2 * i).cast(), h);
        i += 8;
    }
}

// ------------------------------------------------------------------ attention helpers

/// [`super::ops::f16_scale_mad`] with F16C: 8 values at a time, each rounded to half precision
/// after the scale and after the FMA exactly as the scalar version does (`cvtps_ph` rounds to
/// nearest even, as `half::f16::from_f32`). False when the CPU lacks the features.
pub fn f16_scale_mad(acc: &mut [half::f16], v: &[half::f16], ms: Option<f32>, vs: f32) -> bool {
    if !available() {
        return false;
    }
    assert!(
        v.len() >= acc.len(),
        "f16 mad: v shorter than the accumulator"
    );
    // SAFETY: the features were checked just above; `acc` has `acc.len()` elements and `v` at
    // least as many (asserted), and `half::f16` is `repr(transparent)` over `u16`, so the
    // kernel's 2-byte unaligned loads and stores stay inside both slices.
    unsafe {
        f16_scale_mad_avx2(
            acc.as_mut_ptr().cast::<u16>(),
            v.as_ptr().cast::<u16>(),
            acc.len(),
            ms,
            vs,
        )
    };
    true
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_scale_mad_avx2(acc: *mut u16, v: *const u16, n: usize, ms: Option<f32>, vs: f32) {
    let vvs = _mm256_set1_ps(vs);
    let mut i = 0;
    while i + 8 <= n {
        let pa = acc.add(i).cast::<__m128i>();
        let mut a = _mm256_cvtph_ps(_mm_loadu_si128(pa));
        if let Some(ms) = ms {
            let scaled = _mm256_mul_ps(a, _mm256_set1_ps(ms));
            a = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(scaled));
        }
        let x = _mm256_cvtph_ps(_mm_loadu_si128(v.add(i).cast::<__m128i>()));
        let r = _mm256_fmadd_ps(x, vvs, a);
        _mm_storeu_si128(pa, _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(r));
        i += 8;
    }
    if i < n {
        let acc = std::slice::from_raw_parts_mut(acc.add(i).cast::<half::f16>(), n - i);
        let v = std::slice::from_raw_parts(v.add(i).cast::<half::f16>(), n - i);
        super::ops::f16_scale_mad_scalar(acc, v, ms, vs);
    }
}

/// [`super::ops::dot_f16_ggml`] with F16C/FMA in ggml's order; None without the features.
pub fn dot_f16_ggml(x: &[half::f16], y: &[half::f16]) -> Option<f32> {
    if !available() {
        return None;
    }
    let n = x.len().min(y.len());
    // SAFETY: features checked above; the kernel reads `n` elements of each slice (n is the
    // shorter length), `half::f16` being `repr(transparent)` over `u16`; unaligned loads.
    Some(unsafe { dot_f16_ggml_avx2(x.as_ptr().cast::<u16>(), y.as_ptr().cast::<u16>(), n) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16_ggml_avx2(x: *const u16, y: *const u16, n: usize) -> f32 {
    let np = n & !31;
    let (mut s0, mut s1, mut s2, mut s3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut i = 0;
    while i < np {
        let (xp, yp) = (x.add(i).cast::<u8>(), y.add(i).cast::<u8>());
        s0 = _mm256_fmadd_ps(load_f16(xp, 0), load_f16(yp, 0), s0);
        s1 = _mm256_fmadd_ps(load_f16(xp, 8), load_f16(yp, 8), s1);
        s2 = _mm256_fmadd_ps(load_f16(xp, 16), load_f16(yp, 16), s2);
        s3 = _mm256_fmadd_ps(load_f16(xp, 24), load_f16(yp, 24), s3);
        i += 32;
    }
    s0 = _mm256_add_ps(s0, s2);
    s1 = _mm256_add_ps(s1, s3);
    s0 = _mm256_add_ps(s0, s1);
    let t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    let t1 = _mm_hadd_ps(t0, t0);
    let mut sumf = f64::from(_mm_cvtss_f32(_mm_hadd_ps(t1, t1)));
    for e in np..n {
        let a = f16_load(x.add(e).cast());
        let b = f16_load(y.add(e).cast());
        sumf += f64::from(a * b);
    }
    sumf as f32
}

/// The AVX2 kernels for a repacked layout (see `repack.rs`), when this CPU has AVX2.
pub fn repacked_kernels(kind: super::repack::RepackKind) -> Option<super::repack::GroupKernels> {
    if !available() {
        return None;
    }
    use super::repack::{GroupKernels, RepackKind};
    Some(match kind {
        RepackKind::Q4_0x8 => GroupKernels::from_parts(q4_0x8_group::<1>, q4_0x8_group::<4>),
        RepackKind::Iq4NlX8 => GroupKernels::from_parts(iq4_nlx8_group::<1>, iq4_nlx8_group::<4>),
        RepackKind::Q4Kx8 => {
            GroupKernels::from_parts(q4_kx8_group::<1, false>, q4_kx8_group::<4, true>)
        }
    })
}

/// Safe entry of the Q4Kx8 group kernel: checks the slices, then runs the AVX2 code.
fn q4_kx8_group<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    meta: [&[u32]; C],
    out: &mut [[f32; super::repack::ROWS]; C],
) {
    use super::repack::Q4KX8_BYTES;
    assert!(
        w.len() >= nb * Q4KX8_BYTES
            && x.iter().all(|x| x.len() >= nb * Q8_K_BYTES)
            && meta.iter().all(|m| m.len() >= 9 * nb),
        "repacked Q4_K group of {nb} blocks: {} bytes",
        w.len()
    );
    // SAFETY: reachable only through `repacked_kernels`, which hands it out when `available()`
    // saw AVX2, FMA and F16C; the kernel reads `nb` blocks of `Q4KX8_BYTES` of `w`, `nb`
    // Q8_K blocks of every `x` row and `9 nb` words of every `meta` row, present as checked
    // above; unaligned loads throughout.
    unsafe {
        q4_kx8_group_avx2::<C, PER_SB>(
            nb,
            w.as_ptr(),
            x.map(<[u8]>::as_ptr),
            meta.map(<[u32]>::as_ptr),
            out,
        )
    }
}

/// One 8-row group of a repacked Q4_K weight times `C` Q8_K activation rows, in upstream's
/// float order (see `repack::q4_kx8_scalar`): per pair of sub-blocks, the 8 rows' exact
/// `Σ scale · dot` (unsigned nibbles × i8 through `maddubs`, 4 pieces summed in i16, `madd`
/// by the sub-block scales) and `Σ min · bsum`; FMAs per pair (`PER_SB`, upstream's gemm) or
/// per super-block (its gemv); `acc - acc_min` at the end. Lanes in `hadd` order until the
/// final permutation.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_kx8_group_avx2<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    use super::repack::Q4KX8_BYTES;
    let m4 = _mm256_set1_epi8(0x0F);
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let rep = [
        _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
    ];
    let mut acc = [_mm256_setzero_ps(); C];
    let mut accm = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * Q4KX8_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let dm = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk.add(16))), order);
        let mut dwx = [_mm256_setzero_ps(); C];
        let mut dmx = [_mm256_setzero_ps(); C];
        for c in 0..C {
            let dx = _mm256_set1_ps(f32::from_bits(meta[c].add(9 * b).read()));
            dwx[c] = _mm256_mul_ps(dw, dx);
            dmx[c] = _mm256_mul_ps(dm, dx);
        }
        let mut isum_b = [_mm256_setzero_si256(); C];
        let mut imin_b = [_mm256_setzero_si256(); C];
        for sb in 0..4 {
            let scales = |sub: usize, h: usize| {
                let v = _mm_loadl_epi64(blk.add(32 + sub * 8).cast());
                _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, rep[h]))
            };
            let sl = [scales(2 * sb, 0), scales(2 * sb, 1)];
            let sh = [scales(2 * sb + 1, 0), scales(2 * sb + 1, 1)];
            let mins = |sub: usize| {
                let v = _mm_loadl_epi64(blk.add(96 + sub * 8).cast());
                _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(v), order)
            };
            let (ml, mh) = (mins(2 * sb), mins(2 * sb + 1));
            let base = blk.add(160 + sb * 256);
            let mut lo = [[_mm256_setzero_si256(); 2]; 4];
            let mut hi = [[_mm256_setzero_si256(); 2]; 4];
            for p in 0..4 {
                for h in 0..2 {
                    let v = load256(base.add(p * 64 + h * 32));
                    lo[p][h] = _mm256_and_si256(v, m4);
                    hi[p][h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                }
            }
            for c in 0..C {
                let q = x[c].add(b * Q8_K_BYTES + 4 + 64 * sb);
                let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
                let al = [bcast(0), bcast(8), bcast(16), bcast(24)];
                let ah = [bcast(32), bcast(40), bcast(48), bcast(56)];
                let mut halves = [_mm256_setzero_si256(); 2];
                for (h, half) in halves.iter_mut().enumerate() {
                    let sum = |w: &[[__m256i; 2]; 4], a: &[__m256i; 4]| {
                        _mm256_add_epi16(
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[0][h], a[0]),
                                _mm256_maddubs_epi16(w[1][h], a[1]),
                            ),
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(w[2][h], a[2]),
                                _mm256_maddubs_epi16(w[3][h], a[3]),
                            ),
                        )
                    };
                    *half = _mm256_add_epi32(
                        _mm256_madd_epi16(sum(&lo, &al), sl[h]),
                        _mm256_madd_epi16(sum(&hi, &ah), sh[h]),
                    );
                }
                let isum = _mm256_hadd_epi32(halves[0], halves[1]);
                let mt = meta[c].add(9 * b + 1 + 2 * sb);
                let imin = _mm256_add_epi32(
                    _mm256_mullo_epi32(ml, _mm256_set1_epi32(mt.read() as i32)),
                    _mm256_mullo_epi32(mh, _mm256_set1_epi32(mt.add(1).read() as i32)),
                );
                if PER_SB {
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dwx[c], acc[c]);
                    accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), dmx[c], accm[c]);
                } else {
                    isum_b[c] = _mm256_add_epi32(isum_b[c], isum);
                    imin_b[c] = _mm256_add_epi32(imin_b[c], imin);
                }
            }
        }
        if !PER_SB {
            for c in 0..C {
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum_b[c]), dwx[c], acc[c]);
                accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin_b[c]), dmx[c], accm[c]);
            }
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(
            out[c].as_mut_ptr(),
            _mm256_permutevar8x32_ps(_mm256_sub_ps(acc[c], accm[c]), order),
        );
    }
}

/// Safe entries of the 8-row group kernels over Q8_0 activations: check that `w` holds `nb`
/// repacked blocks of 8 rows (`$block_bytes` per row) and every activation row `nb` Q8_0
/// blocks and `2 nb` metadata words, then run the AVX2 code.
macro_rules! group_entry {
    ($name:ident, $kernel:ident, $block_bytes:expr, $type_name:literal) => {
        fn $name<const C: usize>(
            nb: usize,
            w: &[u8],
            x: [&[u8]; C],
            meta: [&[u32]; C],
            out: &mut [[f32; super::repack::ROWS]; C],
        ) {
            assert!(
                w.len() >= nb * 8 * $block_bytes
                    && x.iter().all(|x| x.len() >= nb * Q8_0_BYTES)
                    && meta.iter().all(|m| m.len() >= 2 * nb),
                concat!("repacked ", $type_name, " group of {} blocks: {} bytes"),
                nb,
                w.len()
            );
            // SAFETY: reachable only through `repacked_kernels`, which hands it out when
            // `available()` saw AVX2, FMA and F16C; the kernel reads `nb` blocks of
            // `8 * $block_bytes` bytes of `w`, `nb` Q8_0 blocks of every `x` row and `2 nb`
            // words of every `meta` row, present as checked above; unaligned loads throughout.
            unsafe {
                $kernel::<C>(
                    nb,
                    w.as_ptr(),
                    x.map(<[u8]>::as_ptr),
                    meta.map(<[u32]>::as_ptr),
                    out,
                )
            }
        }
    };
}

group_entry!(iq4_nlx8_group, iq4_nlx8_group_avx2, IQ4_NL_BYTES, "IQ4_NL");
group_entry!(q4_0x8_group, q4_0x8_group_avx2, Q4_0_BYTES, "Q4_0");

/// One 8-row group of a repacked IQ4_NL weight times `C` Q8_0 activation rows: nibbles
/// through the value table, i8 × i8 products by the sign trick, each `maddubs` widened to
/// i32 (values up to 127 in magnitude: i16 sums of several could overflow), then upstream's
/// `acc = fma(isum, d_w · d_x, acc)` per row, as in [`q4_0x8_group_avx2`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn iq4_nlx8_group_avx2<const C: usize>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let lut = _mm256_broadcastsi128_si256(load128(KVALUES_IQ4NL.as_ptr().cast()));
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 8 * IQ4_NL_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let r0 = load256(blk.add(16));
        let r1 = load256(blk.add(48));
        let r2 = load256(blk.add(80));
        let r3 = load256(blk.add(112));
        let lo = |v: __m256i| _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
        let hi =
            |v: __m256i| _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        let (u0, u1, u2, u3) = (lo(r0), lo(r2), hi(r0), hi(r2));
        let (v0, v1, v2, v3) = (lo(r1), lo(r3), hi(r1), hi(r3));
        for c in 0..C {
            let q = x[c].add(b * Q8_0_BYTES + 2);
            let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
            let (a0, a1, a2, a3) = (bcast(0), bcast(8), bcast(16), bcast(24));
            let s03 = _mm256_add_epi32(
                _mm256_add_epi32(dot_i8_i8(u0, a0), dot_i8_i8(u1, a1)),
                _mm256_add_epi32(dot_i8_i8(u2, a2), dot_i8_i8(u3, a3)),
            );
            let s47 = _mm256_add_epi32(
                _mm256_add_epi32(dot_i8_i8(v0, a0), dot_i8_i8(v1, a1)),
                _mm256_add_epi32(dot_i8_i8(v2, a2), dot_i8_i8(v3, a3)),
            );
            let isum = _mm256_hadd_epi32(s03, s47);
            let dx = _mm256_set1_ps(f32::from_bits(meta[c].add(2 * b).read()));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc[c]);
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(out[c].as_mut_ptr(), _mm256_permutevar8x32_ps(acc[c], order));
    }
}

/// One 8-row group of a repacked Q4_0 weight times `C` Q8_0 activation rows. Per block and
/// activation row: the 8 exact integer dot products (unsigned nibbles × i8 through `maddubs`,
/// summed in i16 — at most 4 × 2 × 15 × 127 — then `madd` into i32, minus `8 · Σ x`), then
/// `acc = fma(isum, d_w · d_x, acc)` per row: upstream's float order. The lanes hold the rows
/// in `hadd`'s order (0 1 4 5 2 3 6 7) until the final permutation.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0x8_group_avx2<const C: usize>(
    nb: usize,
    w: *const u8,
    x: [*const u8; C],
    meta: [*const u32; C],
    out: &mut [[f32; 8]; C],
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let ones16 = _mm256_set1_epi16(1);
    // hadd order <-> row order (an involution)
    let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    let mut acc = [_mm256_setzero_ps(); C];
    for b in 0..nb {
        let blk = w.add(b * 8 * Q4_0_BYTES);
        let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(load128(blk)), order);
        let r0 = load256(blk.add(16)); // rows 0-3, qs bytes 0-7
        let r1 = load256(blk.add(48)); // rows 4-7, qs bytes 0-7
        let r2 = load256(blk.add(80)); // rows 0-3, qs bytes 8-15
        let r3 = load256(blk.add(112)); // rows 4-7, qs bytes 8-15
        let lo = |v: __m256i| _mm256_and_si256(v, m4);
        let hi = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        // elements 0-7, 8-15, 16-23, 24-31 of rows 0-3 and of rows 4-7
        let (u0, u1, u2, u3) = (lo(r0), lo(r2), hi(r0), hi(r2));
        let (v0, v1, v2, v3) = (lo(r1), lo(r3), hi(r1), hi(r3));
        for c in 0..C {
            let xb = x[c].add(b * Q8_0_BYTES);
            let q = xb.add(2);
            let bcast = |o: usize| _mm256_set1_epi64x(q.add(o).cast::<i64>().read_unaligned());
            let (a0, a1, a2, a3) = (bcast(0), bcast(8), bcast(16), bcast(24));
            let s03 = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0), _mm256_maddubs_epi16(u1, a1)),
                _mm256_add_epi16(_mm256_maddubs_epi16(u2, a2), _mm256_maddubs_epi16(u3, a3)),
            );
            let s47 = _mm256_add_epi16(
                _mm256_add_epi16(_mm256_maddubs_epi16(v0, a0), _mm256_maddubs_epi16(v1, a1)),
                _mm256_add_epi16(_mm256_maddubs_epi16(v2, a2), _mm256_maddubs_epi16(v3, a3)),
            );
            let isum = _mm256_hadd_epi32(
                _mm256_madd_epi16(s03, ones16),
                _mm256_madd_epi16(s47, ones16),
            );
            // minus 8 · Σ x of the block; the block's scale (both precomputed)
            let mt = meta[c].add(2 * b);
            let isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(mt.add(1).read() as i32));
            let dx = _mm256_set1_ps(f32::from_bits(mt.read()));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc[c]);
        }
    }
    for c in 0..C {
        _mm256_storeu_ps(out[c].as_mut_ptr(), _mm256_permutevar8x32_ps(acc[c], order));
    }
}

/// [`super::attn_tiled::gemm_acc_scalar`] with AVX2/FMA, each element the same chain of FMAs
/// (ggml's `simd_gemm`); false without the features.
pub fn gemm_acc(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> bool {
    if !available() {
        return false;
    }
    assert!(c.len() >= m * n && a.len() >= m * k && b.len() >= k * n);
    // SAFETY: features checked above; the kernel reads `m*k` values of `a`, `k*n` of `b` and
    // writes `m*n` of `c`, all within the slices (asserted); unaligned loads and stores.
    unsafe { gemm_acc_avx2(c.as_mut_ptr(), a.as_ptr(), b.as_ptr(), m, k, n) };
    true
}

#[target_feature(enable = "avx2,fma")]
unsafe fn gemm_block<const R: usize, const V: usize>(
    c: *mut f32,
    a: *const f32,
    b: *const f32,
    k: usize,
    n: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); V]; R];
    for (i, row) in acc.iter_mut().enumerate() {
        for (r, v) in row.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(c.add(i * n + r * 8));
        }
    }
    for kk in 0..k {
        let mut bv = [_mm256_setzero_ps(); V];
        for (r, v) in bv.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(b.add(kk * n + r * 8));
        }
        for (i, row) in acc.iter_mut().enumerate() {
            let p = _mm256_set1_ps(*a.add(i * k + kk));
            for (r, v) in row.iter_mut().enumerate() {
                *v = _mm256_fmadd_ps(bv[r], p, *v);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (r, v) in row.iter().enumerate() {
            _mm256_storeu_ps(c.add(i * n + r * 8), *v);
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn gemm_rows<const R: usize>(c: *mut f32, a: *const f32, b: *const f32, k: usize, n: usize) {
    let mut j = 0;
    while j + 16 <= n {
        gemm_block::<R, 2>(c.add(j), a, b.add(j), k, n);
        j += 16;
    }
    while j + 8 <= n {
        gemm_block::<R, 1>(c.add(j), a, b.add(j), k, n);
        j += 8;
    }
    for jj in j..n {
        for i in 0..R {
            let mut s = *c.add(i * n + jj);
            for kk in 0..k {
                s = (*a.add(i * k + kk)).mul_add(*b.add(kk * n + jj), s);
            }
            *c.add(i * n + jj) = s;
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn gemm_acc_avx2(c: *mut f32, a: *const f32, b: *const f32, m: usize, k: usize, n: usize) {
    let mut i = 0;
    while i + 4 <= m {
        gemm_rows::<4>(c.add(i * n), a.add(i * k), b, k, n);
        i += 4;
    }
    while i < m {
        gemm_rows::<1>(c.add(i * n), a.add(i * k), b, k, n);
        i += 1;
    }
}

/// ggml's `ggml_v_expf` on 8 lanes (AVX2/FMA build), instruction for instruction.
#[target_feature(enable = "avx2,fma")]
unsafe fn v_expf(x: __m256) -> __m256 {
    let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm256_sub_ps(z, r);
    let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), x));
    let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
    let k = _mm256_castsi256_ps(_mm256_add_epi32(
        e,
        _mm256_castps_si256(_mm256_set1_ps(1.0)),
    ));
    let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
    let cm = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
    let u = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm256_mul_ps(c(0x3f7f_fff6), b),
    );
    if _mm256_movemask_ps(cm) == 0 {
        return _mm256_fmadd_ps(j, k, k);
    }
    let g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
        _mm256_set1_epi32(0x8200_0000u32 as i32),
    );
    let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
    let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    let d = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
    _mm256_or_ps(
        _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(
            d,
            _mm256_or_ps(
                _mm256_and_ps(cm, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                _mm256_andnot_ps(cm, _mm256_fmadd_ps(k, j, k)),
            ),
        ),
    )
}

/// ggml's `ggml_vec_silu_f32` / `ggml_vec_swiglu_f32` on one row (AVX2/FMA build):
/// `ggml_v_silu` (`x / (1 + v_expf(0 - x))`) on 8 lanes, times `up` when given, and the
/// row's last `n % 8` values as ggml's scalar `ggml_silu_f32` (libm's `expf`). False (nothing
/// written) without the features. Slices of unequal length: the shortest decides.
pub fn silu_row(dst: &mut [f32], gate: &[f32], up: Option<&[f32]>) -> bool {
    if !available() {
        return false;
    }
    let n = dst
        .len()
        .min(gate.len())
        .min(up.map_or(usize::MAX, <[f32]>::len));
    let up = up.map(|u| &u[..n]);
    // SAFETY: features checked above; the kernel reads `n` values of `gate` (and `up`) and
    // writes `n` values of `dst`, all within the slices (n is the shortest length).
    unsafe { silu_row_avx2(&mut dst[..n], &gate[..n], up) };
    true
}

#[target_feature(enable = "avx2,fma")]
unsafe fn silu_row_avx2(dst: &mut [f32], gate: &[f32], up: Option<&[f32]>) {
    let n = dst.len();
    let (d, g) = (dst.as_mut_ptr(), gate.as_ptr());
    let mut i = 0;
    while i + 8 <= n {
        let x = _mm256_loadu_ps(g.add(i));
        let e = v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x));
        let mut s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
        if let Some(u) = up {
            s = _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i)));
        }
        _mm256_storeu_ps(d.add(i), s);
        i += 8;
    }
    for j in i..n {
        let x = gate[j];
        let s = x / (1.0 + (-x).exp());
        dst[j] = up.map_or(s, |u| s * u[j]);
    }
}

/// [`super::attn_tiled::soft_max_scalar`] with AVX2/FMA (ggml's `ggml_vec_soft_max_f32`);
/// None without the features.
pub fn soft_max(x: &mut [f32], max: f32) -> Option<f64> {
    if !available() {
        return None;
    }
    // SAFETY: features checked above; the kernel reads and writes `x.len()` values of `x`.
    Some(unsafe { soft_max_avx2(x.as_mut_ptr(), x.len(), max) })
}

#[target_feature(enable = "avx2,fma")]
unsafe fn soft_max_avx2(x: *mut f32, n: usize, max: f32) -> f64 {
    let mut sum = 0f64;
    let mut i = 0;
    while i + 8 <= n {
        let val = v_expf(_mm256_sub_ps(
            _mm256_loadu_ps(x.add(i)),
            _mm256_set1_ps(max),
        ));
        _mm256_storeu_ps(x.add(i), val);
        let mut v2 = _mm_add_ps(_mm256_extractf128_ps::<1>(val), _mm256_castps256_ps128(val));
        v2 = _mm_add_ps(v2, _mm_movehl_ps(v2, v2));
        v2 = _mm_add_ss(v2, _mm_movehdup_ps(v2));
        sum += f64::from(_mm_cvtss_f32(v2));
        i += 8;
    }
    for e in i..n {
        let val = (*x.add(e) - max).exp();
        sum += f64::from(val);
        *x.add(e) = val;
    }
    sum
}

/// [`dot_f16_ggml`] over raw little-endian bytes (any alignment), as a [`super::DotFn`].
pub fn dot_f16_ggml_bytes(k: usize, w: &[u8], x: &[u8]) -> f32 {
    assert!(w.len() >= 2 * k && x.len() >= 2 * k);
    // SAFETY: `available()` is checked by the caller handing this function out (matvec_dot_fn),
    // the kernel reads `k` 2-byte values of each slice (asserted) with unaligned loads.
    unsafe { dot_f16_ggml_avx2(w.as_ptr().cast::<u16>(), x.as_ptr().cast::<u16>(), k) }
}

/// Asks the CPU to fetch `bytes` into its caches (one hint per 64-byte line): a hint only, with
/// no effect on results.
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        // SAFETY: PREFETCHT0 is SSE, part of x86_64's baseline; it reads nothing architecturally
        // and never faults, and the address is inside a live slice anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
}
