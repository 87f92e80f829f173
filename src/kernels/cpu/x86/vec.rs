//! AVX2/FMA/F16C vector helpers of the ops (ggml's `vec.cpp`): the half-precision scale-and-mad
//! and dot of attention, the small GEMM and softmax of tiled attention, `ggml_v_expf`, SiLU.

use std::arch::x86_64::*;

use super::float::load_f16;
use super::simd::{available, f16_load};

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
        crate::kernels::cpu::vec::f16_scale_mad_scalar(acc, v, ms, vs);
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
