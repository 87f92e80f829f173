//! Element-wise and row-wise CPU ops of the graph executor (everything but matrix products),
//! with ggml-cpu's arithmetic: same accumulation types and the same order of rounding steps,
//! so that results track upstream's closely.

use super::{fmadd, SharedOut};

/// ggml's `RMS_NORM` of one row: `x / sqrt(mean(x²) + eps)`, the sum of squares in f64 and
/// the mean and scale in f32.
pub fn rms_norm_row(x: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0f32 / (mean + eps).sqrt();
    for (d, &s) in y.iter_mut().zip(x) {
        *d = s * scale;
    }
}

/// ggml's `NORM` of one row: `(x - mean) / sqrt(var + eps)`.
pub fn norm_row(x: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let mut var = 0.0f64;
    for (d, &s) in y.iter_mut().zip(x) {
        let v = s - mean;
        *d = v;
        var += (v * v) as f64;
    }
    let variance = (var / x.len() as f64) as f32;
    let scale = 1.0f32 / (variance + eps).sqrt();
    for d in y.iter_mut() {
        *d *= scale;
    }
}

/// How a rotary embedding pairs the dimensions (`GGML_ROPE_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs (i, i+1): llama, mistral.
    Norm,
    /// Halves (i, i + n_rot/2): qwen2/3, gemma3, phi3.
    Neox,
    /// M-RoPE (`GGML_ROPE_TYPE_MROPE`) of text tokens: pairs as NEOX, the pairs of the
    /// fourth section at position 0 (upstream's text positions are `[p, p, p, 0]`, so the
    /// first three sections turn alike).
    Mrope { sections: [u32; 4] },
}

/// The parameters of ggml's `ROPE` (`ggml_rope_ext`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub n_rot: usize,
    pub mode: RopeMode,
    pub n_ctx_orig: u32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

fn yarn_corr_dim(n_dims: usize, n_ctx_orig: u32, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// ggml's `ggml_rope_yarn_corr_dims`.
pub fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let start = yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base).floor();
    let end = yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base).ceil();
    [start.max(0.0), end.min(p.n_rot as f32 - 1.0)]
}

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Fills `cache` (n_rot floats: cos, sin pairs) for position `pos`, as ggml's
/// `ggml_rope_cache_init` (theta advanced by repeated multiplication, as upstream).
pub fn rope_cache(p: &RopeParams, pos: f32, freq_factors: Option<&[f32]>, cache: &mut [f32]) {
    let theta_scale = p.freq_base.powf(-2.0 / p.n_rot as f32);
    let corr = yarn_corr_dims(p);
    let mut theta = pos;
    // M-RoPE: from which pair on (within each `sect_dims` pairs) the position is 0
    let (sect_dims, sec_e) = match p.mode {
        RopeMode::Mrope {
            sections: [a, b, c, d],
        } => ((a + b + c + d) as usize, (a + b + c) as usize),
        _ => (0, 0),
    };
    for i0 in (0..p.n_rot).step_by(2) {
        let ff = freq_factors.map_or(1.0, |f| f[i0 / 2]);
        let in_e = sect_dims > 0 && (i0 / 2) % sect_dims >= sec_e;
        let theta_extrap = if in_e { 0.0 } else { theta } / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut th = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * p.ext_factor;
            th = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0 + 0.1 * (1.0 / p.freq_scale).ln();
        }
        cache[i0] = th.cos() * mscale;
        cache[i0 + 1] = th.sin() * mscale;
        theta *= theta_scale;
    }
}

/// Rotates the heads of one token in place (`x` holds `x.len() / head_dim` heads); the first
/// `n_rot` dimensions of each head rotate, the rest are kept. Each pair rotates as ggml's
/// `rotate_pairs` does in upstream's build, where GCC fuses the first product of each
/// expression with the sum (`x0*c - x1*s` → fma(x0, c, -(x1*s))): rows equal upstream's bit
/// for bit.
pub fn rope_apply(p: &RopeParams, cache: &[f32], head_dim: usize, x: &mut [f32]) {
    for head in x.chunks_exact_mut(head_dim) {
        match p.mode {
            RopeMode::Norm => {
                for i0 in (0..p.n_rot).step_by(2) {
                    let (c, s) = (cache[i0], cache[i0 + 1]);
                    let (x0, x1) = (head[i0], head[i0 + 1]);
                    head[i0] = fmadd(x0, c, -(x1 * s));
                    head[i0 + 1] = fmadd(x0, s, x1 * c);
                }
            }
            RopeMode::Neox | RopeMode::Mrope { .. } => {
                let half = p.n_rot / 2;
                for i0 in (0..p.n_rot).step_by(2) {
                    let (c, s) = (cache[i0], cache[i0 + 1]);
                    let i = i0 / 2;
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = fmadd(x0, c, -(x1 * s));
                    head[i + half] = fmadd(x0, s, x1 * c);
                }
            }
        }
    }
}

