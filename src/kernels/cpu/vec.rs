//! Scalar vector helpers shared by the ops and the SIMD kernels (ggml's `vec.h`): `fmadd`,
//! ggml's `expf`, SiLU and GELU, f16 dot and scale-and-mad in ggml's order, the small GEMM and
//! softmax of tiled attention. They are also the references the SIMD versions are tested
//! against. Imports nothing else of the kernels.

/// `a * b + c` rounded once (`f32::mul_add`), as one FMA instruction where the CPU has it.
/// Outside the `#[target_feature]` kernels `mul_add` compiles to a call of libm's `fmaf`
/// (through a GOT entry and a run-time dispatch of its own, per operation), which took a few
/// percent of decode in attention and RoPE; the fused result is the same either way.
#[inline(always)]
pub fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        let mut r = c;
        // SAFETY: the CPU has FMA (checked above, cached by std); the instruction reads and
        // writes only the three named registers.
        unsafe {
            std::arch::asm!(
                "vfmadd231ss {r}, {a}, {b}",
                r = inout(xmm_reg) r,
                a = in(xmm_reg) a,
                b = in(xmm_reg) b,
                options(pure, nomem, nostack, preserves_flags),
            )
        };
        return r;
    }
    a.mul_add(b, c)
}

/// ggml's SiLU: `x / (1 + exp(-x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    // ggml's SIMD silu (`ggml_v_silu`): its own exp, `0 - x`, then the division
    x / (1.0 + ggml_expf(0.0 - x))
}

/// One lane of ggml's vectorized `ggml_v_expf` (AVX2/FMA build): a degree-5 polynomial on a
/// range reduction, with ggml's handling of large |x|. Upstream's silu and softmax use it, not
/// libm's `expf`; following it bit for bit keeps activations equal to upstream's, which
/// matters where they are re-quantized to int8. Every `mul_add` is the FMA ggml issues.
#[inline]
pub fn ggml_expf(x: f32) -> f32 {
    let c = f32::from_bits;
    let r = c(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = c(e.wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 || n.is_nan() {
        return k.mul_add(j, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = c(g.wrapping_add(0x7f00_0000));
    let s2 = c(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

const GELU_COEF_A: f32 = 0.044715;

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// ggml's GELU (tanh approximation), evaluated at the f16 rounding of `x` as ggml's
/// lookup table does (`GGML_GELU_FP16`), exact outside [-10, 10].
#[inline]
pub fn gelu(x: f32) -> f32 {
    let f = |v: f32| 0.5 * v * (1.0 + (SQRT_2_OVER_PI * v * (1.0 + GELU_COEF_A * v * v)).tanh());
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let h = half::f16::from_f32(x);
        half::f16::from_f32(f(h.to_f32())).to_f32()
    }
}

/// Dot product of two f32 slices in 8 independent lanes (vectorizes without intrinsics).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (pa, pb) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for l in 0..8 {
            acc[l] += pa[l] * pb[l];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for i in chunks * 8..n {
        sum += a[i] * b[i];
    }
    sum
}

/// `ggml_vec_dot_f32` as ggml-cpu's AVX2 build computes it: four 8-lane FMA accumulators
/// over steps of 32 values, reduced pairwise (0+2, 1+3, then 0+1), the halves added, two
/// horizontal adds; the tail accumulates in order (one FMA each, as GCC contracts it).
pub fn dot_f32_ggml(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n & !31;
    let mut acc = [[0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, a) in a.iter_mut().enumerate() {
                let e = i + 8 * j + l;
                *a = fmadd(x[e], y[e], *a);
            }
        }
    }
    let [a0, a1, a2, a3] = acc;
    let s: [f32; 8] = std::array::from_fn(|l| (a0[l] + a2[l]) + (a1[l] + a3[l]));
    let t0 = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    let mut sum = (t0[0] + t0[1]) + (t0[2] + t0[3]);
    for i in np..n {
        sum = fmadd(x[i], y[i], sum);
    }
    sum
}

/// `y += a * x`, each element with one rounding, as upstream's `ggml_vec_mad_f32` (FMA in
/// every SIMD lane, and GCC contracts its scalar tail to FMA too): flash attention over an
/// F32 or quantized V cache accumulates through it, and a separate multiply and add moved a
/// Q8_0-V perplexity off upstream's (4.2059 vs 4.2037).
#[inline]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (d, &s) in y.iter_mut().zip(x) {
        *d = fmadd(s, a, *d);
    }
}

/// [`dot_f16_ggml`] without SIMD, in the same order (the SIMD version is tested against it).
pub fn dot_f16_ggml_scalar(x: &[half::f16], y: &[half::f16]) -> f32 {
    let n = x.len().min(y.len());
    dot_f16_ggml_by(n, |i| x[i].to_f32(), |i| y[i].to_f32())
}

/// [`dot_f16_ggml_scalar`] over `n` values that `x(i)` and `y(i)` give (widened from F16).
pub fn dot_f16_ggml_by(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let np = n & !31;
    let mut sum = [[0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, acc) in sum.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                let e = i + 8 * j + l;
                *a = x(e).mul_add(y(e), *a);
            }
        }
    }
    let [a0, a1, a2, a3] = sum;
    let s: [f32; 8] = std::array::from_fn(|l| (a0[l] + a2[l]) + (a1[l] + a3[l]));
    let t0 = [s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]];
    let mut sumf = f64::from((t0[0] + t0[1]) + (t0[2] + t0[3]));
    for i in np..n {
        sumf += f64::from(x(i) * y(i));
    }
    sumf as f32
}

/// [`f16_scale_mad`] without SIMD (the reference the SIMD version is tested against).
pub fn f16_scale_mad_scalar(acc: &mut [half::f16], v: &[half::f16], ms: Option<f32>, vs: f32) {
    for (a, &x) in acc.iter_mut().zip(v) {
        let scaled = match ms {
            Some(ms) => half::f16::from_f32(a.to_f32() * ms).to_f32(),
            None => a.to_f32(),
        };
        *a = half::f16::from_f32(x.to_f32().mul_add(vs, scaled));
    }
}

/// [`gemm_acc`] without SIMD (the reference the SIMD version is tested against).
pub fn gemm_acc_scalar(c: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    for i in 0..m {
        for j in 0..n {
            let mut s = c[i * n + j];
            for kk in 0..k {
                s = a[i * k + kk].mul_add(b[kk * n + j], s);
            }
            c[i * n + j] = s;
        }
    }
}

/// [`soft_max`] without SIMD, in the same order.
pub fn soft_max_scalar(x: &mut [f32], max: f32) -> f64 {
    let mut sum = 0f64;
    let n8 = x.len() / 8 * 8;
    for g in x[..n8].chunks_exact_mut(8) {
        for v in g.iter_mut() {
            *v = ggml_expf(*v - max);
        }
        let w: [f32; 4] = std::array::from_fn(|i| g[i + 4] + g[i]);
        sum += f64::from((w[0] + w[2]) + (w[1] + w[3]));
    }
    for v in &mut x[n8..] {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    sum
}
