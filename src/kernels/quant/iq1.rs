//! IQ1_S and IQ1_M: `quantize_row_iq1_s_impl` / `quantize_row_iq1_m_impl` of `ggml-quants.c`.
//! Values take 3 levels (-1, 0, +1, shifted by ±delta per block); the best split of each
//! block's sorted values into the 3 levels is searched exhaustively, then each group of 8
//! snaps to the 2048-point grid. IQ1_S requires an importance matrix, IQ1_M does not.

use super::blocks::QK_K;
use super::grid_search::{fmax, sum_sq};
use super::grids::{self, Grid, Lookup};
use super::helpers::*;

pub(crate) const IQ1_S_BYTES: usize = 50; // f16 d; u8 qs[32]; u16 qh[8]
pub(crate) const IQ1_M_BYTES: usize = 56; // u8 qs[32]; u8 qh[16]; u16 scales[4]

const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;
const IQ1S_DELTA: f32 = 0.125;
const IQ1M_DELTA: f32 = 0.125;
const NGRID_IQ1S: usize = 2048;

/// Indices of `xb` ordered by value, ties in index order: glibc's `qsort` on these 8-byte
/// (value, index) pairs is its stable merge sort, with a comparator that says "equal" for
/// equal values (and for NaN). Insertion sort gives the same order and cannot panic.
fn sorted_indices(xb: &[f32], idx: &mut [usize]) {
    for (j, v) in idx.iter_mut().enumerate() {
        *v = j;
    }
    for i in 1..idx.len() {
        let cur = idx[i];
        let mut j = i;
        while j > 0 && xb[cur] < xb[idx[j - 1]] {
            idx[j] = idx[j - 1];
            j -= 1;
        }
        idx[j] = cur;
    }
}

