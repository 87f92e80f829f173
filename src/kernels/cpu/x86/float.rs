//! AVX2/FMA/F16C dot products of the float types (F32, F16, BF16): llamafile's tinyBLAS order
//! for batched products, ggml's `ggml_vec_dot_bf16` for one activation row.

use std::arch::x86_64::*;

use super::simd::{f16_load, hsum_f32x8, load128};

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
pub(super) unsafe fn load_f32(p: *const u8, i: usize) -> __m256 {
    _mm256_loadu_ps(p.cast::<f32>().add(i))
}

#[inline(always)]
pub(super) unsafe fn scalar_f32(p: *const u8, i: usize) -> f32 {
    p.cast::<f32>().add(i).read_unaligned()
}

#[inline(always)]
pub(super) unsafe fn load_f16(p: *const u8, i: usize) -> __m256 {
    _mm256_cvtph_ps(load128(p.add(2 * i)))
}

#[inline(always)]
pub(super) unsafe fn scalar_f16(p: *const u8, i: usize) -> f32 {
    f16_load(p.add(2 * i))
}

#[inline(always)]
pub(super) unsafe fn load_bf16(p: *const u8, i: usize) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(load128(p.add(2 * i))),
        16,
    ))
}

#[inline(always)]
pub(super) unsafe fn scalar_bf16(p: *const u8, i: usize) -> f32 {
    f32::from_bits(u32::from(p.add(2 * i).cast::<u16>().read_unaligned()) << 16)
}

/// `$name(n, w, x)`: the one-row float dot of [`float_cols`] for the element type that `$load`
/// (8 lanes) and `$scalar` (the tail) read.
macro_rules! float_dot {
    ($name:ident, $load:ident, $scalar:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $name(n: usize, w: *const u8, x: *const u8) -> f32 {
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
pub(super) unsafe fn bf16_vec_avx2(n: usize, w: *const u8, x: *const u8) -> f32 {
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