/// ggml's SiLU: `x / (1 + exp(-x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    // ggml's SIMD silu (`ggml_v_silu`): its own exp, `0 - x`, then the division
    x / (1.0 + ggml_expf(0.0 - x))
}

/// `dst[i] = silu(gate[i]) * up[i]` (SWIGLU), or `silu(gate[i])` without `up`, over rows of
/// `row_len` values: ggml's vector silu per row (`x86::silu_row`: its own exp on 8
/// lanes, libm's `expf` for a row's last `row_len % 8`), as upstream's `ggml_vec_swiglu_f32`
/// and `ggml_vec_silu_f32`; the scalar [`silu`] everywhere without AVX2/FMA.
pub fn silu_rows(dst: &mut [f32], gate: &[f32], up: Option<&[f32]>, row_len: usize) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::available() && row_len > 0 {
        for (r, d) in dst.chunks_mut(row_len).enumerate() {
            let at = r * row_len;
            let g = &gate[at..at + d.len()];
            super::x86::silu_row(d, g, up.map(|u| &u[at..at + d.len()]));
        }
        return;
    }
    match up {
        Some(up) => {
            for ((d, &x), &y) in dst.iter_mut().zip(gate).zip(up) {
                *d = silu(x) * y;
            }
        }
        None => {
            for (d, &x) in dst.iter_mut().zip(gate) {
                *d = silu(x);
            }
        }
    }
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

/// ggml's `SOFT_MAX` of one row in place, with `scale` applied first (no mask, no ALiBi):
/// exp in f32, sum in f64, multiplication by 1/sum.
pub fn soft_max_row(x: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        let e = if *v == f32::NEG_INFINITY {
            0.0
        } else {
            (*v - max).exp()
        };
        *v = e;
        sum += e as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
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

/// `y += a * x`.
#[inline]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (d, &s) in y.iter_mut().zip(x) {
        *d += a * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector rows equal the scalar silu (ggml's exp) bit for bit, except each row's last
    /// `row_len % 8` values, which follow libm's expf as ggml's scalar tail (wide range, both
    /// forms, a row length with a tail).
    #[test]
    fn silu_rows_equal_scalar_silu() {
        let gate: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) * 0.0731).collect();
        let up: Vec<f32> = (0..4000).map(|i| 1.0 - i as f32 * 1e-3).collect();
        let row_len = 100; // 12 vectors and a tail of 4 per row
        let (mut a, mut b) = (vec![0f32; 4000], vec![0f32; 4000]);
        silu_rows(&mut a, &gate, Some(&up), row_len);
        silu_rows(&mut b, &gate, None, row_len);
        let simd = cfg!(target_arch = "x86_64") && crate::kernels::cpu::x86::available();
        for i in 0..4000 {
            let x = gate[i];
            let s = if simd && i % row_len >= 96 {
                x / (1.0 + (-x).exp())
            } else {
                silu(x)
            };
            assert_eq!(a[i].to_bits(), (s * up[i]).to_bits(), "{x}");
            assert_eq!(b[i].to_bits(), s.to_bits(), "{x}");
        }
    }

    /// The SIMD ggml-order F16 dot equals the scalar one bit for bit (with leftovers).
    #[test]
    fn dot_f16_ggml_matches_scalar() {
        let mut seed = 0x9e37_79b9_u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            half::f16::from_f32((seed as f32 / u32::MAX as f32) * 4.0 - 2.0)
        };
        for n in [1usize, 31, 32, 64, 80, 128, 131] {
            let x: Vec<half::f16> = (0..n).map(|_| rnd()).collect();
            let y: Vec<half::f16> = (0..n).map(|_| rnd()).collect();
            let (a, b) = (dot_f16_ggml(&x, &y), dot_f16_ggml_scalar(&x, &y));
            assert_eq!(a.to_bits(), b.to_bits(), "n {n}: {a} vs {b}");
            let exact: f64 = x
                .iter()
                .zip(&y)
                .map(|(p, q)| f64::from(p.to_f32() * q.to_f32()))
                .sum();
            assert!(
                (f64::from(a) - exact).abs() < 1e-4 * (1.0 + exact.abs()),
                "n {n}"
            );
        }
    }

    /// The SIMD half-precision scale + FMA (when the CPU has it) equals the scalar one bit for
    /// bit, tail included, with and without the rescale.
    #[test]
    fn f16_scale_mad_matches_scalar() {
        let mut seed = 0x2545_f491_u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 8.0 - 4.0
        };
        for n in [1usize, 7, 8, 64, 67, 128] {
            let v: Vec<half::f16> = (0..n).map(|_| half::f16::from_f32(rnd())).collect();
            let acc0: Vec<half::f16> = (0..n).map(|_| half::f16::from_f32(rnd() * 50.0)).collect();
            for ms in [None, Some(0.37f32), Some(1e-3)] {
                let vs = rnd().abs();
                let (mut a, mut b) = (acc0.clone(), acc0.clone());
                f16_scale_mad(&mut a, &v, ms, vs);
                f16_scale_mad_scalar(&mut b, &v, ms, vs);
                let bits = |x: &[half::f16]| x.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "n {n} ms {ms:?}");
                assert_ne!(bits(&a), bits(&acc0), "the accumulator changed");
            }
        }
    }

    #[test]
    fn rms_norm_unit_rms() {
        let x = [3.0f32, -4.0];
        let mut y = [0.0; 2];
        rms_norm_row(&x, 0.0, &mut y);
        let rms = ((y[0] * y[0] + y[1] * y[1]) / 2.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-6);
        assert!((y[0] / y[1] + 0.75).abs() < 1e-6);
    }

    #[test]
    fn norm_zero_mean_unit_variance() {
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let mut y = [0.0; 4];
        norm_row(&x, 0.0, &mut y);
        let mean: f32 = y.iter().sum::<f32>() / 4.0;
        let var: f32 = y.iter().map(|v| v * v).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5);
    }

    fn params(mode: RopeMode) -> RopeParams {
        RopeParams {
            n_rot: 4,
            mode,
            n_ctx_orig: 2048,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }

    #[test]
    fn rope_rotates_pairs_by_position_times_frequency() {
        let p = params(RopeMode::Norm);
        let mut cache = [0.0; 4];
        rope_cache(&p, 3.0, None, &mut cache);
        let mut x = [1.0, 0.0, 1.0, 0.0, 7.0];
        rope_apply(&p, &cache, 5, &mut x);
        // pair 0: angle 3; pair 1: angle 3 * 10000^(-1/2) = 0.03
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[1] - 3f32.sin()).abs() < 1e-6);
        assert!((x[2] - 0.03f32.cos()).abs() < 1e-6 && (x[3] - 0.03f32.sin()).abs() < 1e-6);
        assert_eq!(x[4], 7.0, "dimensions past n_rot are kept");
        let p = params(RopeMode::Neox);
        let mut x = [1.0, 1.0, 0.0, 0.0];
        rope_apply(&p, &cache, 4, &mut x);
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[2] - 3f32.sin()).abs() < 1e-6);
        // position 0 is the identity
        rope_cache(&p, 0.0, Some(&[2.0, 4.0]), &mut cache);
        assert_eq!(cache, [1.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn softmax_sums_to_one_and_ignores_minus_infinity() {
        let mut x = [1.0f32, 2.0, f32::NEG_INFINITY, 3.0];
        soft_max_row(&mut x, 1.0);
        assert_eq!(x[2], 0.0);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] > x[1] && x[1] > x[0]);
    }

    #[test]
    fn gelu_and_silu_values() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-3);
        assert_eq!(gelu(20.0), 20.0);
        assert_eq!(gelu(-20.0), 0.0);
    }
}

