//! State-space ops, one token of one sequence at a time: ggml's SSM_CONV (a depthwise causal
//! convolution over the last `d_conv` inputs of every channel) and SSM_SCAN (the selective
//! scan of Mamba-1, with a decay per state element, and of Mamba-2, with one per head), with
//! ggml-cpu's float order (`ggml_compute_forward_ssm_conv_f32`/`_ssm_scan_f32`): a
//! micro-batch's tokens of one sequence run in order, each reading the state the previous
//! one left, which is what ggml's loop over `n_seq_tokens` does.

/// `ggml_compute_softplus_f32`.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// SSM_CONV of one token: `state` holds each channel's last `d_conv - 1` inputs
/// (`[d_conv - 1, channels]`, oldest first), `x` the token's input per channel, `w` the
/// kernel (`[d_conv, channels]`). Writes the convolution per channel into `out` and shifts
/// `x` into the state (upstream's write-back of the last `d_conv - 1` columns).
pub fn ssm_conv_step(state: &mut [f32], x: &[f32], w: &[f32], d_conv: usize, out: &mut [f32]) {
    let nc = d_conv;
    let keep = nc - 1;
    for (ch, (o, &xv)) in out.iter_mut().zip(x).enumerate() {
        let s = &mut state[ch * keep..(ch + 1) * keep];
        let c = &w[ch * nc..(ch + 1) * nc];
        let mut sum = 0.0f32;
        for i in 0..keep {
            sum += s[i] * c[i];
        }
        sum += xv * c[keep];
        *o = sum;
        if keep > 0 {
            s.copy_within(1.., 0);
            s[keep - 1] = xv;
        }
    }
}

/// A dilated depthwise causal conv of one token (Qwen4-exp's PLE conv, upstream's sum of
/// shifted copies): `state` keeps the last `(d_conv - 1) * dil` inputs of each channel
/// (oldest first); tap `k` (weight `w[ch * d_conv + k]`) reads the input `(d_conv - 1 - k) *
/// dil` tokens back, the taps' products (MUL) summed in tap order (ADD); then `x` is shifted
/// into the state.
pub fn ssm_conv_step_dilated(
    state: &mut [f32],
    x: &[f32],
    w: &[f32],
    d_conv: usize,
    dil: usize,
    out: &mut [f32],
) {
    let keep = (d_conv - 1) * dil;
    for (ch, (o, &xv)) in out.iter_mut().zip(x).enumerate() {
        let s = &mut state[ch * keep..(ch + 1) * keep];
        let c = &w[ch * d_conv..(ch + 1) * d_conv];
        let tap = |k: usize| if k * dil < keep { s[k * dil] } else { xv };
        let mut sum = tap(0) * c[0];
        for (k, &ck) in c.iter().enumerate().skip(1) {
            sum += tap(k) * ck;
        }
        *o = sum;
        if keep > 0 {
            s.copy_within(1.., 0);
            s[keep - 1] = xv;
        }
    }
}

/// The shapes of one GATED_DELTA_NET: `s_v` values per head (K and V heads alike), `h_v`
/// V heads (one state `[s_v, s_v]` each), `h_k` Q/K heads (V head h reads `h % h_k`), and
/// whether the decay is per row (`kda`: Kimi's delta attention) or one per head.
#[derive(Clone, Copy, Debug)]
pub struct GdnShape {
    pub s_v: usize,
    pub h_v: usize,
    pub h_k: usize,
    pub kda: bool,
}

