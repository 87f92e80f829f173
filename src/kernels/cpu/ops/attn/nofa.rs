//! Attention as upstream computes it with flash attention disabled (llama-cpp-python's
//! default): `kq = MUL_MAT(k, q)`, `SOFT_MAX_EXT(kq, mask, scale)`, `kqv = MUL_MAT(v^T, kq)`
//! over upstream's padded KV view (`n_kv` a multiple of 256). Each MUL_MAT converts its
//! activations to the cache's type (Q and the probabilities rounded to F16 for an F16 cache)
//! and runs llamafile's tinyBLAS order with several query rows, ggml's vec_dot with one; the
//! softmax is `ggml_vec_soft_max_f32` over the whole row (see [`super::attn_tiled::soft_max`]),
//! its sum inverted in f64 (with attention sinks: each head's sink in its max and sum, as
//! `ggml_soft_max_add_sinks`). Emulated per (token, KV head) task with the same float order.

use super::common::{alibi_slope, Attn, AttnScratch, AttnShape, KvRows, NoFaScratch};
use crate::kernels::cpu::dispatch::soft_max;
use crate::kernels::cpu::pool::{SharedOut, ThreadPool};
use crate::kernels::cpu::vec::fmadd;

/// Whether this path can follow upstream here: K and V in F16 or F32 (not blocks).
pub fn applies(k: &dyn KvRows, v: &dyn KvRows) -> bool {
    k.packed(0, 0, 0).is_none() && v.packed(0, 0, 0).is_none()
}

/// The number of cells upstream's graph attends over: the used cells padded to 256, at
/// least 256, at most the cache size (`llama_kv_cache::get_n_kv`).
pub fn upstream_n_kv(used: u32, size: u32) -> u32 {
    size.min(used.next_multiple_of(256).max(256))
}

/// Row `cell`'s values `off..off + dst.len()` as f32, and whether they are F16 values.
fn read(r: &dyn KvRows, cell: usize, off: usize, dst: &mut [f32]) -> bool {
    if let Some(h) = r.half(cell, off, dst.len()) {
        for (d, s) in dst.iter_mut().zip(h) {
            *d = s.to_f32();
        }
        return true;
    }
    r.read(cell, off, dst);
    false
}

/// The horizontal sum of 8 lanes in ggml's order: `((0+4)+(2+6))+((1+5)+(3+7))`.
fn hsum8(x: &[f32]) -> f32 {
    let w: [f32; 4] = std::array::from_fn(|i| x[i + 4] + x[i]);
    (w[0] + w[2]) + (w[1] + w[3])
}

/// The value of a dot product from its lane accumulators: tinyBLAS (one 8-lane accumulator,
/// `acc` holds 8 values) or ggml's vec_dot (`acc` holds four 8-lane accumulators, reduced
/// 0+2, 1+3, then 0+1). Both orders need `n` a multiple of 32 (upstream's `n_kv` is).
pub(super) fn reduce(acc: &[f32], tiny: bool) -> f32 {
    if tiny {
        return hsum8(&acc[..8]);
    }
    let mut s = [0f32; 8];
    for l in 0..8 {
        s[l] = (acc[l] + acc[16 + l]) + (acc[8 + l] + acc[24 + l]);
    }
    // hadd(hadd(lo + hi)): ((0+4)+(1+5)) + ((2+6)+(3+7))
    let t: [f32; 4] = std::array::from_fn(|i| s[i] + s[i + 4]);
    (t[0] + t[1]) + (t[2] + t[3])
}

