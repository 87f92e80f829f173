//! ggml's MUL_MAT_ID on the CPU (a MoE layer's expert products) as one parallel job over all
//! routed experts: each activation row is converted once (not once per expert it is routed
//! to), and the pool's threads claim tasks of (expert, weight rows) from one counter, so a
//! layer of 64+ experts wakes the pool once, not once per expert, and a thread that finishes
//! one expert's rows moves on to the next expert's.
//!
//! Per expert: in fast mode, an expert of an r8 type (`fast_gemm::r8_type`: Q8_0, Q4_0,
//! Q5_0, IQ4_NL, Q4_1) with at least [`R8_MIN_COLS`] rows routed to it runs the r8 kernels
//! (`fast_gemm.rs`) over its rows, gathered once (a Q4_K expert the Q4_K group kernel, its
//! groups packed per task); an expert with
//! one routed row takes the matrix-vector dot (`matvec_dot_fn`), the kernel
//! `mul_mat` gives a one-row product in both modes, so exact mode stays bit-identical to the
//! expert-by-expert path; other experts (fast mode only) one dot per output. [`takes`] says
//! which products this path handles; the rest go through `mul_mat` expert by expert.

use super::blocks::{Q8_0_BYTES, Q8_1_BYTES, QK, QK_K};
use super::dispatch::{dot_fn, k_kernel, matvec_dot_fn, quantize_row, r8_kernel, r8_min_term_fn};
use super::fast_gemm::{
    has_min, nibble_offset, pack_group, pack_group_min, values_of, GroupColumns,
};
use super::mul_mat::{prefetch_ahead, Scratch};
use super::pool::{for_row_runs, SharedOut, ThreadPool};
use super::r8_layout::{activation_meta, R8_BLOCK_BYTES, R8_ROWS};
use super::r8_min::q8_1_as_q8_0;
use super::type_traits::{row_bytes, supports, vec_dot_type};
use crate::gguf::GgmlType;

/// Fewest rows routed to an expert for which the fast mode packs its weight into r8 groups
/// (packing a group costs about one column's products; below this, dots are as fast).
pub const R8_MIN_COLS: usize = 4;

/// The stacked expert weights of a MUL_MAT_ID: `n_exp` matrices of `n_rows` rows of `k`
/// elements of type `t`, expert `e` starting at byte `e * expert_bytes` of `bytes`, rows
/// `row_bytes(t, k)` apart.
#[derive(Clone, Copy, Debug)]
pub struct Experts<'a> {
    pub t: GgmlType,
    pub bytes: &'a [u8],
    pub n_rows: usize,
    pub k: usize,
    pub expert_bytes: usize,
}

/// Whether an r8 product takes a `t` weight of `n_rows` rows of `k` (fast mode only).
fn r8_shape(t: GgmlType, n_rows: usize, k: usize) -> bool {
    super::fast_gemm::r8_type(t) && n_rows % R8_ROWS == 0 && n_rows > 0 && k % QK == 0
}

/// Whether the fast K-quant group kernels (`fast_gemm::k_layout`, `r8_layout::KGroupFn`)
/// take a `t` weight of `n_rows` rows of `k` (fast mode only): they read the experts' plain
/// rows.
fn k_shape(t: GgmlType, n_rows: usize, k: usize) -> bool {
    super::fast_gemm::k_layout(t).is_some()
        && n_rows % R8_ROWS == 0
        && n_rows > 0
        && k % QK_K == 0
        && k > 0
}

/// Whether [`mul_mat_id`] handles this product (`routes[e]` the rows routed to expert `e`):
/// when no expert has more than one row (a decode step: every output one mat-vec dot, as the
/// expert-by-expert path computes it), or in fast mode for the r8 types (`fast_gemm::r8_type`)
/// and the K-quants (`fast_gemm::k_layout`).
pub fn takes(t: GgmlType, n_rows: usize, k: usize, routes: &[Vec<(usize, usize)>]) -> bool {
    supports(t)
        && (routes.iter().all(|r| r.len() <= 1)
            || (super::mode::fast() && (r8_shape(t, n_rows, k) || k_shape(t, n_rows, k))))
}

/// One task: weight rows `lo..hi` of expert `e`.
#[derive(Clone, Copy, Debug)]
struct Task {
    e: usize,
    lo: usize,
    hi: usize,
}

