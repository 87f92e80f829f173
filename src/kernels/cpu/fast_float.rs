//! The fast mode's batched products of float weights (F16, BF16: prompt processing): a packed
//! panel GEMM in f32. Each task converts [`PANEL_ROWS`] weight rows × [`PANEL_K`] elements at a
//! time into a small f32 panel (element-major: one element of the 16 rows in two vectors),
//! which stays in L1 while a register tile of [`PANEL_COLS`] activation columns × 16 rows
//! sweeps it: per element two panel loads, one broadcast of each column's activation and two
//! FMAs per column (12 accumulators). The activations are read in f32 as the graph hands them
//! over (upstream's tinyBLAS rounds them to F16 first and converts both operands on every
//! step), and each weight element is converted once per column block instead of once per
//! output tile.
//!
//! Every output is one f32 FMA chain over `k` in order (`acc = fma(w, x, acc)`), whatever the
//! thread count or tiling: the scalar reference [`panel_kernel`] and the AVX2 kernel give the
//! same bits. Results differ from the exact mode's by the activations' F16 rounding and the
//! summation order (KL ≤ 1e-4 on the real models, `scripts/test-engine.sh`).

use super::dispatch::float_panel_fns;
use super::panel_layout::*;
use super::pool::{SharedOut, ThreadPool};
use crate::gguf::GgmlType;

/// Whether F16 products take the panel product: not on the host measured. On AMD EPYC
/// (Zen 3, AVX2, 2026-11-29, 1 thread, CPU time, SmolLM2's shapes × 128 columns) it was
/// 1.0–1.2× the time of the exact mode's tinyBLAS 4 × 3 F16 tile, which already runs near the
/// two FMA pipes' peak (its conversions go to other pipes): nothing to gain there, while BF16
/// (whose exact tile converts by shifts) gains 1.7×.
const F16_FAST: bool = false;

/// The weight types the panel product takes: BF16 (and F16 when [`F16_FAST`]).
pub fn float_type(t: GgmlType) -> bool {
    t == GgmlType::BF16 || (F16_FAST && t == GgmlType::F16)
}

/// Whether the fast mode takes a product of a `t` weight of `n_rows` rows with `m` activation
/// columns: a [`float_type`] with at least [`FLOAT_MIN_COLS`] columns, in fast mode, when
/// this CPU has the SIMD kernels (the scalar reference is for tests).
pub fn takes(t: GgmlType, n_rows: usize, m: usize) -> bool {
    float_type(t)
        && n_rows > 0
        && m >= FLOAT_MIN_COLS
        && super::mode::fast()
        && float_panel_fns(t).is_some()
}

/// `dst[j * dst_stride + dst_offset + i] = w row i · x row j` for the `n_rows` rows of the
/// `t` weight `w` (`row_stride` bytes apart, `k` elements) and the `m` f32 rows of `x` (`k`
/// apart), with the SIMD panel kernels.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_float_fast(
    t: GgmlType,
    w: &[u8],
    row_stride: usize,
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_offset: usize,
    pool: &ThreadPool,
) {
    let (pack, kernel) = float_panel_fns(t).unwrap_or_else(|| panic!("no panel kernel for {t}"));
    mul_mat_panels(
        (pack, kernel),
        w,
        row_stride,
        n_rows,
        k,
        x,
        m,
        dst,
        dst_stride,
        dst_offset,
        pool,
    );
}