/// Per-thread buffers of [`flash_attn`].
#[derive(Debug, Default)]
pub struct AttnScratch {
    /// Q of the task's heads in K's vec_dot type (F16, F32, Q8_0, ...), as bytes.
    q_bytes: Vec<u8>,
    /// The same Q in half precision when K is F16.
    q16: Vec<half::f16>,
    k: Vec<f32>,
    v: Vec<f32>,
    acc: Vec<f32>,
    acc16: Vec<half::f16>,
    m: Vec<f32>,
    s: Vec<f32>,
    cells: Vec<u32>,
    /// Whether the task's token sees each cell of its run (`Attn::visible_row`).
    seen: Vec<bool>,
    /// K and V rows of an F32 cache rounded to half precision (see [`KvRows::cast_f16`]).
    k16: Vec<half::f16>,
    v16: Vec<half::f16>,
    /// The tiled kernel's buffers.
    pub(super) tiled: super::attn_tiled::TiledScratch,
    /// The buffers of attention without flash attention.
    pub(super) nofa: super::attn_nofa::NoFaScratch,
    /// The split-KV path's partial results (in the extra set past the pool threads' ones).
    partials: Vec<f32>,
}

impl AttnScratch {
    /// Gives every buffer the capacity a task of `shape` uses, so the task itself never
    /// allocates. `flash_attn` calls it for every pool thread's set before the job: a thread
    /// that takes its first attention task late (a worker the OS kept descheduled during the
    /// first decodes) must not allocate in the middle of a later decode.
    fn reserve_for(&mut self, shape: AttnShape) {
        fn at_least<T>(v: &mut Vec<T>, n: usize) {
            v.reserve(n.saturating_sub(v.len()));
        }
        let group = shape.n_head / shape.n_head_kv;
        // F32 is the widest vec_dot type (4 bytes an element; F16, BF16 and the Q8 types
        // are narrower), so Q in K's vec_dot type fits in this many bytes
        at_least(
            &mut self.q_bytes,
            group * super::row_bytes(crate::gguf::GgmlType::F32, shape.dk),
        );
        at_least(&mut self.q16, group * shape.dk);
        at_least(&mut self.k, shape.dk);
        at_least(&mut self.v, shape.dv);
        at_least(&mut self.acc, group * shape.dv);
        at_least(&mut self.acc16, group * shape.dv);
        at_least(&mut self.m, group);
        at_least(&mut self.s, group);
        at_least(&mut self.cells, shape.n_cells_max as usize);
        at_least(&mut self.seen, shape.n_cells_max as usize);
        at_least(&mut self.k16, shape.dk);
        at_least(&mut self.v16, shape.dv);
        self.tiled.reserve_for(shape);
        self.nofa.reserve_for(shape);
    }
}

