//! IQ3_XXS and IQ3_S: `quantize_row_iq3_xxs_impl` (grid of 256) and `quantize_row_iq3_s_impl`
//! (grid of 512, block size 32) of `ggml-quants.c`: groups of 4 magnitudes snap to a grid of
//! 4-wide points with levels {1, 3, .., 15}; the importance matrix is optional.

use super::blocks::QK_K;
use super::grid_search::*;
use super::grids::{self, Grid, Lookup};
use super::helpers::*;

pub(crate) const IQ3_XXS_BYTES: usize = 98; // f16 d; u8 qs[64]; u32 scales_and_signs[8]
pub(crate) const IQ3_S_BYTES: usize = 110; // f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]

const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;
const KMAXQ: i32 = 8;

/// Weights of one block: with an importance matrix `qw * sqrt(sigma2 + x^2)`, else `x^2`;
/// `waux` their square roots.
#[inline]
fn weights(qw: Option<&[f32]>, xb: &[f32], sigma2: f32, weight: &mut [f32], waux: &mut [f32]) {
    match qw {
        Some(qw) => {
            for i in 0..xb.len() {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..xb.len() {
                weight[i] = xb[i] * xb[i];
            }
        }
    }
    for i in 0..xb.len() {
        waux[i] = weight[i].sqrt();
    }
}

/// The scale search shared by both types for one block of 32 (8 groups of 4): `tries` steps
/// of 0.2 each side, then the groups off the grid (all of them with `refine_all`, as
/// IQ3_S does) re-snapped at the best scale. `on_grid_init` is the flags' start value
/// (upstream: true for IQ3_XXS, false for IQ3_S). Returns the scale; `l` gets the levels.
#[allow(clippy::too_many_arguments)]
fn search32(
    grid: &Grid<4>,
    xval: &[f32],
    weight: &[f32],
    waux: &[f32],
    max: f32,
    tries: i32,
    on_grid_init: bool,
    refine_all: bool,
    l: &mut [i8; 32],
) -> f32 {
    let mut laux = [0i8; 32];
    let mut is_on_grid = [on_grid_init; 8];
    let mut is_on_grid_aux = [true; 8];
    let mut best = 0.0f32;
    let mut scale = max / (2 * KMAXQ - 1) as f32;
    for is in -tries..=tries {
        let id = ((2 * KMAXQ - 1) as f32 + is as f32 * 0.2) / max;
        let this_scale = 1.0 / id;
        for k in 0..8 {
            let r = 4 * k..4 * k + 4;
            levels(&xval[r.clone()], id, KMAXQ, &mut laux[r.clone()]);
            let (_, on) = snap(
                grid,
                &xval[r.clone()],
                &waux[r.clone()],
                this_scale,
                &mut laux[r],
            );
            is_on_grid_aux[k] = on;
        }
        let (sumqx, sumq2) = sums(weight, xval, &laux);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            *l = laux;
            is_on_grid = is_on_grid_aux;
        }
    }
    if is_on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..8 {
            if is_on_grid[k] && !refine_all {
                continue;
            }
            let r = 4 * k..4 * k + 4;
            let mut lk = [0i8; 4];
            levels(&xval[r.clone()], id, KMAXQ, &mut lk);
            let gi = match grid.lookup(grid.pack(&lk)) {
                Lookup::OnGrid(i) => i,
                Lookup::Neighbours(n) => best_neighbour(
                    n,
                    grid,
                    &xval[r.clone()],
                    &waux[r.clone()],
                    scale,
                    &mut l[r.clone()],
                ),
            };
            let pg = &grid.points[gi];
            for i in 0..4 {
                l[4 * k + i] = (pg[i] - 1) / 2;
            }
        }
        let (sumqx, sumq2) = sums(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// `quantize_row_iq3_xxs_impl(256, ...)`.
pub(super) fn iq3_xxs(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    let grid = grids::iq3xxs();
    let mut scales = [0.0f32; QK_K / 32];
    let mut weight = [0.0f32; 32];
    let mut waux = [0.0f32; 32];
    let mut xval = [0.0f32; 32];
    let mut block_signs = [0u8; 4];
    let mut q3 = [0u8; QK_K / 4];
    let mut scales_and_signs = [0u32; QK_K / 32];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ3_XXS_BYTES))
        .enumerate()
    {
        put_f16(yb, 0, 0.0);
        q3.fill(0);
        scales_and_signs.fill(0);
        let mut max_scale = 0.0f32;
        let sigma2 = 2.0 * sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let qw = quant_weights.map(|q| &q[QK_K * ibl + 32 * ib..QK_K * ibl + 32 * ib + 32]);
            weights(qw, xb, sigma2, &mut weight, &mut waux);
            for k in 0..4 {
                let r = 8 * k..8 * k + 8;
                block_signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], true);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = fmax(max, v);
            }
            let mut l = [0i8; 32];
            if max < GROUP_MAX_EPS_IQ3_XXS {
                scales[ib] = 0.0;
                continue;
            }
            let mut scale = search32(grid, &xval, &weight, &waux, max, 15, true, false, &mut l);
            if scale < 0.0 {
                scale = -scale;
                for s in block_signs.iter_mut() {
                    *s = !*s & 127;
                }
            }
            for k in 0..8 {
                q3[8 * ib + k] = grid_index(grid, &l[4 * k..4 * k + 4]) as u8;
            }
            scales_and_signs[ib] = u32::from(block_signs[0])
                | (u32::from(block_signs[1]) << 7)
                | (u32::from(block_signs[2]) << 14)
                | (u32::from(block_signs[3]) << 21);
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            yb[2..].fill(0);
            continue;
        }
        let d = max_scale / 31.0;
        put_f16(yb, 0, d * 1.0125);
        let id = 1.0 / d;
        for ib in 0..QK_K / 32 {
            scales_and_signs[ib] |= (scale4(id, scales[ib]) as u32) << 28;
        }
        yb[2..2 + QK_K / 4].copy_from_slice(&q3);
        for (i, v) in scales_and_signs.iter().enumerate() {
            let at = 2 + QK_K / 4 + 4 * i;
            yb[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `quantize_iq3_s` (`quantize_row_iq3_s_impl` with blocks of 32).
pub(super) fn iq3_s(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    const BS: usize = 32;
    let grid = grids::iq3s();
    let mut scales = [0.0f32; QK_K / BS];
    let mut weight = [0.0f32; BS];
    let mut waux = [0.0f32; BS];
    let mut xval = [0.0f32; BS];
    let mut block_signs = [0u8; BS / 8];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ3_S_BYTES))
        .enumerate()
    {
        yb.fill(0);
        put_f16(yb, 0, 0.0);
        let (qs_at, qh_at, signs_at, scales_at) = (2, 66, 74, 106);
        let mut max_scale = 0.0f32;
        let sigma2 = 2.0 * sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let qw = quant_weights.map(|q| &q[QK_K * ibl + BS * ib..QK_K * ibl + BS * ib + BS]);
            weights(qw, xb, sigma2, &mut weight, &mut waux);
            for k in 0..BS / 8 {
                let r = 8 * k..8 * k + 8;
                block_signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], false);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = fmax(max, v);
            }
            let mut l = [0i8; 32];
            if max == 0.0 {
                scales[ib] = 0.0;
                continue;
            }
            let mut scale = search32(grid, &xval, &weight, &waux, max, 9, false, true, &mut l);
            if scale < 0.0 {
                scale = -scale;
                for s in block_signs.iter_mut() {
                    *s = !*s;
                }
            }
            for k in 0..BS / 4 {
                let gi = grid_index(grid, &l[4 * k..4 * k + 4]);
                let g = ib * (BS / 4) + k;
                yb[qs_at + g] = (gi & 255) as u8;
                yb[qh_at + g / 8] |= ((gi >> 8) << (g % 8)) as u8;
            }
            yb[signs_at + ib * (BS / 8)..signs_at + (ib + 1) * (BS / 8)]
                .copy_from_slice(&block_signs);
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 31.0;
        put_f16(yb, 0, d * 1.033);
        let id = 1.0 / d;
        for ib in (0..QK_K / BS).step_by(2) {
            let l1 = scale4(id, scales[ib]) as u8;
            let l2 = scale4(id, scales[ib + 1]) as u8;
            yb[scales_at + ib / 2] = l1 | (l2 << 4);
        }
    }
}
