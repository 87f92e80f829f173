//! Upstream's tiled CPU flash attention (`ggml_compute_forward_flash_attn_ext_tiled`), which
//! ggml runs instead of its one-row kernel when a micro-batch has at least [`TILE_Q`] query
//! rows and K and V are both F16 or both F32. Its float order differs from the one-row
//! kernel's: Q stays in f32, K and V tiles are widened to f32, the scores of a tile are a small
//! GEMM (one FMA chain over the head dimension per score), the softmax of a tile uses ggml's
//! `ggml_v_expf` with its lane sums added in f64, and V is accumulated by a second GEMM. Each
//! row's result depends only on the KV tiles (fixed at multiples of [`TILE_KV`] cells), not on
//! which query rows share a tile, so the task split is free.

use super::common::{
    alibi_slope, Attn, AttnScratch, AttnShape, KvRows, TiledScratch, TILE_KV, TILE_Q,
};
use crate::kernels::cpu::dispatch::{gemm_acc, soft_max};
use crate::kernels::cpu::pool::{SharedOut, ThreadPool};

/// How the kernel reads a cache: F16 rows, F32 rows, or F32 rows rounded to F16 (upstream
/// casts an F32 cache to F16 before flash attention).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Elem {
    F16,
    F32,
}

fn elem(r: &dyn KvRows) -> Option<Elem> {
    if r.packed(0, 0, 0).is_some() {
        None
    } else if r.is_f16() || r.cast_f16() {
        Some(Elem::F16)
    } else {
        Some(Elem::F32)
    }
}

/// Whether upstream runs its tiled kernel for this attention: at least [`TILE_Q`] query rows
/// and K, V of the same type, F16 or F32 (an F32 cache cast to F16 counts as F16).
pub fn applies(n_tokens: usize, k: &dyn KvRows, v: &dyn KvRows) -> bool {
    n_tokens >= TILE_Q && elem(k).is_some() && elem(k) == elem(v)
}

/// Values `off .. off + dst.len()` of row `cell` widened to f32 as upstream's tiled kernel
/// sees them (F16 widened exactly; an F32 row cast to F16 first when the cache says so).
fn read_f32(r: &dyn KvRows, cell: usize, off: usize, dst: &mut [f32], half: &mut Vec<half::f16>) {
    if let Some(h) = r.half(cell, off, dst.len()) {
        // exact either way; the slice conversion widens 8 at a time (F16C) where one call
        // per value cost ~1% of a prompt's time
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(h, dst);
        return;
    }
    r.read(cell, off, dst);
    if r.cast_f16() {
        half.clear();
        half.extend(dst.iter().map(|&x| half::f16::from_f32(x)));
        for (d, s) in dst.iter_mut().zip(half.iter()) {
            *d = s.to_f32();
        }
    }
}

/// The tiled flash attention over `n_tokens` query rows (see the module doc). Tasks are
/// (block of query tokens, KV head) pairs over `pool`, sharing each K/V tile between the
/// query heads of the group.
pub fn flash_attn_tiled(
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
        alibi,
        ..
    } = *a;
    let AttnShape {
        n_head, n_head_kv, ..
    } = shape;
    assert!(q.len() >= n_tokens * n_head * shape.dk && out.len() >= n_tokens * n_head * shape.dv);
    assert!(scratch.len() >= pool.n_threads());
    // smaller query blocks when there are few tasks per thread (rows are independent)
    let mut block = TILE_Q;
    while block > 16 && n_tokens.div_ceil(block) * n_head_kv < 4 * pool.n_threads() {
        block /= 2;
    }
    let n_blocks = n_tokens.div_ceil(block);
    let out_ptr = SharedOut::new(out);
    pool.parallel_for(n_blocks * n_head_kv, &|task, thread| {
        let (bi, g) = (task / n_head_kv, task % n_head_kv);
        let t0 = bi * block;
        let nt = block.min(n_tokens - t0);
        let mut sc = scratch[thread].lock().unwrap_or_else(|e| e.into_inner());
        let tiles = &mut sc.tiled;
        // the cells the block's tokens may see (their streams' used rows), in tiles of
        // TILE_KV from a stream's start (streams start at multiples of the tile)
        let (lo, hi) = (t0..t0 + nt).fold((u32::MAX, 0), |(lo, hi), t| {
            let r = rows(t);
            (lo.min(r.start), hi.max(r.end))
        });
        let lo = lo / TILE_KV as u32 * TILE_KV as u32;
        tile_task(
            shape,
            q,
            t0,
            nt,
            g,
            lo..hi.max(lo),
            visible_row,
            alibi,
            k,
            v,
            tiles,
        );
        let group = n_head / n_head_kv;
        let dv = shape.dv;
        for hl in 0..group {
            for tq in 0..nt {
                let r = hl * nt + tq;
                let s = tiles.s[r];
                let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
                let head = g * group + hl;
                // SAFETY: task (bi, g) writes only the rows of tokens t0..t0+nt and heads
                // g*group..(g+1)*group, disjoint from every other task's; `out` is borrowed
                // mutably for the whole call, which waits for all tasks.
                let o = unsafe { out_ptr.slice(((t0 + tq) * n_head + head) * dv, dv) };
                for (o, &a) in o.iter_mut().zip(&tiles.acc[r * dv..(r + 1) * dv]) {
                    *o = a * inv;
                }
            }
        }
    });
}

