//! DeepSeek-V4's hyper-connection mixes (`ggml_dsv4_hc_comb` and the unfused ops that
//! compute the `pre` and `post` weights beside it), as ggml-cpu computes them.

/// What a hyper-connection's mixes make (see `graph::Op::HcMix`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HcMixKind {
    /// DeepSeek-V4's manifold hyper-connections: `[pre | post | comb]` (`hc + hc + hc*hc`
    /// values) from `(2 + hc) * hc` mixes and three scales; `post = 2 * sigmoid(..)`, `comb`
    /// Sinkhorn-normalised `iters` times.
    Manifold { iters: usize },
    /// HY-V4's independent hyper-connections (no comb): `[pre | post]` from `2 * hc` mixes
    /// and two scales; `post = magnitude * sigmoid(..) + eps` (SCALE, then SCALE_BIAS).
    Independent { magnitude: f32 },
    /// The output head's weights: `pre` only, from `hc` mixes and one scale.
    Head,
}

/// One token's hyper-connection weights into `out` from its `mixes`, the `scale`s and the
/// `base`s (see `graph::Op::HcMix`); `pre = sigmoid(m * scale[0] + base) + eps` in every
/// kind (ggml's MUL, ADD, SIGMOID, SCALE_BIAS(1, eps): one rounding each).
pub fn hc_mix(
    mixes: &[f32],
    scale: &[f32],
    base: &[f32],
    hc: usize,
    eps: f32,
    kind: HcMixKind,
    out: &mut [f32],
) {
    let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
    for i in 0..hc {
        let v = mixes[i] * scale[0];
        out[i] = sigmoid(v + base[i]) + eps;
    }
    let iters = match kind {
        HcMixKind::Head => return,
        HcMixKind::Independent { magnitude } => {
            for i in hc..2 * hc {
                let v = mixes[i] * scale[1];
                out[i] = sigmoid(v + base[i]) * magnitude + eps;
            }
            return;
        }
        HcMixKind::Manifold { iters } => iters,
    };
    for i in hc..2 * hc {
        let v = mixes[i] * scale[1];
        out[i] = sigmoid(v + base[i]) * 2.0;
    }
    let comb = &mut out[2 * hc..2 * hc + hc * hc];
    let (m, b) = (&mixes[2 * hc..], &base[2 * hc..]);
    // the fused kernel: per source, a softmax over the destinations, plus eps
    for src in 0..hc {
        let mut max = f32::NEG_INFINITY;
        for dst in 0..hc {
            let i = dst + hc * src;
            let v = m[i].mul_add(scale[2], b[i]);
            comb[i] = v;
            max = if max > v { max } else { v };
        }
        let mut sum = 0.0f32;
        for dst in 0..hc {
            let i = dst + hc * src;
            let v = (comb[i] - max).exp();
            comb[i] = v;
            sum += v;
        }
        let inv = 1.0 / sum;
        for dst in 0..hc {
            let i = dst + hc * src;
            comb[i] = comb[i].mul_add(inv, eps);
        }
    }
    // Sinkhorn: columns (each destination over its sources), then rows and columns again
    let norm = |comb: &mut [f32], cols: bool| {
        for a in 0..hc {
            let at = |b: usize| if cols { a + hc * b } else { b + hc * a };
            let mut sum = eps;
            for b in 0..hc {
                sum += comb[at(b)];
            }
            let inv = 1.0 / sum;
            for b in 0..hc {
                comb[at(b)] *= inv;
            }
        }
    };
    norm(comb, true);
    for _ in 1..iters {
        norm(comb, false);
        norm(comb, true);
    }
}