/// GATED_DELTA_NET of one token and one V head, as ggml-cpu's
/// `ggml_compute_forward_gated_delta_net_one_chunk`: `s` is the head's state stored
/// transposed (`s[j*n + i]` = S[i][j]), `q`, `k`, `v` the head's rows, `g` its decay (one
/// value, or `n` for KDA), `beta` its update strength; writes the head's output to `out`.
/// `delta` is scratch of `n` values.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_net_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: f32,
    delta: &mut [f32],
    out: &mut [f32],
) {
    use super::super::vec::{axpy, dot_f32_ggml};
    let n = v.len();
    if g.len() == n {
        for (d, &gv) in delta.iter_mut().zip(g) {
            *d = gv.exp();
        }
        for row in s.chunks_exact_mut(n) {
            for (x, &e) in row.iter_mut().zip(delta.iter()) {
                *x *= e;
            }
        }
    } else {
        let e = g[0].exp();
        for x in s.iter_mut() {
            *x *= e;
        }
    }
    for (j, row) in s.chunks_exact(n).enumerate() {
        delta[j] = (v[j] - dot_f32_ggml(row, k)) * beta;
    }
    for (row, &d) in s.chunks_exact_mut(n).zip(delta.iter()) {
        axpy(d, k, row);
    }
    let scale = 1.0 / (n as f32).sqrt();
    for (o, row) in out.iter_mut().zip(s.chunks_exact(n)) {
        *o = dot_f32_ggml(row, q) * scale;
    }
}

/// MiniMax-01's lightning attention for one token and one head, in its recurrent form:
/// upstream (src/models/minimax-01.cpp) builds the block form of a micro-batch from ggml ops
/// (Q and K scaled by `exp(-r (i+1))` and `exp(-r (T-1-i))`, the in-block `q k` products by
/// `exp(-r (j-i))` for `j >= i`, the old state by `exp(-r T)`), which is this recurrence
/// token by token (positions consecutive in the block): `S = exp(-r) S + v k^T`, `out = S q`.
/// `s` is the head's state `[n, n]` stored as upstream's (`s[e*n + c]`: value row `e`, key
/// column `c`), `decay` is `exp(-r)`.
pub fn lightning_attn_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    out: &mut [f32],
) {
    use super::super::vec::dot_f32_ggml;
    let n = k.len();
    for ((row, &ve), o) in s.chunks_exact_mut(n).zip(v).zip(out.iter_mut()) {
        for (x, &kc) in row.iter_mut().zip(k) {
            *x = x.mul_add(decay, ve * kc);
        }
        *o = dot_f32_ggml(row, q);
    }
}

/// The per-head slopes of MiniMax-01's lightning attention before the layer's scale
/// (upstream's `llm_graph_input_la`: `start * start^h`, `start = 2^(-2^(-(log2 n_head - 3)))`).
pub fn lightning_slopes(n_head: usize) -> Vec<f32> {
    let start = 2f32.powf(-(2f32.powf(-((n_head as f32).log2() - 3.0))));
    (0..n_head).map(|h| start * start.powf(h as f32)).collect()
}

/// The shapes of one SSM_SCAN: `d_state` values per state row, `head_dim` rows per head,
/// `n_head` heads, `n_group` groups of B and C (heads share them in order).
#[derive(Clone, Copy, Debug)]
pub struct ScanShape {
    pub d_state: usize,
    pub head_dim: usize,
    pub n_head: usize,
    pub n_group: usize,
}