/// [`mul_mat_float_fast`] with the given packing and kernel (the tests run the references).
#[allow(clippy::too_many_arguments)]
pub(super) fn mul_mat_panels(
    (pack, kernel): (PanelPackFn, PanelKernelFn),
    w: &[u8],
    row_stride: usize,
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_offset: usize,
    pool: &ThreadPool,
) {
    if m == 0 || n_rows == 0 {
        return;
    }
    assert!(
        row_stride >= 2 * k && w.len() >= (n_rows - 1) * row_stride + 2 * k,
        "float weight: {} bytes for {n_rows} rows of {k}",
        w.len()
    );
    assert!(
        x.len() >= m * k,
        "activations: {} for {m} rows of {k}",
        x.len()
    );
    assert!(
        m == 1 || dst_offset + n_rows <= dst_stride,
        "dst rows overlap"
    );
    let need = (m - 1) * dst_stride + dst_offset + n_rows;
    assert!(dst.len() >= need, "dst: {} values, needs {need}", dst.len());
    let panels = n_rows.div_ceil(PANEL_ROWS);
    let (nchunk, per) = pool.even_tasks(panels);
    // the missing rows of a last, partial panel read zeros (their outputs are not stored)
    let zero = vec![0u8; if n_rows % PANEL_ROWS == 0 { 0 } else { 2 * k }];
    let out = SharedOut::new(dst);
    let run = |task: usize, _thread: usize| {
        let mut panel = vec![0f32; PANEL_K * PANEL_ROWS];
        let mut acc: PanelOut = [[0f32; PANEL_ROWS]; PANEL_COLS];
        let (p0, p1) = (task * per, ((task + 1) * per).min(panels));
        for cb in (0..m).step_by(PANEL_COL_BLOCK) {
            let cb_end = (cb + PANEL_COL_BLOCK).min(m);
            for k0 in (0..k).step_by(PANEL_K) {
                let kc = PANEL_K.min(k - k0);
                for p in p0..p1 {
                    let r0 = p * PANEL_ROWS;
                    let valid = PANEL_ROWS.min(n_rows - r0);
                    let rows: [&[u8]; PANEL_ROWS] = std::array::from_fn(|r| {
                        if r < valid {
                            &w[(r0 + r) * row_stride..]
                        } else {
                            &zero[..]
                        }
                    });
                    pack(rows, k0, kc, &mut panel);
                    for j in (cb..cb_end).step_by(PANEL_COLS) {
                        let cols = PANEL_COLS.min(cb_end - j);
                        for (c, a) in acc.iter_mut().enumerate().take(cols) {
                            if k0 == 0 {
                                *a = [0.0; PANEL_ROWS];
                            } else {
                                let at = (j + c) * dst_stride + dst_offset + r0;
                                // SAFETY: panel p (rows r0..r0 + valid) belongs to this task
                                // alone (panels are split among the tasks, each covers every
                                // column), so these outputs are read and written by this task
                                // only; in bounds as asserted above; `dst` stays mutably
                                // borrowed until parallel_for returns.
                                let o = unsafe { out.slice(at, valid) };
                                if valid == PANEL_ROWS {
                                    // fixed-size copies: vector moves, not memmove calls
                                    a.copy_from_slice(o);
                                } else {
                                    a[..valid].copy_from_slice(o);
                                }
                            }
                        }
                        kernel(kc, &panel, &x[j * k + k0..], k, cols, &mut acc);
                        for (c, a) in acc.iter().enumerate().take(cols) {
                            let at = (j + c) * dst_stride + dst_offset + r0;
                            // SAFETY: as above: this task's outputs alone, in bounds.
                            let o = unsafe { out.slice(at, valid) };
                            if valid == PANEL_ROWS {
                                o.copy_from_slice(a);
                            } else {
                                o.copy_from_slice(&a[..valid]);
                            }
                        }
                    }
                }
            }
        }
    };
    pool.parallel_for(nchunk, &run);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kernels::cpu::test_rng::xorshift_f32 as xorshift;

    /// The panel product with the SIMD kernels equals the scalar references bit for bit (one
    /// FMA chain per output, in order), and both agree with an f64 dot of the same values,
    /// for F16 and BF16 weights, shapes that leave a partial panel, a partial column tile,
    /// several column blocks and a partial `k` chunk, at 1 and 3 threads, into a strided
    /// destination.
    #[test]
    fn panel_products_equal_the_references() {
        let mut next = xorshift(0x0123_4567_89ab_cdef);
        for (n_rows, k, m) in [(40, 300, 11), (16, 8, 8), (35, 520, 101), (3, 17, 9)] {
            let x: Vec<f32> = (0..m * k).map(|_| next()).collect();
            for t in [GgmlType::F16, GgmlType::BF16] {
                let wf: Vec<f32> = (0..n_rows * k).map(|_| next()).collect();
                let w: Vec<u8> = wf
                    .iter()
                    .flat_map(|&v| match t {
                        GgmlType::F16 => half::f16::from_f32(v).to_le_bytes(),
                        _ => half::bf16::from_f32(v).to_le_bytes(),
                    })
                    .collect();
                let (dst_stride, dst_offset) = (n_rows + 5, 3);
                let len = m * dst_stride;
                let scalar_pack: PanelPackFn = match t {
                    GgmlType::F16 => pack_panel_f16,
                    _ => pack_panel_bf16,
                };
                let mut want = vec![f32::NAN; len];
                let pool1 = ThreadPool::new(1);
                mul_mat_panels(
                    (scalar_pack, panel_kernel),
                    &w,
                    2 * k,
                    n_rows,
                    k,
                    &x,
                    m,
                    &mut want,
                    dst_stride,
                    dst_offset,
                    &pool1,
                );
                for j in 0..m {
                    for i in 0..n_rows {
                        let e: f64 = (0..k)
                            .map(|kk| {
                                let wv = match t {
                                    GgmlType::F16 => half::f16::from_f32(wf[i * k + kk]).to_f32(),
                                    _ => half::bf16::from_f32(wf[i * k + kk]).to_f32(),
                                };
                                f64::from(wv) * f64::from(x[j * k + kk])
                            })
                            .sum();
                        let g = want[j * dst_stride + dst_offset + i];
                        assert!(
                            (f64::from(g) - e).abs() < 1e-4 * (1.0 + e.abs()),
                            "{t} {g} vs {e}"
                        );
                    }
                }
                let Some(fns) = float_panel_fns(t) else {
                    continue;
                };
                for threads in [1, 3] {
                    let pool = ThreadPool::new(threads);
                    let mut got = vec![f32::NAN; len];
                    mul_mat_panels(
                        fns,
                        &w,
                        2 * k,
                        n_rows,
                        k,
                        &x,
                        m,
                        &mut got,
                        dst_stride,
                        dst_offset,
                        &pool,
                    );
                    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                            "{t} {n_rows}×{k}·{m}, {threads} threads: output {i}: {g} vs {e}"
                        );
                    }
                }
            }
        }
    }
}