/// ggml's MUL_MAT_ID: for every expert `e` and every `(x_row, dst_row)` in `routes[e]`,
/// `dst[dst_row * n_rows + i] = s_e · (expert e row i · x row x_row)` for all `i < n_rows`,
/// where `x` holds f32 rows of `k` and `s_e` is `scales[e]` (1 without scales; upstream's
/// per-expert output scale, applied after the product). Rows of `dst` no route names are left
/// as they are. Panics on inconsistent sizes or a `dst_row` named twice.
pub fn mul_mat_id(
    w: &Experts<'_>,
    x: &[f32],
    routes: &[Vec<(usize, usize)>],
    scales: Option<&[f32]>,
    dst: &mut [f32],
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let Experts {
        t,
        bytes,
        n_rows,
        k,
        expert_bytes,
    } = *w;
    if n_rows == 0 || k == 0 || routes.iter().all(Vec::is_empty) {
        return;
    }
    let w_row = row_bytes(t, k);
    assert!(
        expert_bytes >= n_rows * w_row
            && bytes.len() >= (routes.len() - 1) * expert_bytes + n_rows * w_row,
        "{t} experts: {} bytes for {} experts of {n_rows} × {k}",
        bytes.len(),
        routes.len()
    );
    assert!(
        scales.is_none_or(|s| s.len() >= routes.len()),
        "expert scales"
    );
    let n_x = x.len() / k;
    let n_dst = dst.len() / n_rows;
    // every output row written once: tasks write disjoint (dst row, weight rows) pieces
    let mut seen = vec![false; n_dst];
    for &(xr, dr) in routes.iter().flatten() {
        assert!(xr < n_x, "activation row {xr} of {n_x}");
        assert!(
            dr < n_dst && !seen[dr],
            "output row {dr} out of {n_dst} or named twice"
        );
        seen[dr] = true;
    }
    let fast_r8 = super::mode::fast() && r8_shape(t, n_rows, k);
    let fast_k = super::mode::fast() && k_shape(t, n_rows, k);
    // experts whose rows run a batched kernel (r8, or the Q4_K group kernel), gathered
    let r8 = |e: usize| (fast_r8 || fast_k) && routes[e].len() >= R8_MIN_COLS;

    // the activation rows, converted once
    let vt = vec_dot_type(t);
    let x_row = row_bytes(vt, k);
    let Scratch {
        activations,
        id_gather,
        id_dx,
        id_sx,
        id_sm,
        ..
    } = scratch;
    if activations.len() < n_x * x_row {
        activations.resize(n_x * x_row, 0);
    }
    for_row_runs(
        pool,
        &mut activations[..n_x * x_row],
        x_row,
        &|first, out, _| {
            for (i, out) in out.chunks_exact_mut(x_row.max(1)).enumerate() {
                let r = first + i;
                quantize_row(vt, &x[r * k..(r + 1) * k], out);
            }
        },
    );
    let xq = &activations[..n_x * x_row];

    // the r8 experts' rows gathered (Q8_0-shaped, one expert's after another) with their block
    // scales and sums (for the min types: no nibble offset, `s_x` of the Q8_1 rows);
    // gathered[e] = the first gathered row of expert e
    let nb = k / QK;
    let min = has_min(t);
    let g_row = nb * Q8_0_BYTES;
    let mut gathered = vec![0usize; routes.len()];
    let mut n_gathered = 0;
    for (e, r) in routes.iter().enumerate() {
        if r8(e) {
            gathered[e] = n_gathered;
            n_gathered += r.len();
        }
    }
    let nbk = k / QK_K;
    if n_gathered > 0 && fast_k {
        // Q8_K rows (their `bsums` inside)
        id_gather.resize(n_gathered * x_row, 0);
        for (e, r) in routes.iter().enumerate().filter(|&(e, _)| r8(e)) {
            for (c, &(xr, _)) in r.iter().enumerate() {
                let j = gathered[e] + c;
                let row = &xq[xr * x_row..(xr + 1) * x_row];
                id_gather[j * x_row..(j + 1) * x_row].copy_from_slice(row);
            }
        }
    } else if n_gathered > 0 {
        debug_assert_eq!(x_row, if min { nb * Q8_1_BYTES } else { g_row });
        id_gather.resize(n_gathered * g_row, 0);
        id_dx.resize(n_gathered * nb, 0.0);
        id_sx.resize(n_gathered * nb, 0);
        id_sm.resize(if min { n_gathered * nb } else { 0 }, 0.0);
        for (e, r) in routes.iter().enumerate().filter(|&(e, _)| r8(e)) {
            for (c, &(xr, _)) in r.iter().enumerate() {
                let j = gathered[e] + c;
                let row = &xq[xr * x_row..(xr + 1) * x_row];
                let (b0, b1) = (j * nb, (j + 1) * nb);
                if min {
                    q8_1_as_q8_0(
                        row,
                        nb,
                        &mut id_gather[j * g_row..(j + 1) * g_row],
                        &mut id_dx[b0..b1],
                        &mut id_sm[b0..b1],
                    );
                    id_sx[b0..b1].fill(0);
                } else {
                    id_gather[j * g_row..(j + 1) * g_row].copy_from_slice(row);
                    activation_meta(
                        row,
                        nb,
                        &mut id_dx[b0..b1],
                        &mut id_sx[b0..b1],
                        nibble_offset(t),
                    );
                }
            }
        }
    }
    let (gath, dx, sx, sm) = (&id_gather[..], &id_dx[..], &id_sx[..], &id_sm[..]);

    // tasks of about equal work (weight rows × routed rows), a few per thread
    let work: usize = routes.iter().map(|r| r.len() * n_rows).sum();
    let target = work.div_ceil(pool.n_threads() * 4).max(1);
    let mut tasks = Vec::new();
    for (e, r) in routes.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
        let step = target.div_ceil(r.len());
        let step = if r8(e) {
            step.next_multiple_of(R8_ROWS)
        } else {
            step.max(16)
        };
        for lo in (0..n_rows).step_by(step) {
            tasks.push(Task {
                e,
                lo,
                hi: (lo + step).min(n_rows),
            });
        }
    }

    let kernel = r8_kernel();
    let min_term = r8_min_term_fn();
    let k_kernel = super::fast_gemm::k_layout(t)
        .filter(|_| fast_k)
        .map(k_kernel);
    let values = fast_r8.then(|| values_of(t));
    let (matvec, dot) = (matvec_dot_fn(t), dot_fn(t));
    let out = SharedOut::new(dst);
    let run = |task: usize, _thread: usize| {
        let Task { e, lo, hi } = tasks[task];
        let route = &routes[e];
        let s = scales.map(|s| s[e]);
        let w_e = &bytes[e * expert_bytes..];
        if let Some(k_kernel) = k_kernel.filter(|_| r8(e)) {
            let xg = &gath[gathered[e] * x_row..];
            let mut vals = vec![[0f32; R8_ROWS]; route.len()];
            for g in lo / R8_ROWS..hi / R8_ROWS {
                let wg = &w_e[g * R8_ROWS * w_row..];
                k_kernel(nbk, wg, w_row, xg, x_row, route.len(), &mut vals);
                for (v, &(_, dr)) in vals.iter().zip(route) {
                    // SAFETY: as below: output row dr belongs to expert e alone and rows
                    // 8g..8g + 8 of it to this task alone; in bounds; `dst` stays mutably
                    // borrowed until parallel_for returns.
                    let o = unsafe { out.slice(dr * n_rows + g * R8_ROWS, R8_ROWS) };
                    match s {
                        Some(s) => o.iter_mut().zip(v).for_each(|(o, v)| *o = v * s),
                        None => o.copy_from_slice(v),
                    }
                }
            }
            return;
        }
        if r8(e) {
            let cols = GroupColumns {
                kernel,
                values: values.expect("r8 experts only in fast mode"),
                nb,
                x: &gath[gathered[e] * g_row..],
                x_row_bytes: g_row,
                dx: &dx[gathered[e] * nb..],
                sx: &sx[gathered[e] * nb..],
            };
            let mut packed = vec![0u8; nb * R8_BLOCK_BYTES];
            let mut mins = vec![0f32; if min { nb * R8_ROWS } else { 0 }];
            let mut terms = vec![[0f32; R8_ROWS]; if min { route.len() } else { 0 }];
            for g in lo / R8_ROWS..hi / R8_ROWS {
                if min {
                    pack_group_min(t, w_e, w_row, g, nb, &mut packed, &mut mins);
                    // the expert's gathered columns are consecutive: their min terms at once
                    let j = gathered[e] * nb;
                    min_term(nb, &mins, &sm[j..], route.len(), &mut terms);
                } else {
                    pack_group(t, w_e, w_row, g, nb, &mut packed);
                }
                cols.run(&packed, 0..route.len(), |c, v| {
                    let at = route[c].1 * n_rows + g * R8_ROWS;
                    // SAFETY: output row route[c].1 belongs to expert e alone (no output row
                    // is named twice, asserted above) and rows 8g..8g + 8 of it to this task
                    // alone; in bounds (route rows < n_dst); `dst` stays mutably borrowed
                    // until parallel_for returns.
                    let o = unsafe { out.slice(at, R8_ROWS) };
                    let mut v = *v;
                    if min {
                        v.iter_mut().zip(terms[c]).for_each(|(v, t)| *v += t);
                    }
                    match s {
                        Some(s) => o.iter_mut().zip(v).for_each(|(o, v)| *o = v * s),
                        None => o.copy_from_slice(&v),
                    }
                });
            }
            return;
        }
        let f = if route.len() == 1 { matvec } else { dot };
        for i in lo..hi {
            let at = e * expert_bytes + i * w_row;
            if route.len() == 1 {
                // the weights stream through once: fetch ahead as a mat-vec product does
                prefetch_ahead(bytes, at, w_row, w_row);
            }
            let wr = &w_e[i * w_row..(i + 1) * w_row];
            for &(xr, dr) in route {
                let v = f(k, wr, &xq[xr * x_row..(xr + 1) * x_row]);
                // SAFETY: as above: output (dr, i) is this task's alone and in bounds.
                unsafe { *out.ptr().add(dr * n_rows + i) = s.map_or(v, |s| v * s) };
            }
        }
    };
    pool.parallel_for(tasks.len(), &run);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::mul_mat::mul_mat;

    use crate::kernels::cpu::test_rng::xorshift_f32 as xorshift;

    /// `n` rows of `k` random elements of `t`: random quant bytes, every scale a small f16.
    fn random_weight(t: GgmlType, n: usize, k: usize, next: &mut impl FnMut() -> f32) -> Vec<u8> {
        let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
        let mut w: Vec<u8> = (0..n * row_bytes(t, k))
            .map(|_| (next() * 128.0) as i8 as u8)
            .collect();
        // (block bytes, offsets of its f16 scales)
        let (block, scales): (usize, &[usize]) = match t {
            GgmlType::Q8_0 => (34, &[0]),
            GgmlType::Q4_0 | GgmlType::IQ4_NL => (18, &[0]),
            GgmlType::Q5_0 => (22, &[0]),
            GgmlType::Q4_1 => (20, &[0, 2]),
            GgmlType::Q5_1 => (24, &[0, 2]),
            GgmlType::Q4_K => (144, &[0, 2]),
            GgmlType::F16 => (2, &[0]),
            _ => unreachable!("{t}"),
        };
        for b in w.chunks_exact_mut(block) {
            for &o in scales {
                let v = if t == GgmlType::F16 {
                    next()
                } else {
                    0.01 + 0.01 * next().abs()
                };
                b[o..o + 2].copy_from_slice(&f16(v));
            }
        }
        w
    }

    /// Every expert's outputs equal `mul_mat` of that expert alone over its gathered rows
    /// (bit for bit for one-row experts, where both take the mat-vec dot; within float-order
    /// tolerance for the others, whose kernels may differ), scaled per expert, for
    /// Q8_0, Q4_0, Q4_K and F16 experts, broadcast and per-slot activations, 1 and 3 threads;
    /// untouched output rows keep their values.
    #[test]
    fn experts_equal_their_products_one_by_one() {
        let mut next = xorshift(0x1234_5678_9abc_def1);
        let (n_exp, n_rows, k) = (6, 24, 256);
        for t in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::IQ4_NL,
            GgmlType::Q5_0,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
            GgmlType::Q4_K,
            GgmlType::F16,
        ] {
            let w_row = row_bytes(t, k);
            let wq = random_weight(t, n_exp * n_rows, k, &mut next);
            let w = Experts {
                t,
                bytes: &wq,
                n_rows,
                k,
                expert_bytes: n_rows * w_row,
            };
            // 9 activation rows; expert 0 gets 7 rows, 1 one, 2 none, 3 four, 4 two, 5 one
            let n_x = 9;
            let x: Vec<f32> = (0..n_x * k).map(|_| next()).collect();
            let counts = [7usize, 1, 0, 4, 2, 1];
            let mut routes = vec![Vec::new(); n_exp];
            let mut d = 0;
            for (e, &c) in counts.iter().enumerate() {
                for j in 0..c {
                    routes[e].push(((e * 5 + j * 2) % n_x, d));
                    d += 1;
                }
            }
            let n_dst = d + 1; // the last row is named by no route
            let scales: Vec<f32> = (0..n_exp).map(|e| 0.5 + e as f32 * 0.25).collect();
            for sc in [None, Some(&scales[..])] {
                let mut want = vec![7.0f32; n_dst * n_rows];
                let mut scratch = Scratch::new();
                let pool1 = ThreadPool::new(1);
                for (e, r) in routes.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
                    let xs: Vec<f32> = r
                        .iter()
                        .flat_map(|&(xr, _)| x[xr * k..(xr + 1) * k].to_vec())
                        .collect();
                    let mut o = vec![0f32; r.len() * n_rows];
                    let we = &wq[e * n_rows * w_row..(e + 1) * n_rows * w_row];
                    mul_mat(t, we, n_rows, k, &xs, r.len(), &mut o, &pool1, &mut scratch);
                    for (c, &(_, dr)) in r.iter().enumerate() {
                        for i in 0..n_rows {
                            let v = o[c * n_rows + i];
                            want[dr * n_rows + i] = sc.map_or(v, |s| v * s[e]);
                        }
                    }
                }
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    let mut got = vec![7.0f32; n_dst * n_rows];
                    mul_mat_id(&w, &x, &routes, sc, &mut got, &pool, &mut scratch);
                    for (e, r) in routes.iter().enumerate() {
                        // bit for bit unless fast mode runs r8 here and not in mul_mat (or
                        // the reverse: mul_mat takes r8 from 8 rows, tiles below)
                        // (exact mode takes this path only when every expert has one row)
                        let exact = r.len() <= 1;
                        for &(_, dr) in r {
                            for i in 0..n_rows {
                                let (g, wv) = (got[dr * n_rows + i], want[dr * n_rows + i]);
                                if exact {
                                    assert_eq!(g.to_bits(), wv.to_bits(), "{t} e{e} row {dr}/{i}");
                                } else {
                                    assert!(
                                        (g - wv).abs() <= 1e-4 * (1.0 + wv.abs()),
                                        "{t} e{e} row {dr}/{i}: {g} vs {wv}"
                                    );
                                }
                            }
                        }
                    }
                    assert!(
                        got[d * n_rows..].iter().all(|&v| v == 7.0),
                        "{t}: untouched row"
                    );
                }
            }
            // a decode step (one row per expert) is always taken; a batch only in fast mode
            // for the r8 types
            let single: Vec<Vec<(usize, usize)>> = (0..n_exp)
                .map(|e| if e % 2 == 0 { vec![(0, e / 2)] } else { vec![] })
                .collect();
            assert!(takes(t, n_rows, k, &single));
            assert_eq!(
                takes(t, n_rows, k, &routes),
                super::super::mode::fast() && (r8_shape(t, n_rows, k) || k_shape(t, n_rows, k))
            );
        }
    }

    /// An output row named twice is refused before anything runs.
    #[test]
    #[should_panic(expected = "named twice")]
    fn a_doubly_named_output_row_panics() {
        let (n_rows, k) = (8, 32);
        let wq = vec![0u8; 2 * n_rows * row_bytes(GgmlType::Q8_0, k)];
        let w = Experts {
            t: GgmlType::Q8_0,
            bytes: &wq,
            n_rows,
            k,
            expert_bytes: n_rows * row_bytes(GgmlType::Q8_0, k),
        };
        let x = vec![0.5f32; 2 * k];
        let routes = vec![vec![(0, 0)], vec![(1, 0)]];
        let mut dst = vec![0f32; 2 * n_rows];
        mul_mat_id(
            &w,
            &x,
            &routes,
            None,
            &mut dst,
            &ThreadPool::new(1),
            &mut Scratch::new(),
        );
    }
}