/// Attention without flash attention over `n_kv` cells (upstream's padded view), tasks
/// (token, KV head) over `pool`.
pub fn attn_no_fa(
    a: &Attn<'_>,
    out: &mut [f32],
    pool: &ThreadPool,
    scratch: &[std::sync::Mutex<AttnScratch>],
) {
    let Attn {
        shape,
        q,
        n_tokens,
        rows: view,
        visible_row,
        k,
        v,
        sinks,
        alibi,
    } = *a;
    let AttnShape {
        n_head,
        n_head_kv,
        dk,
        dv,
        ..
    } = shape;
    assert!(q.len() >= n_tokens * n_head * dk && out.len() >= n_tokens * n_head * dv);
    assert!(scratch.len() >= pool.n_threads());
    let group = n_head / n_head_kv;
    // several query rows: llamafile's tinyBLAS; one: ggml's vec_dot
    let tiny = n_tokens >= 2;
    let out_ptr = SharedOut::new(out);
    pool.parallel_for(n_tokens * n_head_kv, &|task, thread| {
        let (t, g) = (task / n_head_kv, task % n_head_kv);
        let mut guard = scratch[thread].lock().unwrap_or_else(|e| e.into_inner());
        let sc = &mut guard.nofa;
        // the token's mask over its view, once for the task's heads
        let cells = view(t);
        sc.seen.clear();
        sc.seen.resize((cells.end - cells.start) as usize, false);
        visible_row(t, cells.start, &mut sc.seen);
        sc.dist.clear();
        if let Some(f) = alibi {
            sc.dist.resize((cells.end - cells.start) as usize, 0.0);
            f(t, cells.start, &mut sc.dist);
        }
        for hl in 0..group {
            let head = g * group + hl;
            let qrow = &q[(t * n_head + head) * dk..(t * n_head + head + 1) * dk];
            // SAFETY: task (t, g) writes only token t's heads g*group..(g+1)*group, disjoint
            // from every other task's; `out` is borrowed mutably for the whole call, which
            // waits for all tasks.
            let o = unsafe { out_ptr.slice((t * n_head + head) * dv, dv) };
            let slope = alibi.map(|_| alibi_slope(shape.max_bias, n_head, head));
            let sink = sinks.map(|s| s[head]);
            head_task(
                shape,
                qrow,
                g,
                cells.clone(),
                slope,
                sink,
                k,
                v,
                tiny,
                o,
                sc,
            );
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn head_task(
    shape: AttnShape,
    qrow: &[f32],
    g: usize,
    cells: std::ops::Range<u32>,
    slope: Option<f32>,
    sink: Option<f32>,
    k: &dyn KvRows,
    v: &dyn KvRows,
    tiny: bool,
    out: &mut [f32],
    sc: &mut NoFaScratch,
) {
    let AttnShape {
        dk,
        dv,
        scale,
        softcap,
        ..
    } = shape;
    // cells relative to the view's start: lanes and the softmax row follow upstream's view
    let base = cells.start as usize;
    let n = (cells.end - cells.start) as usize;
    // K·Q: an F32 K reads Q (permuted, already its vec_dot type) in place, which llamafile's
    // sgemm declines: ggml's vec_dot order then, whatever the number of query rows
    let tiny_k = tiny && k.is_f16();
    let k_lanes = if tiny_k { 8 } else { 32 };
    let lanes = if tiny { 8 } else { 32 };
    sc.row.resize(dk.max(dv), 0.0);
    sc.w.clear();
    sc.w.resize(n, f32::NEG_INFINITY);
    sc.q.clear();
    let k_half = k.is_f16();
    // Q converted to K's type (F16: rounded)
    sc.q.extend(qrow.iter().map(|&x| {
        if k_half {
            half::f16::from_f32(x).to_f32()
        } else {
            x
        }
    }));
    let mut acc = [0f32; 32];
    for j in 0..n {
        if !sc.seen[j] {
            continue;
        }
        let kr = &mut sc.row[..dk];
        read(k, base + j, g * dk, kr);
        acc[..k_lanes].fill(0.0);
        let full = dk / k_lanes * k_lanes;
        for (e, (&a, &b)) in kr[..full].iter().zip(&sc.q[..full]).enumerate() {
            acc[e % k_lanes] = fmadd(a, b, acc[e % k_lanes]);
        }
        let mut s = reduce(&acc[..k_lanes], tiny_k);
        let tail = kr[full..].iter().zip(&sc.q[full..dk]);
        if tiny_k {
            // tinyBLAS's tail
            for (&a, &b) in tail {
                s += a * b;
            }
        } else if !k_half {
            // ggml_vec_dot_f32's tail: in float, fused by upstream's build
            for (&a, &b) in tail {
                s = fmadd(a, b, s);
            }
        } else {
            // ggml_vec_dot_f16's tail: in f64
            let mut sf = f64::from(s);
            for (&a, &b) in tail {
                sf += f64::from(a * b);
            }
            s = sf as f32;
        }
        if softcap != 0.0 {
            // upstream's graph: scale by 1/softcap, tanh, scale by softcap, then the softmax's scale
            s = (s * (1.0 / softcap)).tanh() * softcap;
        }
        // SOFT_MAX_EXT: scale, then the mask times the head's slope (0 for a visible cell;
        // ALiBi: -|distance|)
        sc.w[j] = s * scale + slope.map_or(0.0, |m| m * sc.dist[j]);
    }
    let mut max =
        sc.w.iter()
            .fold(f32::NEG_INFINITY, |m, &x| if m > x { m } else { x });
    // the head's sink: a logit without a value, in the softmax's max and sum (ggml's
    // soft_max with sinks: MAX(max, sink), then the sum plus expf(sink - max) in f64)
    if let Some(sink) = sink {
        max = if max > sink { max } else { sink };
    }
    let mut sum = soft_max(&mut sc.w, max);
    if let Some(sink) = sink {
        sum += f64::from((sink - max).exp());
    }
    let inv = (1.0 / sum) as f32;
    let v_half = v.is_f16();
    // kqv: the probabilities converted to V's type, dotted with each of V's columns in the
    // lane order of the product; cells with probability 0 add nothing
    sc.acc.clear();
    sc.acc.resize(dv * lanes, 0.0);
    for j in 0..n {
        let mut p = sc.w[j] * inv;
        if v_half {
            p = half::f16::from_f32(p).to_f32();
        }
        if p == 0.0 {
            continue;
        }
        let vr = &mut sc.row[..dv];
        read(v, base + j, g * dv, vr);
        let lane = j % lanes;
        for (d, &x) in vr.iter().enumerate() {
            let a = &mut sc.acc[d * lanes + lane];
            *a = fmadd(x, p, *a);
        }
    }
    for (d, o) in out.iter_mut().enumerate() {
        *o = reduce(&sc.acc[d * lanes..(d + 1) * lanes], tiny);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_pads_the_kv_view_to_256() {
        assert_eq!(upstream_n_kv(12, 512), 256);
        assert_eq!(upstream_n_kv(256, 512), 256);
        assert_eq!(upstream_n_kv(257, 512), 512);
        assert_eq!(upstream_n_kv(300, 300), 300);
        assert_eq!(upstream_n_kv(0, 1024), 256);
    }

    #[test]
    fn reductions_follow_ggml() {
        let x: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 1e-7).collect();
        // tinyBLAS: lanes summed ((0+4)+(2+6))+((1+5)+(3+7))
        let w: [f32; 4] = std::array::from_fn(|i| x[i + 4] + x[i]);
        assert_eq!(reduce(&x[..8], true), (w[0] + w[2]) + (w[1] + w[3]));
        // vec_dot: accumulators (0+2)+(1+3), then lo+hi and two horizontal adds
        let s: Vec<f32> = (0..8)
            .map(|l| (x[l] + x[16 + l]) + (x[8 + l] + x[24 + l]))
            .collect();
        let t: [f32; 4] = std::array::from_fn(|i| s[i] + s[i + 4]);
        assert_eq!(reduce(&x, false), (t[0] + t[1]) + (t[2] + t[3]));
    }
}