/// One task: query tokens `t0 .. t0 + nt` of the heads of KV head `g`; leaves the
/// unnormalized accumulators in `sc.acc` and the sums in `sc.s` (row `hl * nt + tq`).
#[allow(clippy::too_many_arguments)]
fn tile_task(
    shape: AttnShape,
    q: &[f32],
    t0: usize,
    nt: usize,
    g: usize,
    cells: std::ops::Range<u32>,
    visible_row: &(dyn Fn(usize, u32, &mut [bool]) + Sync),
    alibi: Option<&(dyn Fn(usize, u32, &mut [f32]) + Sync)>,
    k: &dyn KvRows,
    v: &dyn KvRows,
    sc: &mut TiledScratch,
) {
    let AttnShape {
        n_head,
        n_head_kv,
        dk,
        dv,
        scale,
        softcap,
        max_bias,
        ..
    } = shape;
    let group = n_head / n_head_kv;
    let rows = group * nt;
    // upstream folds the soft-cap's divisor into the scale
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };
    sc.q.resize(rows * dk, 0.0);
    for hl in 0..group {
        for tq in 0..nt {
            let src = ((t0 + tq) * n_head + g * group + hl) * dk;
            let r = hl * nt + tq;
            sc.q[r * dk..(r + 1) * dk].copy_from_slice(&q[src..src + dk]);
        }
    }
    sc.acc.clear();
    sc.acc.resize(rows * dv, 0.0);
    sc.m.clear();
    sc.m.resize(rows, f32::NEG_INFINITY);
    sc.s.clear();
    sc.s.resize(rows, 0.0);
    sc.kt.resize(dk * TILE_KV, 0.0);
    sc.v.resize(TILE_KV * dv, 0.0);
    sc.kq.resize(rows * TILE_KV, 0.0);
    sc.vis.resize(nt * TILE_KV, false);
    if alibi.is_some() {
        sc.dist.resize(nt * TILE_KV, 0.0);
    }
    sc.row.resize(dk.max(dv), 0.0);
    let (c0, n_kv) = (cells.start as usize, cells.end as usize);
    for ic in (c0..n_kv).step_by(TILE_KV) {
        let kv_tile = TILE_KV.min(n_kv - ic);
        // the mask of this tile; skipped when nothing in it is visible (as upstream)
        let mut any = false;
        for (tq, vis) in sc.vis.chunks_exact_mut(TILE_KV).take(nt).enumerate() {
            let (inside, past) = vis.split_at_mut(kv_tile);
            visible_row(t0 + tq, ic as u32, inside);
            past.fill(false);
            any |= inside.contains(&true);
        }
        if let Some(f) = alibi {
            for (tq, d) in sc.dist.chunks_exact_mut(TILE_KV).take(nt).enumerate() {
                f(t0 + tq, ic as u32, &mut d[..kv_tile]);
            }
        }
        if !any {
            continue;
        }
        // K tile transposed (kt[d][tk]): the GEMM's contiguous dimension is the cells
        for tk in 0..TILE_KV {
            if tk < kv_tile {
                let row = &mut sc.row[..dk];
                read_f32(k, ic + tk, g * dk, row, &mut sc.half);
                for (d, &x) in row.iter().enumerate() {
                    sc.kt[d * TILE_KV + tk] = x;
                }
            } else {
                for d in 0..dk {
                    sc.kt[d * TILE_KV + tk] = 0.0;
                }
            }
        }
        sc.kq.fill(0.0);
        gemm_acc(&mut sc.kq, &sc.q, &sc.kt, rows, dk, TILE_KV);
        for r in 0..rows {
            let tq = r % nt;
            let slope = alibi.map(|_| alibi_slope(max_bias, n_head, g * group + r / nt));
            let kq = &mut sc.kq[r * TILE_KV..(r + 1) * TILE_KV];
            let vis = &sc.vis[tq * TILE_KV..(tq + 1) * TILE_KV];
            let mut tile_max = f32::NEG_INFINITY;
            for (tk, (x, &vis)) in kq.iter_mut().zip(vis).enumerate() {
                let mut s = *x * scale;
                if softcap != 0.0 {
                    s = s.tanh() * softcap;
                }
                // upstream sets the padding past the tile's cells to -inf and adds the mask
                // (0 or -inf) to every other score: a NaN score stays NaN even where masked
                *x = if tk >= kv_tile {
                    f32::NEG_INFINITY
                } else if !vis {
                    s + f32::NEG_INFINITY
                } else {
                    // the mask times the head's slope: 0, or ALiBi's -|distance| scaled
                    s + slope.map_or(0.0, |m| m * sc.dist[tq * TILE_KV + tk])
                };
                // ggml_vec_max_f32's `MAX(max, x)` (`max > x ? max : x`): a NaN score
                // becomes the running maximum, so a row of NaN is not taken as masked
                tile_max = if tile_max > *x { tile_max } else { *x };
            }
            if tile_max == f32::NEG_INFINITY {
                // no visible cell for this row: it adds nothing
                kq.fill(0.0);
                continue;
            }
            let m_old = sc.m[r];
            let m_new = m_old.max(tile_max);
            if m_new > m_old {
                let ms = (m_old - m_new).exp();
                for a in &mut sc.acc[r * dv..(r + 1) * dv] {
                    *a *= ms;
                }
                sc.s[r] *= ms;
            }
            sc.m[r] = m_new;
            sc.s[r] = (f64::from(sc.s[r]) + soft_max(kq, m_new)) as f32;
        }
        for tk in 0..TILE_KV {
            let dst = &mut sc.v[tk * dv..(tk + 1) * dv];
            if tk < kv_tile {
                read_f32(v, ic + tk, g * dv, dst, &mut sc.half);
            } else {
                dst.fill(0.0);
            }
        }
        gemm_acc(&mut sc.acc, &sc.kq, &sc.v, rows, TILE_KV, dv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::vec::{gemm_acc_scalar, soft_max_scalar};

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    #[test]
    fn simd_gemm_equals_the_scalar_order() {
        let mut seed = 7;
        for &(m, k, n) in &[
            (1, 64, 64),
            (5, 64, 64),
            (13, 17, 27),
            (8, 3, 9),
            (192, 64, 64),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
            let c0: Vec<f32> = (0..m * n).map(|_| lcg(&mut seed)).collect();
            let (mut c1, mut c2) = (c0.clone(), c0.clone());
            gemm_acc(&mut c1, &a, &b, m, k, n);
            gemm_acc_scalar(&mut c2, &a, &b, m, k, n);
            assert!(
                c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{m}x{k}x{n}"
            );
        }
    }

    #[test]
    fn simd_soft_max_equals_the_scalar_order() {
        let mut seed = 3;
        for n in [64usize, 8, 13] {
            let mut x: Vec<f32> = (0..n).map(|_| lcg(&mut seed) * 30.0).collect();
            x[1] = f32::NEG_INFINITY;
            x[2] = -200.0;
            let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let (mut a, mut b) = (x.clone(), x.clone());
            let (sa, sb) = (soft_max(&mut a, max), soft_max_scalar(&mut b, max));
            assert_eq!(sa.to_bits(), sb.to_bits());
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
            assert_eq!(a[1], 0.0);
            let exact: f64 = x.iter().map(|&v| f64::from(v - max).exp()).sum();
            assert!((sa - exact).abs() < 1e-5 * exact);
        }
    }
}