/// `iq1_find_best_neighbour2`: the neighbour with the least weighted squared error at
/// `scale` with level values `xg`; writes its levels to `l`.
fn best_neighbour2(
    neighbours: &[u16],
    grid: &Grid<8>,
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    xg: &[f32; 3],
    l: &mut [i8],
) -> usize {
    let mut best_score = f32::MAX;
    let mut index: Option<usize> = None;
    for &j in neighbours {
        let pg = &grid.points[usize::from(j)];
        let mut d2 = 0.0f32;
        for i in 0..8 {
            let q = xg[((pg[i] - 1) / 2) as usize];
            let w = weight[i];
            let diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if d2 < best_score {
            best_score = d2;
            index = Some(usize::from(j));
        }
    }
    let index = index.unwrap_or_else(|| {
        // Upstream then tries the whole grid, comparing against `xval[i]` with the grid
        // index `i` (reading past the group); only NaN or infinite errors get here, where
        // every score fails `< FLT_MAX` again. The first neighbour keeps the output defined.
        let _ = NGRID_IQ1S;
        usize::from(neighbours[0])
    });
    let pg = &grid.points[index];
    for i in 0..8 {
        l[i] = (pg[i] - 1) / 2;
    }
    index
}

/// Grid index of the 8 levels at `l` (snapped to the best neighbour when off the grid), and
/// whether they were on it.
fn snap(
    grid: &Grid<8>,
    xb: &[f32],
    weight: &[f32],
    scale: f32,
    xx: &[f32; 3],
    l: &mut [i8],
) -> (usize, bool) {
    match grid.lookup(grid.pack(l)) {
        Lookup::OnGrid(i) => (i, true),
        Lookup::Neighbours(n) => (best_neighbour2(n, grid, xb, weight, scale, xx, l), false),
    }
}

/// `quantize_row_iq1_s_impl` (an importance matrix is required).
pub(super) fn iq1_s(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    const BS: usize = 32;
    let qw_all = quant_weights.expect("IQ1_S requires an importance matrix");
    let grid = grids::iq1s();
    let x_p = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];
    let x_m = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];
    let mut scales = [0.0f32; QK_K / BS];
    let mut shifts = [0i8; QK_K / BS];
    let mut weight = [0.0f32; BS];
    let mut sumx = [0.0f32; BS + 1];
    let mut sumw = [0.0f32; BS + 1];
    let mut idx = [0usize; BS];
    let mut l = [0i8; BS];
    let mut index = [0usize; BS / 8];
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ1_S_BYTES))
        .enumerate()
    {
        yb.fill(0);
        put_f16(yb, 0, 0.0);
        let mut max_scale = 0.0f32;
        let sigma2 = 2.0 * sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let qw = &qw_all[QK_K * ibl + BS * ib..QK_K * ibl + BS * ib + BS];
            for i in 0..BS {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
            let mut max = xb[0].abs();
            for &v in &xb[1..] {
                max = fmax(max, v.abs());
            }
            if max < GROUP_MAX_EPS_IQ1_S {
                scales[ib] = 0.0;
                shifts[ib] = 1;
                continue;
            }
            sorted_indices(xb, &mut idx);
            sumx[0] = 0.0;
            sumw[0] = 0.0;
            for j in 0..BS {
                let i = idx[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let mut best_score = -f32::MAX;
            let mut scale = max;
            let (mut besti1, mut besti2, mut best_shift) = (-1i32, -1i32, 0i8);
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    for (xs, shift) in [(&x_p, 1i8), (&x_m, -1i8)] {
                        let sumqx = (sumx[i1] - sumx[0]) * xs[0]
                            + (sumx[i2] - sumx[i1]) * xs[1]
                            + (sumx[BS] - sumx[i2]) * xs[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0]
                            + (sumw[i2] - sumw[i1]) * xs[1] * xs[1]
                            + (sumw[BS] - sumw[i2]) * xs[2] * xs[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            besti1 = i1 as i32;
                            besti2 = i2 as i32;
                            best_shift = shift;
                        }
                    }
                }
            }
            if besti1 < 0 || besti2 < 0 || best_shift == 0 {
                scales[ib] = 0.0;
                shifts[ib] = 1;
                continue;
            }
            let (b1, b2) = (besti1 as usize, besti2 as usize);
            for j in 0..BS {
                l[idx[j]] = if j < b1 {
                    0
                } else if j < b2 {
                    1
                } else {
                    2
                };
            }
            if scale < 0.0 {
                for v in l.iter_mut() {
                    *v = 2 - *v;
                }
                scale = -scale;
                best_shift = -best_shift;
            }
            let xx = if best_shift == 1 { &x_p } else { &x_m };
            let mut all_on_grid = true;
            for k in 0..BS / 8 {
                let r = 8 * k..8 * k + 8;
                let (gi, on) = snap(
                    grid,
                    &xb[r.clone()],
                    &weight[r.clone()],
                    scale,
                    xx,
                    &mut l[r],
                );
                all_on_grid &= on;
                index[k] = gi;
            }
            if !all_on_grid {
                let mut sumqx = 0.0f32;
                let mut sumq2 = 0.0f32;
                for k in 0..BS / 8 {
                    let pg = &grid.points[index[k]];
                    for j in 0..8 {
                        let w = weight[8 * k + j];
                        let q = xx[((pg[j] - 1) / 2) as usize];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if sumqx > 0.0 && sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            let mut h = 0u16;
            for k in 0..BS / 8 {
                yb[2 + (BS / 8) * ib + k] = (index[k] & 255) as u8;
                h |= ((index[k] >> 8) << (3 * k)) as u16;
            }
            yb[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&h.to_le_bytes());
            scales[ib] = scale;
            shifts[ib] = best_shift;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 15.0;
        put_f16(yb, 0, d * 1.125);
        let id = 1.0 / d;
        for ib in 0..QK_K / BS {
            let mut s = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            if shifts[ib] == -1 {
                s |= 8;
            }
            let at = 34 + 2 * ib;
            let h = u16::from_le_bytes([yb[at], yb[at + 1]]) | ((s as u16) << 12);
            yb[at..at + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
}

/// `quantize_row_iq1_m_impl` (the importance matrix is optional).
pub(super) fn iq1_m(x: &[f32], y: &mut [u8], quant_weights: Option<&[f32]>) {
    const BS: usize = 16;
    let grid = grids::iq1s();
    let x_p = [-1.0 + IQ1M_DELTA, IQ1M_DELTA, 1.0 + IQ1M_DELTA];
    let x_m = [-1.0 - IQ1M_DELTA, -IQ1M_DELTA, 1.0 - IQ1M_DELTA];
    let masks: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
    let mut scales = [0.0f32; QK_K / BS];
    let mut shifts = [0i8; QK_K / BS];
    let mut weight = [0.0f32; BS];
    let mut idx = [0usize; BS];
    let mut l = [0i8; BS];
    let mut index = [0usize; BS / 8];
    // The level values of group k (0 or 1) of a block with sign pattern `best_k`.
    let xx_of = |best_k: i32, k: usize| {
        let plus = if k == 0 { best_k < 2 } else { best_k % 2 == 0 };
        if plus {
            x_p
        } else {
            x_m
        }
    };
    let block_weights = |qw: Option<&[f32]>, xb: &[f32], sigma2: f32, weight: &mut [f32]| match qw {
        Some(qw) => {
            for i in 0..BS {
                weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
            }
        }
        None => {
            for i in 0..BS {
                weight[i] = xb[i] * xb[i];
            }
        }
    };
    for (ibl, (xbl, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ1_M_BYTES))
        .enumerate()
    {
        yb.fill(0);
        let (qs_at, qh_at, sc_at) = (0, 32, 48);
        let mut max_scale = 0.0f32;
        let sigma2 = 2.0 * sum_sq(xbl) / QK_K as f32;
        for ib in 0..QK_K / BS {
            let xb = &xbl[BS * ib..BS * ib + BS];
            let qw = quant_weights.map(|q| &q[QK_K * ibl + BS * ib..QK_K * ibl + BS * ib + BS]);
            block_weights(qw, xb, sigma2, &mut weight);
            let mut max = xb[0].abs();
            for &v in &xb[1..] {
                max = fmax(max, v.abs());
            }
            if max < GROUP_MAX_EPS_IQ1_M {
                scales[ib] = 0.0;
                shifts[ib] = 0;
                continue;
            }
            sorted_indices(xb, &mut idx);
            let mut best_score = -f32::MAX;
            let mut scale = max;
            let (mut besti1, mut besti2, mut best_k) = (-1i32, -1i32, -1i32);
            // Prefix sums per half of the block (each half has its own shift sign).
            let mut px = [[0.0f32; BS + 1]; 2];
            let mut pw = [[0.0f32; BS + 1]; 2];
            for j in 0..BS {
                let i = idx[j];
                let h = usize::from(i >= BS / 2);
                px[h][j + 1] = px[h][j] + weight[i] * xb[i];
                px[1 - h][j + 1] = px[1 - h][j];
                pw[h][j + 1] = pw[h][j] + weight[i];
                pw[1 - h][j + 1] = pw[1 - h][j];
            }
            let txs = [px[0][BS], px[1][BS]];
            let tws = [pw[0][BS], pw[1][BS]];
            let (p2, m2) = (x_p[2], x_m[2]);
            let cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1];
            let cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2];
            let cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1];
            let cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2];
            for i1 in 0..=BS {
                for i2 in i1..=BS {
                    let mut qx_p = [0.0f32; 2];
                    let mut qx_m = [0.0f32; 2];
                    let mut q2_p = [0.0f32; 2];
                    let mut q2_m = [0.0f32; 2];
                    for h in 0..2 {
                        let sx = px[h][i1] + px[h][i2];
                        qx_p[h] = txs[h] * p2 - sx;
                        qx_m[h] = txs[h] * m2 - sx;
                        q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                        q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                    }
                    let sumqx = [
                        qx_p[0] + qx_p[1],
                        qx_p[0] + qx_m[1],
                        qx_m[0] + qx_p[1],
                        qx_m[0] + qx_m[1],
                    ];
                    let sumq2 = [
                        q2_p[0] + q2_p[1],
                        q2_p[0] + q2_m[1],
                        q2_m[0] + q2_p[1],
                        q2_m[0] + q2_m[1],
                    ];
                    for k in 0..4 {
                        if sumq2[k] > 0.0 && sumqx[k] * sumqx[k] > best_score * sumq2[k] {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            besti1 = i1 as i32;
                            besti2 = i2 as i32;
                            best_k = k as i32;
                        }
                    }
                }
            }
            if besti1 < 0 || besti2 < 0 || best_k < 0 {
                scales[ib] = 0.0;
                shifts[ib] = 0;
                continue;
            }
            let (b1, b2) = (besti1 as usize, besti2 as usize);
            for j in 0..BS {
                l[idx[j]] = if j < b1 {
                    0
                } else if j < b2 {
                    1
                } else {
                    2
                };
            }
            if scale < 0.0 {
                for v in l.iter_mut() {
                    *v = 2 - *v;
                }
                scale = -scale;
                best_k = 3 - best_k;
            }
            let mut all_on_grid = true;
            for k in 0..BS / 8 {
                let xx = xx_of(best_k, k);
                let r = 8 * k..8 * k + 8;
                let (gi, on) = snap(
                    grid,
                    &xb[r.clone()],
                    &weight[r.clone()],
                    scale,
                    &xx,
                    &mut l[r],
                );
                all_on_grid &= on;
                index[k] = gi;
            }
            if !all_on_grid {
                let mut sumqx_f = 0.0f32;
                let mut sumq2_f = 0.0f32;
                for k in 0..BS / 8 {
                    let xx = xx_of(best_k, k);
                    let pg = &grid.points[index[k]];
                    for j in 0..8 {
                        let w = weight[8 * k + j];
                        let q = xx[((pg[j] - 1) / 2) as usize];
                        sumqx_f += w * q * xb[8 * k + j];
                        sumq2_f += w * q * q;
                    }
                }
                if sumqx_f > 0.0 && sumq2_f > 0.0 {
                    scale = sumqx_f / sumq2_f;
                }
            }
            yb[qs_at + 2 * ib] = (index[0] & 255) as u8;
            yb[qs_at + 2 * ib + 1] = (index[1] & 255) as u8;
            yb[qh_at + ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
            scales[ib] = scale;
            shifts[ib] = best_k as i8;
            max_scale = fmax(max_scale, scale);
        }
        if max_scale == 0.0 {
            continue;
        }
        let mut sc = [0u16; 4];
        let mut d = max_scale / 15.0;
        let id = 1.0 / d;
        let mut sumqx_f = 0.0f32;
        let mut sumq2_f = 0.0f32;
        for ib in 0..QK_K / BS {
            let s = nearest_int(0.5 * (id * scales[ib] - 1.0)).clamp(0, 7);
            sc[ib / 4] |= (s << (3 * (ib % 4))) as u16;
            yb[qh_at + ib] |= masks[shifts[ib] as usize];
            let xb = &xbl[BS * ib..BS * ib + BS];
            let qw = quant_weights.map(|q| &q[QK_K * ibl + BS * ib..QK_K * ibl + BS * ib + BS]);
            block_weights(qw, xb, sigma2, &mut weight);
            for k in 0..BS / 8 {
                let xx = xx_of(i32::from(shifts[ib]), k);
                let qh = usize::from(yb[qh_at + ib]);
                let gi = usize::from(yb[qs_at + 2 * ib + k]) + ((qh << (8 - 4 * k)) & 0x700);
                let pg = &grid.points[gi];
                for j in 0..8 {
                    let w = weight[8 * k + j];
                    let q = xx[((pg[j] - 1) / 2) as usize] * (2 * s + 1) as f32;
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
        }
        if sumq2_f > 0.0 {
            d = sumqx_f / sumq2_f;
        }
        let s16 = fp16(d * 1.1125);
        sc[0] |= (s16 & 0x000f) << 12;
        sc[1] |= (s16 & 0x00f0) << 8;
        sc[2] |= (s16 & 0x0f00) << 4;
        sc[3] |= s16 & 0xf000;
        for (i, v) in sc.iter().enumerate() {
            yb[sc_at + 2 * i..sc_at + 2 * i + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
}