/// The inputs of one FLASH_ATTN_EXT, shared by its four CPU paths (one-row, split-KV, tiled,
/// and MUL_MAT / SOFT_MAX / MUL_MAT when flash attention is off).
#[derive(Clone, Copy)]
pub struct Attn<'a> {
    pub shape: AttnShape,
    /// `n_tokens` rows of `n_head` heads of `dk` values.
    pub q: &'a [f32],
    pub n_tokens: usize,
    /// The cells token `t` may attend to (its KV stream's used cells).
    pub rows: &'a (dyn Fn(usize) -> std::ops::Range<u32> + Sync),
    /// The causal and sliding-window mask of token `t` over a run of cells: `out[i]` is
    /// whether it sees cell `first + i`. Kernels ask for a whole row (a task's cells, a tile's
    /// row) at once, not one dyn call per cell.
    pub visible_row: &'a (dyn Fn(usize, u32, &mut [bool]) + Sync),
    pub k: &'a dyn KvRows,
    pub v: &'a dyn KvRows,
    /// Per head, a logit joined to the softmax without a value (`ggml_flash_attn_ext_add_sinks`:
    /// gpt-oss's attention sinks).
    pub sinks: Option<&'a [f32]>,
}

/// Shapes and constants of one FLASH_ATTN_EXT.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub dk: usize,
    pub dv: usize,
    pub scale: f32,
    pub softcap: f32,
    /// Cells in the cache: per-thread buffers are sized for all of them once, so that a
    /// growing context never reallocates them.
    pub n_cells_max: u32,
    /// Upstream's flash attention is on. Off (llama-cpp-python's default), upstream computes
    /// attention as MUL_MAT, SOFT_MAX_EXT, MUL_MAT, whose float order is followed instead.
    pub flash_attn: bool,
}

/// The cached keys or values of one layer, as the attention kernel reads them.
pub trait KvRows: Sync {
    /// Values `off .. off + dst.len()` of row `cell` as f32.
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]);
    /// The same values in half precision when the cache is F16.
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]>;
    /// Whether values are stored in half precision (Q is rounded to it for the dot, as ggml
    /// converts Q to K's type).
    fn is_f16(&self) -> bool;
    /// Whether attention reads these (F32) values rounded to half precision: upstream's graph
    /// casts an F32 cache to F16 before FLASH_ATTN_EXT, so an F32 cache gives exactly the
    /// results of an F16 one.
    fn cast_f16(&self) -> bool {
        false
    }
    /// The same values as ggml blocks of another type (BF16, Q8_0, ...) when the cache
    /// stores them so: the type and the bytes of `len` values from `off`.
    fn packed(
        &self,
        _cell: usize,
        _off: usize,
        _len: usize,
    ) -> Option<(crate::gguf::GgmlType, &[u8])> {
        None
    }
}