/// SSM_SCAN of one token. `s`: the sequence's state `[d_state, head_dim, n_head]`, updated in
/// place; `x` `[head_dim, n_head]`; `dt` `[n_head]`; `a` `[d_state, n_head]` (Mamba-1) or
/// `[n_head]` (Mamba-2: one decay per head, `a.len() == n_head`); `b`, `c`
/// `[d_state, n_group]`; writes `y` `[head_dim, n_head]`.
#[allow(clippy::too_many_arguments)]
pub fn ssm_scan_step(
    sh: ScanShape,
    s: &mut [f32],
    x: &[f32],
    dt: &[f32],
    a: &[f32],
    b: &[f32],
    c: &[f32],
    y: &mut [f32],
) {
    let (nc, nr, nh) = (sh.d_state, sh.head_dim, sh.n_head);
    let heads_per_group = nh / sh.n_group.max(1);
    let scalar_decay = a.len() == nh;
    for h in 0..nh {
        let dt_sp = softplus(dt[h]);
        let g = h / heads_per_group.max(1);
        let (bg, cg) = (&b[g * nc..(g + 1) * nc], &c[g * nc..(g + 1) * nc]);
        if scalar_decay {
            let da = (dt_sp * a[h]).exp();
            for i1 in 0..nr {
                let ii = i1 + h * nr;
                let x_dt = x[ii] * dt_sp;
                let row = &mut s[ii * nc..(ii + 1) * nc];
                y[ii] = scan_row_mamba2(row, da, x_dt, bg, cg);
            }
        } else {
            for i1 in 0..nr {
                let ii = i1 + h * nr;
                let x_dt = x[ii] * dt_sp;
                let row = &mut s[ii * nc..(ii + 1) * nc];
                let ah = &a[h * nc..(h + 1) * nc];
                let mut sum = 0.0f32;
                for i0 in 0..nc {
                    let st = row[i0] * (dt_sp * ah[i0]).exp() + bg[i0] * x_dt;
                    sum += st * cg[i0];
                    row[i0] = st;
                }
                y[ii] = sum;
            }
        }
    }
}

/// ggml's AVX2 steps of 32 values (4 vectors of 8) with one FMA accumulator per vector.
const STEP: usize = 32;

