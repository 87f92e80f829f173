//! DeepSeek-V4's hyper-connection mixes (`ggml_dsv4_hc_comb` and the unfused ops that
//! compute the `pre` and `post` weights beside it), as ggml-cpu computes them.

/// One token's `[pre | post | comb]` (`hc + hc + hc*hc` values) into `out` from its
/// `mixes` (`(2 + hc) * hc` values), the three `scale`s and the `base`s (see
/// `graph::Op::HcMix`).
pub fn hc_mix(
    mixes: &[f32],
    scale: [f32; 3],
    base: &[f32],
    hc: usize,
    eps: f32,
    iters: usize,
    out: &mut [f32],
) {
    let sigmoid = |v: f32| 1.0 / (1.0 + (-v).exp());
    for i in 0..hc {
        // MUL, ADD, SIGMOID, SCALE_BIAS(1, eps): one rounding each
        let v = mixes[i] * scale[0];
        out[i] = sigmoid(v + base[i]) + eps;
        let v = mixes[hc + i] * scale[1];
        out[hc + i] = sigmoid(v + base[hc + i]) * 2.0;
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