/// ggml's FLASH_ATTN_EXT on the CPU: for each token (row of `q`, `n_head` heads of `dk`) and
/// each of its heads, the online softmax over the cells of `rows(token)` (its KV stream's)
/// that `visible(token, cell)` accepts (in cell order) of `scale`·q·k (soft-capped when `softcap` ≠ 0), accumulating v; in half
/// precision for an F16 V cache, as ggml's kernel. Tasks are (token, KV head) pairs spread
/// over `pool`; `scratch` holds one buffer set per pool thread.
pub fn flash_attn(
    a: &Attn<'_>,
    out: &mut [f32],
    pool: &super::ThreadPool,
    scratch: &[std::sync::Mutex<AttnScratch>],
) {
    let Attn {
        shape,
        q,
        n_tokens,
        rows,
        visible_row,
        k,
        v,
        sinks,
    } = *a;
    let AttnShape {
        n_head,
        n_head_kv,
        dk,
        dv,
        ..
    } = shape;
    let group = n_head / n_head_kv;
    assert!(q.len() >= n_tokens * n_head * dk && out.len() >= n_tokens * n_head * dv);
    assert!(scratch.len() >= pool.n_threads());
    for sc in &scratch[..pool.n_threads()] {
        sc.lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserve_for(shape);
    }
    // upstream's view of a token's stream: its used cells padded (llama_kv_cache::get_n_kv)
    let view = |t: usize| {
        let r = rows(t);
        r.start..r.start + super::attn_nofa::upstream_n_kv(r.end - r.start, shape.n_cells_max)
    };
    // (with sinks: the one-row kernel, which applies them as upstream's kernels do)
    if !shape.flash_attn && sinks.is_none() && super::attn_nofa::applies(k, v) {
        let padded = Attn { rows: &view, ..*a };
        super::attn_nofa::attn_no_fa(&padded, out, pool, scratch);
        return;
    }
    if n_tokens == 1 && split_kv_applies(k, v) {
        let cells = view(0);
        if cells.end - cells.start >= 512 {
            flash_attn_split_kv(a, cells, out, pool, scratch);
            return;
        }
    }
    if sinks.is_none() && super::attn_tiled::applies(n_tokens, k, v) {
        super::attn_tiled::flash_attn_tiled(a, out, pool, scratch);
        return;
    }
    let out_ptr = SharedOut::new(out);
    pool.parallel_for(n_tokens * n_head_kv, &|task, thread| {
        let (t, g) = (task / n_head_kv, task % n_head_kv);
        let mut sc = scratch[thread].lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: task (t, g) writes only the `group * dv` values of token t's heads
        // g*group .. (g+1)*group, disjoint from every other task's; `out` is borrowed
        // mutably for the whole call, which waits for all tasks.
        let o = unsafe { out_ptr.slice((t * n_head + g * group) * dv, group * dv) };
        let qrow = &q[(t * n_head + g * group) * dk..(t * n_head + (g + 1) * group) * dk];
        let sink = sinks.map(|s| &s[g * group..(g + 1) * group]);
        attn_task(
            shape,
            qrow,
            t,
            g,
            rows(t),
            false,
            visible_row,
            k,
            v,
            sink,
            o,
            &mut sc,
        );
    });
}

/// `x` rounded to half precision into `out` (ggml's F32 → F16 cast).
fn to_half(x: &[f32], out: &mut Vec<half::f16>) {
    out.clear();
    out.extend(x.iter().map(|&v| half::f16::from_f32(v)));
}

/// Whether K and V are both F16 or both F32 (an F32 cache cast to F16 counts as F16), the
/// caches upstream's split-KV path takes.
fn split_kv_applies(k: &dyn KvRows, v: &dyn KvRows) -> bool {
    let half = |r: &dyn KvRows| r.is_f16() || r.cast_f16();
    k.packed(0, 0, 0).is_none() && v.packed(0, 0, 0).is_none() && half(k) == half(v)
}

/// Upstream's split-KV flash attention for one query row over at least 512 cells
/// (`use_split_kv_path`): the `n_kv` cells of its padded view in one chunk per thread
/// (`ceil(n_kv / n_threads)` cells each), the one-row kernel over each chunk giving (M, S,
/// unnormalized VKQ), then the chunks merged in order (`ggml_flash_attn_ext_reduce_partials`,
/// with the FMAs upstream's build makes there). The result depends on the thread count, as
/// upstream's does. `scratch[pool.n_threads()]` holds the partials.
fn flash_attn_split_kv(
    a: &Attn<'_>,
    cells: std::ops::Range<u32>,
    out: &mut [f32],
    pool: &super::ThreadPool,
    scratch: &[std::sync::Mutex<AttnScratch>],
) {
    let Attn {
        shape,
        q,
        visible_row,
        k,
        v,
        sinks,
        ..
    } = *a;
    let AttnShape {
        n_head,
        n_head_kv,
        dk,
        dv,
        ..
    } = shape;
    let group = n_head / n_head_kv;
    let (base, n_kv) = (cells.start, cells.end - cells.start);
    let nth = pool.n_threads();
    assert!(
        scratch.len() > nth,
        "the split path needs one more scratch set"
    );
    let chunk = n_kv.div_ceil(nth as u32);
    let stride = 2 + dv;
    let mut extra = scratch[nth].lock().unwrap_or_else(|e| e.into_inner());
    let extra = &mut *extra;
    extra.partials.resize(nth * n_head * stride, 0.0);
    let parts = SharedOut::new(&mut extra.partials);
    pool.parallel_for(nth * n_head_kv, &|task, thread| {
        let (c, g) = (task / n_head_kv, task % n_head_kv);
        let c0 = (c as u32 * chunk).min(n_kv);
        let c1 = (c0 + chunk).min(n_kv);
        let mut sc = scratch[thread].lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: task (c, g) writes only chunk c's partials of heads g*group..(g+1)*group,
        // disjoint from every other task's; the buffer stays locked and borrowed until the
        // job returns.
        let o = unsafe { parts.slice((c * n_head + g * group) * stride, group * stride) };
        let qrow = &q[g * group * dk..(g + 1) * group * dk];
        // upstream applies the sinks on the first chunk only
        let sink = sinks
            .filter(|_| c == 0)
            .map(|s| &s[g * group..(g + 1) * group]);
        attn_task(
            shape,
            qrow,
            0,
            g,
            base + c0..base + c1,
            true,
            visible_row,
            k,
            v,
            sink,
            o,
            &mut sc,
        );
    });
    extra.acc.resize(dv, 0.0);
    for h in 0..n_head {
        let (mut m, mut s) = (f32::NEG_INFINITY, 0f32);
        extra.acc.fill(0.0);
        for c in 0..nth {
            if c as u32 * chunk >= n_kv {
                continue;
            }
            let p = &extra.partials[(c * n_head + h) * stride..(c * n_head + h + 1) * stride];
            if p[1] == 0.0 {
                continue;
            }
            let m_new = m.max(p[0]);
            let (so, sn) = ((m - m_new).exp(), (p[0] - m_new).exp());
            // `a*so + b*sn`: upstream's build fuses the first product
            for (a, &b) in extra.acc.iter_mut().zip(&p[2..]) {
                *a = fmadd(*a, so, b * sn);
            }
            s = fmadd(s, so, p[1] * sn);
            m = m_new;
        }
        let o = &mut out[h * dv..(h + 1) * dv];
        let inv = if s != 0.0 { 1.0 / s } else { 1.0 };
        for (o, &a) in o.iter_mut().zip(&extra.acc) {
            *o = if s != 0.0 { a * inv } else { a };
        }
    }
}