/// One state row of the Mamba-2 scan: `state = state * dA + B * x_dt`, the sum of
/// `state * C`. The first `len & !31` values accumulate as ggml's AVX2 loop (four 8-lane
/// FMA accumulators, reduced pairwise, then the halves, then two horizontal adds), the rest
/// in order as its scalar tail.
fn scan_row_mamba2(row: &mut [f32], da: f32, x_dt: f32, b: &[f32], c: &[f32]) -> f32 {
    let nc = row.len();
    let np = nc & !(STEP - 1);
    let mut acc = [[0.0f32; 8]; 4];
    for i in (0..np).step_by(STEP) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (lane, a) in acc.iter_mut().enumerate() {
                let k = i + j * 8 + lane;
                let st = row[k] * da + b[k] * x_dt;
                *a = st.mul_add(c[k], *a);
                row[k] = st;
            }
        }
    }
    let mut sum = if np > 0 {
        for lane in 0..8 {
            acc[0][lane] += acc[2][lane];
            acc[1][lane] += acc[3][lane];
        }
        for lane in 0..8 {
            acc[0][lane] += acc[1][lane];
        }
        let v = acc[0];
        let t0 = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
        let t1 = [t0[0] + t0[1], t0[2] + t0[3]];
        t1[0] + t1[1]
    } else {
        0.0
    };
    for k in np..nc {
        let st = row[k] * da + b[k] * x_dt;
        sum += st * c[k];
        row[k] = st;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convolution of a sequence token by token equals the direct formula over the
    /// zero-padded history, and leaves the last d_conv - 1 inputs as the state.
    #[test]
    fn dilated_conv_steps_equal_the_shifted_sum() {
        let (d_conv, dil, ch, n) = (4, 3, 2, 14);
        let w: Vec<f32> = (0..d_conv * ch).map(|i| 0.1 * i as f32 - 0.3).collect();
        let xs: Vec<Vec<f32>> = (0..n)
            .map(|t| (0..ch).map(|c| (t * 5 + c) as f32 * 0.25 - 1.0).collect())
            .collect();
        let mut state = vec![0.0f32; (d_conv - 1) * dil * ch];
        for t in 0..n {
            let mut out = vec![0.0f32; ch];
            ssm_conv_step_dilated(&mut state, &xs[t], &w, d_conv, dil, &mut out);
            for c in 0..ch {
                let mut want = 0.0f32;
                for k in 0..d_conv {
                    let back = (d_conv - 1 - k) * dil;
                    let v = if t >= back { xs[t - back][c] } else { 0.0 };
                    want += v * w[c * d_conv + k];
                }
                assert!(
                    (out[c] - want).abs() < 1e-6,
                    "t {t} c {c}: {} vs {want}",
                    out[c]
                );
            }
        }
    }

    #[test]
    fn ssm_conv_steps_equal_the_causal_convolution() {
        let (d_conv, ch, n) = (4, 3, 6);
        let w: Vec<f32> = (0..d_conv * ch).map(|i| 0.1 * i as f32 - 0.3).collect();
        let xs: Vec<Vec<f32>> = (0..n)
            .map(|t| (0..ch).map(|c| (t * 7 + c) as f32 * 0.25 - 1.0).collect())
            .collect();
        let mut state = vec![0.0f32; (d_conv - 1) * ch];
        for t in 0..n {
            let mut out = vec![0.0; ch];
            ssm_conv_step(&mut state, &xs[t], &w, d_conv, &mut out);
            for c in 0..ch {
                let mut want = 0.0f32;
                for i in 0..d_conv {
                    let src = t as i64 - (d_conv - 1 - i) as i64;
                    if src >= 0 {
                        want += xs[src as usize][c] * w[c * d_conv + i];
                    }
                }
                assert!(
                    (out[c] - want).abs() < 1e-5,
                    "t {t} c {c}: {} vs {want}",
                    out[c]
                );
            }
        }
        for c in 0..ch {
            let hist: Vec<f32> = (n - 3..n).map(|t| xs[t][c]).collect();
            assert_eq!(&state[c * 3..c * 3 + 3], &hist[..]);
        }
    }

    /// Mamba-1 and Mamba-2 forms against the recurrence written out in f64 (one head of
    /// d_state 40: the AVX2-ordered part and a scalar tail).
    #[test]
    fn ssm_scan_matches_the_recurrence() {
        for mamba2 in [false, true] {
            let sh = ScanShape {
                d_state: 40,
                head_dim: 2,
                n_head: 2,
                n_group: 1,
            };
            let n_a = if mamba2 { 2 } else { 40 * 2 };
            let a: Vec<f32> = (0..n_a).map(|i| -0.5 - 0.01 * i as f32).collect();
            let mut s = vec![0.0f32; 40 * 4];
            let mut want = vec![0.0f64; 40 * 4];
            for t in 0..3 {
                let x: Vec<f32> = (0..4).map(|i| 0.3 * (i + t) as f32 - 0.5).collect();
                let dt: Vec<f32> = vec![0.2 * t as f32 - 0.1, 25.0];
                let b: Vec<f32> = (0..40)
                    .map(|i| (i as f32 * 0.37 + t as f32).sin())
                    .collect();
                let c: Vec<f32> = (0..40)
                    .map(|i| (i as f32 * 0.11 - t as f32).cos())
                    .collect();
                let mut y = vec![0.0f32; 4];
                ssm_scan_step(sh, &mut s, &x, &dt, &a, &b, &c, &mut y);
                for h in 0..2 {
                    let sp = if dt[h] > 20.0 {
                        dt[h] as f64
                    } else {
                        (1.0 + (dt[h] as f64).exp()).ln()
                    };
                    for r in 0..2 {
                        let ii = r + h * 2;
                        let mut sum = 0.0f64;
                        for k in 0..40 {
                            let av = if mamba2 { a[h] } else { a[h * 40 + k] } as f64;
                            let st = want[ii * 40 + k] * (sp * av).exp()
                                + b[k] as f64 * x[ii] as f64 * sp;
                            want[ii * 40 + k] = st;
                            sum += st * c[k] as f64;
                        }
                        assert!(
                            (y[ii] as f64 - sum).abs() < 1e-4,
                            "mamba2 {mamba2} t {t} y[{ii}]"
                        );
                    }
                }
            }
            for (g, w) in s.iter().zip(&want) {
                assert!((*g as f64 - w).abs() < 1e-4);
            }
        }
    }
}
