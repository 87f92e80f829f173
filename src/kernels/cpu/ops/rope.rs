//! ROPE: the per-position sin/cos cache (with YaRN) and its application to a row.

use crate::kernels::cpu::vec::fmadd;

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