/// The bytes of a half-precision row (as the F16 dot kernel reads them).
fn f16_bytes(h: &[half::f16]) -> &[u8] {
    // SAFETY: `half::f16` is `repr(transparent)` over `u16` (2 bytes, no padding); the byte
    // slice covers exactly the same memory, borrowed for the same lifetime; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(h.as_ptr().cast::<u8>(), std::mem::size_of_val(h)) }
}

/// The bytes of an f32 row (as the F32 dot kernel reads them: native order, which is the
/// little-endian order the kernels decode on every target this crate builds for).
fn f32_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding; the byte slice covers exactly the same memory, borrowed for
    // the same lifetime; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// ggml's `ggml_vec_dot_f16` as its AVX2 build computes it (K·Q in flash attention): four
/// 8-lane f32 FMA accumulators over steps of 32, reduced 0+2 and 1+3, then 0+1, then the two
/// halves and two horizontal adds; the leftover elements added in f64. Following its order
/// keeps attention scores equal to upstream's, so near-ties in the logits break the same way.
pub fn dot_f16_ggml(x: &[half::f16], y: &[half::f16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = super::x86::dot_f16_ggml(x, y) {
        return v;
    }
    dot_f16_ggml_scalar(x, y)
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

/// ggml's `vec_scale_f16` (when `ms` is given) followed by `vec_mad_f16` on a half-precision
/// accumulator: `acc = f16(acc * ms)`, then `acc = f16(fma(v, vs, acc))`, elementwise. The
/// SIMD version (F16C) rounds exactly as this one does.
pub fn f16_scale_mad(acc: &mut [half::f16], v: &[half::f16], ms: Option<f32>, vs: f32) {
    assert!(
        v.len() >= acc.len(),
        "f16 mad: v shorter than the accumulator"
    );
    #[cfg(target_arch = "x86_64")]
    if super::x86::f16_scale_mad(acc, v, ms, vs) {
        return;
    }
    f16_scale_mad_scalar(acc, v, ms, vs);
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

#[allow(clippy::too_many_arguments)]
fn attn_task(
    shape: AttnShape,
    qrow: &[f32],
    t: usize,
    g: usize,
    cells: std::ops::Range<u32>,
    partial: bool,
    visible_row: &(dyn Fn(usize, u32, &mut [bool]) + Sync),
    k: &dyn KvRows,
    v: &dyn KvRows,
    sinks: Option<&[f32]>,
    out: &mut [f32],
    sc: &mut AttnScratch,
) {
    use crate::gguf::GgmlType;
    let AttnShape {
        n_head,
        n_head_kv,
        dk,
        dv,
        scale,
        softcap,
        n_cells_max,
        ..
    } = shape;
    let group = n_head / n_head_kv;
    // upstream folds the soft-cap's divisor into the scale
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };
    let f16_v = v.is_f16() || v.cast_f16();
    let sc = &mut *sc;
    // Q in K's vec_dot type, each score that type's dot, as ggml's CPU flash attention
    // (q_to_vec_dot, kq_vec_dot): F16 and F32 caches through the engine's F16/F32 dots, a
    // packed K (BF16, Q8_0, ...) through the type's vec_dot
    let k_packed = k.packed(0, 0, dk).map(|(ty, _)| ty);
    let k_type = match k_packed {
        Some(kt) => super::vec_dot_type(kt),
        None if k.is_f16() || k.cast_f16() => GgmlType::F16,
        None => GgmlType::F32,
    };
    let kdot = super::dot_fn(if k_packed.is_some() {
        GgmlType::F32
    } else {
        k_type
    });
    let q_row_bytes = super::row_bytes(k_type, dk);
    sc.q_bytes.resize(group * q_row_bytes, 0);
    for h in 0..group {
        super::quantize_row(
            k_type,
            &qrow[h * dk..(h + 1) * dk],
            &mut sc.q_bytes[h * q_row_bytes..(h + 1) * q_row_bytes],
        );
    }
    sc.q16.clear();
    if k_type == GgmlType::F16 && k_packed.is_none() {
        sc.q16
            .extend(qrow[..group * dk].iter().map(|&x| half::f16::from_f32(x)));
    }
    sc.k.resize(dk, 0.0);
    sc.v.resize(dv, 0.0);
    sc.acc.clear();
    sc.acc.resize(group * dv, 0.0);
    sc.acc16.clear();
    sc.acc16.resize(group * dv, half::f16::ZERO);
    sc.m.clear();
    sc.m.resize(group, f32::NEG_INFINITY);
    sc.s.clear();
    sc.s.resize(group, 0.0);
    sc.cells.clear();
    sc.cells.reserve(n_cells_max as usize);
    sc.seen.clear();
    sc.seen.resize((cells.end - cells.start) as usize, false);
    visible_row(t, cells.start, &mut sc.seen);
    sc.cells.extend(
        cells
            .zip(&sc.seen)
            .filter(|&(_, &seen)| seen)
            .map(|(j, _)| j),
    );
    for ci in 0..sc.cells.len() {
        let j = sc.cells[ci] as usize;
        let k_bytes = k_packed.and_then(|_| k.packed(j, g * dk, dk));
        let mut k16 = k.half(j, g * dk, dk);
        if k16.is_none() && k_bytes.is_none() && k.cast_f16() {
            k.read(j, g * dk, &mut sc.k);
            to_half(&sc.k, &mut sc.k16);
            k16 = Some(&sc.k16);
        }
        let k_row: &[u8] = match (k_bytes, k16) {
            (Some((_, kb)), _) => kb,
            (None, Some(h)) => f16_bytes(h),
            (None, None) => {
                k.read(j, g * dk, &mut sc.k);
                f32_bytes(&sc.k)
            }
        };
        let mut v16 = v.half(j, g * dv, dv);
        if v16.is_none() {
            v.read(j, g * dv, &mut sc.v);
            if v.cast_f16() {
                to_half(&sc.v, &mut sc.v16);
                v16 = Some(&sc.v16);
            }
        }
        for h in 0..group {
            let q = &sc.q_bytes[h * q_row_bytes..(h + 1) * q_row_bytes];
            let mut s = match (k_bytes, k16) {
                (Some((kt, kb)), _) => super::vec_dot(kt, dk, kb, q),
                (None, Some(kh)) => dot_f16_ggml(kh, &sc.q16[h * dk..(h + 1) * dk]),
                (None, None) => kdot(dk, k_row, q),
            } * scale;
            if softcap != 0.0 {
                // `scale` already holds upstream's `scale / softcap`
                s = softcap * s.tanh();
            }
            let m_old = sc.m[h];
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if s > m_old {
                sc.m[h] = s;
                ms = (m_old - s).exp();
            } else {
                vs = (s - m_old).exp();
            }
            match v16 {
                Some(vh) if f16_v => {
                    let scale = (ms != 1.0).then_some(ms);
                    f16_scale_mad(&mut sc.acc16[h * dv..(h + 1) * dv], vh, scale, vs);
                }
                _ => {
                    let acc = &mut sc.acc[h * dv..(h + 1) * dv];
                    if ms != 1.0 {
                        for a in acc.iter_mut() {
                            *a *= ms;
                        }
                    }
                    axpy(vs, &sc.v, acc);
                }
            }
            // one rounding: upstream's build (GCC, FMA enabled) fuses ggml's `S = S*ms + vs`
            sc.s[h] = fmadd(sc.s[h], ms, vs);
        }
    }
    // the sinks, as upstream: a logit without a value joins the softmax after the cells,
    // on VKQ already in f32 (`ggml_vec_scale_f32`)
    let sink_scale = |h: usize, m: &mut f32, s: &mut f32| -> f32 {
        let Some(sk) = sinks else { return 1.0 };
        let sink = sk[h];
        let (mut ms, mut vs) = (1.0f32, 1.0f32);
        if sink > *m {
            ms = (*m - sink).exp();
            *m = sink;
        } else {
            vs = (sink - *m).exp();
        }
        *s = fmadd(*s, ms, vs);
        ms
    };
    if partial {
        // the split path's partial result per head: M, S, then the unnormalized VKQ in f32
        for h in 0..group {
            let (mut m, mut s) = (sc.m[h], sc.s[h]);
            let ms = sink_scale(h, &mut m, &mut s);
            let o = &mut out[h * (2 + dv)..(h + 1) * (2 + dv)];
            o[0] = m;
            o[1] = s;
            for (d, o) in o[2..].iter_mut().enumerate() {
                let a = if f16_v {
                    sc.acc16[h * dv + d].to_f32()
                } else {
                    sc.acc[h * dv + d]
                };
                *o = if ms != 1.0 { a * ms } else { a };
            }
        }
        return;
    }
    for h in 0..group {
        let (mut m, mut s) = (sc.m[h], sc.s[h]);
        let ms = sink_scale(h, &mut m, &mut s);
        let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
        let o = &mut out[h * dv..(h + 1) * dv];
        if f16_v {
            for (o, a) in o.iter_mut().zip(&sc.acc16[h * dv..(h + 1) * dv]) {
                let a = a.to_f32();
                *o = if ms != 1.0 { a * ms } else { a } * inv;
            }
        } else {
            for (o, &a) in o.iter_mut().zip(&sc.acc[h * dv..(h + 1) * dv]) {
                *o = if ms != 1.0 { a * ms } else { a } * inv;
            }
        }
    }
}

/// The orthonormal Walsh-Hadamard transform of every `n` (a power of two) consecutive values
/// in place, as ggml's CPU `fwht`: scale by 1/sqrt(n), then the butterflies `(u + v, u - v)`
/// with strides 1, 2, 4, ... (bit-identical to its SIMD passes, whose FMA by -1 is exact).
pub fn hadamard_rows(x: &mut [f32], n: usize) {
    let scale = 1.0 / (n as f32).sqrt();
    for d in x.chunks_exact_mut(n) {
        for v in d.iter_mut() {
            *v *= scale;
        }
        let mut len = 1;
        while len < n {
            for i in (0..n).step_by(2 * len) {
                for j in i..i + len {
                    let (u, v) = (d[j], d[j + len]);
                    d[j] = u + v;
                    d[j + len] = u - v;
                }
            }
            len <<= 1;
        }
    }
}

#[cfg(test)]
mod attn_scratch_tests {
    use super::*;

    /// Rows of a cache in f32, or in half precision when `f16`.
    struct Rows {
        width: usize,
        f32s: Vec<f32>,
        f16s: Vec<half::f16>,
        f16: bool,
    }

    impl KvRows for Rows {
        fn read(&self, cell: usize, off: usize, dst: &mut [f32]) {
            let start = cell * self.width + off;
            dst.copy_from_slice(&self.f32s[start..start + dst.len()]);
        }
        fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[half::f16]> {
            let start = cell * self.width + off;
            self.f16.then(|| &self.f16s[start..start + len])
        }
        fn is_f16(&self) -> bool {
            self.f16
        }
    }

    fn capacities(sc: &AttnScratch) -> [usize; 10] {
        [
            sc.q_bytes.capacity(),
            sc.q16.capacity(),
            sc.k.capacity(),
            sc.v.capacity(),
            sc.acc.capacity(),
            sc.acc16.capacity(),
            sc.m.capacity(),
            sc.s.capacity(),
            sc.cells.capacity(),
            sc.seen.capacity(),
        ]
    }

    /// A task on a fresh buffer set that `reserve_for` prepared allocates nothing (a pool
    /// thread's first attention task can come in any decode).
    #[test]
    fn reserved_scratch_does_not_grow_in_a_task() {
        let (n_head, n_head_kv, dk, dv, n_cells) = (4, 2, 64, 32, 16u32);
        let shape = AttnShape {
            n_head,
            n_head_kv,
            dk,
            dv,
            scale: 0.125,
            softcap: 0.0,
            n_cells_max: n_cells,
            flash_attn: true,
        };
        let rows = |width: usize, f16: bool| {
            let f32s: Vec<f32> = (0..n_cells as usize * width * n_head_kv)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
                .collect();
            let f16s = f32s.iter().map(|&x| half::f16::from_f32(x)).collect();
            Rows {
                width: width * n_head_kv,
                f32s,
                f16s,
                f16,
            }
        };
        let q: Vec<f32> = (0..n_head * dk).map(|i| (i % 5) as f32 / 4.0).collect();
        let group = n_head / n_head_kv;
        for f16 in [false, true] {
            let (k, v) = (rows(dk, f16), rows(dv, f16));
            let mut sc = AttnScratch::default();
            sc.reserve_for(shape);
            let before = capacities(&sc);
            let mut out = vec![0f32; group * dv];
            for g in 0..n_head_kv {
                let qrow = &q[g * group * dk..(g + 1) * group * dk];
                attn_task(
                    shape,
                    qrow,
                    0,
                    g,
                    0..n_cells,
                    false,
                    &|_, _, out: &mut [bool]| out.fill(true),
                    &k,
                    &v,
                    None,
                    &mut out,
                    &mut sc,
                );
            }
            assert_eq!(capacities(&sc), before, "f16 cache: {f16}");
            assert!(out.iter().all(|x| x.is_finite() && *x != 0.0));
        }
    }
}
