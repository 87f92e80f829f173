//! FLASH_ATTN_EXT on the CPU: [`flash_attn`] picks upstream's path for the shapes and cache
//! types at hand (without flash attention: `nofa`; a micro-batch of F16/F32 K and V: `tiled`;
//! one token over a long context: split-KV; otherwise the one-row kernel, here) so that the
//! float order, and so the results, follow upstream's.

mod common;
mod indexer;
mod msa;
mod nofa;
mod tiled;

pub use common::{alibi_slope, Attn, AttnScratch, AttnShape, KvRows, TILE_Q};
pub use indexer::{indexer_scores, top_k_ordered, top_k_set};
pub use msa::{msa_blocks, msa_n_pos, msa_score_dot};
pub use nofa::upstream_n_kv;

use crate::kernels::cpu::dispatch::{dot_f16_ggml, dot_fn, f16_scale_mad, quantize_row, vec_dot};
use crate::kernels::cpu::pool::{SharedOut, ThreadPool};
use crate::kernels::cpu::type_traits::{row_bytes, vec_dot_type};
use crate::kernels::cpu::vec::{axpy, fmadd};
/// ggml's FLASH_ATTN_EXT on the CPU: for each token (row of `q`, `n_head` heads of `dk`) and
/// each of its heads, the online softmax over the cells of `rows(token)` (its KV stream's)
/// that `visible(token, cell)` accepts (in cell order) of `scale`·q·k (soft-capped when `softcap` ≠ 0), accumulating v; in half
/// precision for an F16 V cache, as ggml's kernel. Tasks are (token, KV head) pairs spread
/// over `pool`; `scratch` holds one buffer set per pool thread.
pub fn flash_attn(
    a: &Attn<'_>,
    out: &mut [f32],
    pool: &ThreadPool,
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
        alibi,
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
        r.start..r.start + nofa::upstream_n_kv(r.end - r.start, shape.n_cells_max)
    };
    if !shape.flash_attn && nofa::applies(k, v) {
        let padded = Attn { rows: &view, ..*a };
        nofa::attn_no_fa(&padded, out, pool, scratch);
        return;
    }
    if n_tokens == 1 && shape.split_kv && split_kv_applies(k, v) {
        let cells = view(0);
        if cells.end - cells.start >= 512 {
            flash_attn_split_kv(a, cells, out, pool, scratch);
            return;
        }
    }
    if sinks.is_none() && tiled::applies(n_tokens, k, v) {
        tiled::flash_attn_tiled(a, out, pool, scratch);
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
            alibi,
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
    pool: &ThreadPool,
    scratch: &[std::sync::Mutex<AttnScratch>],
) {
    let Attn {
        shape,
        q,
        visible_row,
        k,
        v,
        sinks,
        alibi,
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
            alibi,
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

#[allow(clippy::too_many_arguments)]
fn attn_task(
    shape: AttnShape,
    qrow: &[f32],
    t: usize,
    g: usize,
    cells: std::ops::Range<u32>,
    partial: bool,
    visible_row: &(dyn Fn(usize, u32, &mut [bool]) + Sync),
    alibi: Option<&(dyn Fn(usize, u32, &mut [f32]) + Sync)>,
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
        max_bias,
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
        Some(kt) => vec_dot_type(kt),
        None if k.is_f16() || k.cast_f16() => GgmlType::F16,
        None => GgmlType::F32,
    };
    let kdot = dot_fn(if k_packed.is_some() {
        GgmlType::F32
    } else {
        k_type
    });
    let q_row_bytes = row_bytes(k_type, dk);
    sc.q_bytes.resize(group * q_row_bytes, 0);
    for h in 0..group {
        quantize_row(
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
    if let Some(f) = alibi {
        sc.dist.clear();
        sc.dist.resize((cells.end - cells.start) as usize, 0.0);
        f(t, cells.start, &mut sc.dist);
    }
    let first = cells.start;
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
                (Some((kt, kb)), _) => vec_dot(kt, dk, kb, q),
                (None, Some(kh)) => dot_f16_ggml(kh, &sc.q16[h * dk..(h + 1) * dk]),
                (None, None) => kdot(dk, k_row, q),
            } * scale;
            if softcap != 0.0 {
                // `scale` already holds upstream's `scale / softcap`
                s = softcap * s.tanh();
            }
            if alibi.is_some() {
                // the mask's value times the head's slope (`mv`), added after the scale
                let slope = alibi_slope(max_bias, n_head, g * group + h);
                s += slope * sc.dist[j - first as usize];
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
            max_bias: 0.0,
            n_cells_max: n_cells,
            flash_attn: true,
            split_kv: true,
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
                    None,
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
