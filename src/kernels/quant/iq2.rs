//! IQ2_XXS, IQ2_XS and IQ2_S: `quantize_row_iq2_xxs_impl`, `_iq2_xs_impl` and `_iq2_s_impl`
//! of `ggml-quants.c`. Groups of 8 magnitudes snap to a grid of 8-wide points with levels
//! {1, 3, 5}; signs are stored apart (XXS/XS: 7 bits per group, the 8th implied by an even
//! count of negatives). Every float operation is in upstream's order.

use super::blocks::QK_K;
use super::grid_search::*;
use super::grids::{self, Grid};
use super::helpers::*;

pub(crate) const IQ2_XXS_BYTES: usize = 66; // f16 d; u16 qs[32]
pub(crate) const IQ2_XS_BYTES: usize = 74; // f16 d; u16 qs[32]; u8 scales[8]
pub(crate) const IQ2_S_BYTES: usize = 82; // f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]

const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;
const KMAXQ: i32 = 3;

#[inline]
fn weights(qw: &[f32], xb: &[f32], sigma2: f32, weight: &mut [f32], waux: &mut [f32]) {
    for i in 0..xb.len() {
        weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
    }
    for i in 0..xb.len() {
        waux[i] = weight[i].sqrt();
    }
}

/// `quantize_row_iq2_xxs_impl` (an importance matrix is required).
pub(super) fn iq2_xxs(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    let qw_all = quant_weights.expect("IQ2_XXS requires an importance matrix");
    let grid = grids::iq2xxs();
    let mut scales = [0.0f32; QK_K / 32];
    let mut weight = [0.0f32; 32];
    let mut waux = [0.0f32; 32];
    let mut xval = [0.0f32; 32];
    let mut l = [0i8; 32];
    let mut laux = [0i8; 32];
    let mut block_signs = [0u8; 4];
    let mut q2 = [0u32; 2 * (QK_K / 32)];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ2_XXS_BYTES))
        .enumerate()
    {
        put_f16(yb, 0, 0.0);
        q2.fill(0);
        let mut max_scale = 0.0f32;
        let sigma2 = sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / 32 {
            let xb = &xbl[32 * ib..32 * ib + 32];
            let qw = &qw_all[QK_K * ibl + 32 * ib..QK_K * ibl + 32 * ib + 32];
            weights(qw, xb, sigma2, &mut weight, &mut waux);
            for k in 0..4 {
                let r = 8 * k..8 * k + 8;
                block_signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], true);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = fmax(max, v);
            }
            if max < GROUP_MAX_EPS {
                scales[ib] = 0.0;
                continue;
            }
            let mut lq = [0u8; 32];
            let mut scale = make_qp_quants(KMAXQ + 1, &xval, &mut lq, &weight);
            for i in 0..32 {
                l[i] = lq[i] as i8;
            }
            let eff_max = scale * KMAXQ as f32;
            if eff_max <= 0.0 {
                scales[ib] = 0.0;
                continue;
            }
            let mut best = 0.0f32;
            for is in -6..=6 {
                let id = ((2 * KMAXQ - 1) as f32 + is as f32 * 0.1) / eff_max;
                let this_scale = 1.0 / id;
                for k in 0..4 {
                    let r = 8 * k..8 * k + 8;
                    levels(&xval[r.clone()], id, KMAXQ, &mut laux[r.clone()]);
                    snap(
                        grid,
                        &xval[r.clone()],
                        &waux[r.clone()],
                        this_scale,
                        &mut laux[r],
                    );
                }
                let (sumqx, sumq2) = sums(&weight, &xval, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                }
            }
            if scale > 0.0 {
                let id = 1.0 / scale;
                for k in 0..4 {
                    let r = 8 * k..8 * k + 8;
                    levels(&xval[r.clone()], id, KMAXQ, &mut l[r.clone()]);
                    let (gi, _) = snap(grid, &xval[r.clone()], &waux[r.clone()], scale, &mut l[r]);
                    let pg = &grid.points[gi];
                    for i in 0..8 {
                        l[8 * k + i] = (pg[i] - 1) / 2;
                    }
                }
                let (sumqx, sumq2) = sums(&weight, &xval, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            if scale < 0.0 {
                scale = -scale;
                for s in block_signs.iter_mut() {
                    *s = !*s & 127;
                }
            }
            for k in 0..4 {
                let gi = grid_index(grid, &l[8 * k..8 * k + 8]);
                q2[2 * ib] |= (gi as u32) << (8 * k);
                q2[2 * ib + 1] |= u32::from(block_signs[k]) << (7 * k);
            }
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            yb[2..].fill(0);
            continue;
        }
        let d = max_scale / 31.0;
        put_f16(yb, 0, d);
        let id = 1.0 / d;
        for ib in 0..QK_K / 32 {
            q2[2 * ib + 1] |= (scale4(id, scales[ib]) as u32) << 28;
        }
        for (i, v) in q2.iter().enumerate() {
            yb[2 + 4 * i..6 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// The scale search of IQ2_XS and IQ2_S for one 16-value sub-block (19 tries), with the
/// refinement of the groups that fell off the grid. `l` gets the levels; returns the scale.
fn search16(
    grid: &Grid<8>,
    xval: &[f32],
    weight: &[f32],
    waux: &[f32],
    max: f32,
    l: &mut [i8; 16],
) -> f32 {
    let mut laux = [0i8; 16];
    let mut is_on_grid = [true; 2];
    let mut is_on_grid_aux = [true; 2];
    let mut best = 0.0f32;
    let mut scale = max / (2 * KMAXQ - 1) as f32;
    for is in -9..=9 {
        let id = ((2 * KMAXQ - 1) as f32 + is as f32 * 0.1) / max;
        let this_scale = 1.0 / id;
        for k in 0..2 {
            let r = 8 * k..8 * k + 8;
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
        for k in 0..2 {
            if is_on_grid[k] {
                continue;
            }
            let r = 8 * k..8 * k + 8;
            levels(&xval[r.clone()], id, KMAXQ, &mut l[r.clone()]);
            snap(grid, &xval[r.clone()], &waux[r.clone()], scale, &mut l[r]);
        }
        let (sumqx, sumq2) = sums(weight, xval, l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// `quantize_row_iq2_xs_impl` (an importance matrix is required).
pub(super) fn iq2_xs(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    let qw_all = quant_weights.expect("IQ2_XS requires an importance matrix");
    let grid = grids::iq2xs();
    let mut scales = [0.0f32; QK_K / 16];
    let mut weight = [0.0f32; 16];
    let mut waux = [0.0f32; 16];
    let mut xval = [0.0f32; 16];
    let mut block_signs = [0u8; 2];
    let mut q2 = [0u16; 2 * (QK_K / 16)];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ2_XS_BYTES))
        .enumerate()
    {
        put_f16(yb, 0, 0.0);
        q2.fill(0);
        yb[66..74].fill(0);
        let mut max_scale = 0.0f32;
        let sigma2 = sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / 16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            let qw = &qw_all[QK_K * ibl + 16 * ib..QK_K * ibl + 16 * ib + 16];
            weights(qw, xb, sigma2, &mut weight, &mut waux);
            for k in 0..2 {
                let r = 8 * k..8 * k + 8;
                block_signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], true);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = fmax(max, v);
            }
            let mut l = [0i8; 16];
            if max < GROUP_MAX_EPS {
                scales[ib] = 0.0;
                continue;
            }
            let mut scale = search16(grid, &xval, &weight, &waux, max, &mut l);
            if scale < 0.0 {
                scale = -scale;
                for s in block_signs.iter_mut() {
                    *s = !*s & 127;
                }
            }
            for k in 0..2 {
                let gi = grid_index(grid, &l[8 * k..8 * k + 8]);
                q2[2 * ib + k] = gi as u16 | (u16::from(block_signs[k]) << 9);
            }
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            yb[2..66].fill(0);
            continue;
        }
        let d = max_scale / 31.0;
        put_f16(yb, 0, d);
        let id = 1.0 / d;
        for ib in 0..QK_K / 16 {
            let s = scale4(id, scales[ib]) as u8;
            if ib % 2 == 0 {
                yb[66 + ib / 2] = s;
            } else {
                yb[66 + ib / 2] |= s << 4;
            }
        }
        for (i, v) in q2.iter().enumerate() {
            yb[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `quantize_row_iq2_s_impl` (the importance matrix is optional).
pub(super) fn iq2_s(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    let grid = grids::iq2s();
    let mut scales = [0.0f32; QK_K / 16];
    let mut weight = [0.0f32; 16];
    let mut waux = [0.0f32; 16];
    let mut xval = [0.0f32; 16];
    let mut block_signs = [0u8; 2];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ2_S_BYTES))
        .enumerate()
    {
        yb.fill(0);
        put_f16(yb, 0, 0.0);
        let mut max_scale = 0.0f32;
        let sigma2 = 2.0 * sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / 16 {
            let xb = &xbl[16 * ib..16 * ib + 16];
            match quant_weights {
                Some(q) => {
                    let qw = &q[QK_K * ibl + 16 * ib..QK_K * ibl + 16 * ib + 16];
                    weights(qw, xb, sigma2, &mut weight, &mut waux);
                }
                None => {
                    for i in 0..16 {
                        weight[i] = 0.25 * sigma2 + xb[i] * xb[i];
                    }
                    for i in 0..16 {
                        waux[i] = weight[i].sqrt();
                    }
                }
            }
            for k in 0..2 {
                let r = 8 * k..8 * k + 8;
                block_signs[k] = signs8(&xb[r.clone()], &weight[r.clone()], &mut xval[r], false);
            }
            let mut max = xval[0];
            for &v in &xval[1..] {
                max = fmax(max, v);
            }
            let mut l = [0i8; 16];
            if max < GROUP_MAX_EPS_IQ2_S {
                scales[ib] = 0.0;
                continue;
            }
            let mut scale = search16(grid, &xval, &weight, &waux, max, &mut l);
            if scale < 0.0 {
                scale = -scale;
                for s in block_signs.iter_mut() {
                    *s = !*s;
                }
            }
            for k in 0..2 {
                let gi = grid_index(grid, &l[8 * k..8 * k + 8]);
                let i8 = 2 * ib + k;
                yb[2 + i8] = (gi & 255) as u8;
                yb[66 + i8 / 4] |= ((gi >> 8) << (2 * (i8 % 4))) as u8;
                yb[2 + QK_K / 8 + i8] = block_signs[k];
            }
            scales[ib] = scale;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 31.0;
        put_f16(yb, 0, d * 0.9875);
        let id = 1.0 / d;
        for ib in 0..QK_K / 16 {
            let s = scale4(id, scales[ib]) as u8;
            if ib % 2 == 0 {
                yb[74 + ib / 2] = s;
            } else {
                yb[74 + ib / 2] |= s << 4;
            }
        }
    }
}
