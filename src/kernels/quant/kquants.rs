//! The K-quants (Q2_K..Q6_K): `quantize_row_*_ref` without an importance matrix and
//! `quantize_row_*_impl` with one, as in `ggml-quants.c`. One call quantizes one row of whole
//! 256-element super-blocks; `qw` holds the row's importance weights.

use super::blocks::{Q2_K_BYTES, Q3_K_BYTES, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QK_K};
use super::helpers::*;

/// `get_scale_min_k4`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 2-bit values of a 256-block: byte `j/4 + l` holds elements `j+l`, `+32`, `+64`, `+96`.
fn pack_2bit(l: &[u8], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

fn sum_squares(x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &v in x {
        s += v * v;
    }
    s
}

// ---------------------------------------------------------------- Q2_K

pub fn q2_k(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(Q2_K_BYTES))
        .enumerate()
    {
        match qw {
            None => q2_k_ref_block(xb, yb),
            Some(qw) => q2_k_impl_block(xb, yb, &qw[QK_K * i..QK_K * (i + 1)]),
        }
    }
}

/// Final 2-bit levels from the stored scales and mins, then the packing (both variants).
fn q2_k_finish(xb: &[f32], yb: &mut [u8], l: &mut [u8; QK_K]) {
    let d_all = fp16_to_f32(u16::from_le_bytes([yb[80], yb[81]]));
    let m_all = fp16_to_f32(u16::from_le_bytes([yb[82], yb[83]]));
    for j in 0..QK_K / 16 {
        let d = d_all * f32::from(yb[j] & 0xf);
        if d == 0.0 {
            continue;
        }
        let dm = m_all * f32::from(yb[j] >> 4);
        for ii in 0..16 {
            let q = nearest_int((xb[16 * j + ii] + dm) / d);
            l[16 * j + ii] = q.min(3).max(0) as u8;
        }
    }
    pack_2bit(l, &mut yb[16..80]);
}

fn q2_k_ref_block(xb: &[f32], yb: &mut [u8]) {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0.0f32; 16];
    let mut mins = [0.0f32; QK_K / 16];
    let mut scales = [0.0f32; QK_K / 16];
    let q4scale = 15.0f32;
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..QK_K / 16 {
        let xs = &xb[16 * j..16 * j + 16];
        for k in 0..16 {
            weights[k] = xs[k].abs();
        }
        scales[j] = make_qkx_quants(
            3,
            xs,
            Weights::Given(&weights),
            &mut l[16 * j..16 * j + 16],
            &mut mins[j],
            &mut laux,
            -0.5,
            0.1,
            15,
            true,
            true,
        );
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    if max_scale > 0.0 {
        let iscale = q4scale / max_scale;
        for j in 0..QK_K / 16 {
            yb[j] = nearest_int(iscale * scales[j]) as u8;
        }
        put_f16(yb, 80, max_scale / q4scale);
    } else {
        yb[..16].fill(0);
        put_f16(yb, 80, 0.0);
    }
    if max_min > 0.0 {
        let iscale = q4scale / max_min;
        for j in 0..QK_K / 16 {
            let q = nearest_int(iscale * mins[j]);
            yb[j] |= (q << 4) as u8;
        }
        put_f16(yb, 82, max_min / q4scale);
    } else {
        put_f16(yb, 82, 0.0);
    }
    q2_k_finish(xb, yb, &mut l);
}

fn q2_k_impl_block(xb: &[f32], yb: &mut [u8], qw: &[f32]) {
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut mins = [0.0f32; QK_K / 16];
    let mut scales = [0.0f32; QK_K / 16];
    let mut sw = [0.0f32; QK_K / 16];
    let mut weight = [0.0f32; 16];
    let mut ls = [0u8; QK_K / 16];
    let mut lm = [0u8; QK_K / 16];
    let sigma2 = sum_squares(xb) / QK_K as f32;
    for j in 0..QK_K / 16 {
        let xs = &xb[16 * j..16 * j + 16];
        let q = &qw[16 * j..16 * j + 16];
        for k in 0..16 {
            weight[k] = q[k] * (sigma2 + xs[k] * xs[k]).sqrt();
        }
        for &w in &weight {
            sw[j] += w;
        }
        scales[j] = make_qkx_quants(
            3,
            xs,
            Weights::Given(&weight),
            &mut l[16 * j..16 * j + 16],
            &mut mins[j],
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
            false,
        );
    }
    let dm = make_qp_quants(15, &scales, &mut ls, &sw);
    let mm = make_qp_quants(15, &mins, &mut lm, &sw);
    put_f16(yb, 80, dm);
    put_f16(yb, 82, mm);
    for j in 0..QK_K / 16 {
        yb[j] = ls[j] | (lm[j] << 4);
    }
    q2_k_finish(xb, yb, &mut l);
}

// ---------------------------------------------------------------- Q3_K

pub fn q3_k(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(Q3_K_BYTES))
        .enumerate()
    {
        match qw {
            None => q3_k_ref_block(xb, yb),
            Some(qw) => q3_k_impl_block(xb, yb, Some(&qw[QK_K * i..QK_K * (i + 1)])),
        }
    }
}

/// Stores 16 six-bit scales (already offset by 32) in Q3_K's 12-byte packing.
fn q3_k_store_scale(scales: &mut [u8], j: usize, l: i32) {
    if j < 8 {
        scales[j] = (l & 0xf) as u8;
    } else {
        scales[j - 8] |= ((l & 0xf) << 4) as u8;
    }
    let h = l >> 4;
    scales[j % 4 + 8] |= (h << (2 * (j / 4))) as u8;
}

/// Final 3-bit levels from the stored scales, the high-bit mask and the packing.
fn q3_k_finish(xb: &[f32], yb: &mut [u8], l: &mut [i8; QK_K]) {
    let d_all = fp16_to_f32(u16::from_le_bytes([yb[108], yb[109]]));
    for j in 0..QK_K / 16 {
        let sc = &yb[96..108];
        let low = if j < 8 { sc[j] & 0xf } else { sc[j - 8] >> 4 } as i8;
        let s = (low | ((((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) as i8)).wrapping_sub(32);
        let d = d_all * f32::from(s);
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(xb[16 * j + ii] / d).min(3).max(-4);
            l[16 * j + ii] = (q + 4) as i8;
        }
    }
    yb[..32].fill(0);
    let mut m = 0usize;
    let mut hm = 1u8;
    for j in 0..QK_K {
        if l[j] > 3 {
            yb[m] |= hm;
            l[j] -= 4;
        }
        m += 1;
        if m == QK_K / 8 {
            m = 0;
            hm <<= 1;
        }
    }
    let lu: [u8; QK_K] = std::array::from_fn(|i| l[i] as u8);
    pack_2bit(&lu, &mut yb[32..96]);
}

fn q3_k_ref_block(xb: &[f32], yb: &mut [u8]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut amax = 0.0f32;
    for j in 0..QK_K / 16 {
        scales[j] = make_q3_quants(4, &xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
        let scale = scales[j].abs();
        if scale > amax {
            amax = scale;
            max_scale = scales[j];
        }
    }
    yb[96..108].fill(0);
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..QK_K / 16 {
            let q = nearest_int(iscale * scales[j]) as i8;
            let q = i32::from(q).min(31).max(-32) + 32;
            q3_k_store_scale(&mut yb[96..108], j, q);
        }
        put_f16(yb, 108, 1.0 / iscale);
    } else {
        put_f16(yb, 108, 0.0);
    }
    q3_k_finish(xb, yb, &mut l);
}

fn q3_k_impl_block(xb: &[f32], yb: &mut [u8], qw: Option<&[f32]>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut weight = [0.0f32; 16];
    let mut sw = [0.0f32; QK_K / 16];
    let mut ls = [0i8; QK_K / 16];
    let sigma2 = 2.0 * sum_squares(xb) / QK_K as f32;
    for j in 0..QK_K / 16 {
        let xs = &xb[16 * j..16 * j + 16];
        match qw {
            Some(qw) => {
                let q = &qw[16 * j..16 * j + 16];
                for k in 0..16 {
                    weight[k] = q[k] * (sigma2 + xs[k] * xs[k]).sqrt();
                }
            }
            None => {
                for k in 0..16 {
                    weight[k] = xs[k] * xs[k];
                }
            }
        }
        let mut sumw = 0.0f32;
        for &w in &weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants(4, xs, &mut l[16 * j..16 * j + 16], 1, Some(&weight));
    }
    yb[96..108].fill(0);
    let d_block = make_qx_quants(32, &scales, &mut ls, 1, Some(&sw));
    for j in 0..QK_K / 16 {
        q3_k_store_scale(&mut yb[96..108], j, i32::from(ls[j]));
    }
    put_f16(yb, 108, d_block);
    q3_k_finish(xb, yb, &mut l);
}

// ---------------------------------------------------------------- Q4_K / Q5_K

/// Stores 8 six-bit scales and mins in the 12-byte K4 packing.
fn store_scale_min_k4(scales: &mut [u8], j: usize, ls: u8, lm: u8) {
    if j < 4 {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
        scales[j - 4] |= (ls >> 4) << 6;
        scales[j] |= (lm >> 4) << 6;
    }
}

/// The scales and mins of the 8 sub-blocks of a Q4_K/Q5_K super-block, stored at
/// `yb[0..16]` (d, dmin, 12 scale bytes); `l` gets the sub-block levels of the search.
fn k4_scales(xb: &[f32], yb: &mut [u8], l: &mut [u8; QK_K], nmax: i32, qw: Option<&[f32]>) {
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut scales = [0.0f32; QK_K / 32];
    match qw {
        None => {
            let (rmin, nstep) = if nmax == 15 { (-1.0, 20) } else { (-0.5, 15) };
            let mut max_scale = 0.0f32;
            let mut max_min = 0.0f32;
            for j in 0..QK_K / 32 {
                let xs = &xb[32 * j..32 * j + 32];
                let av_x = (sum_squares(xs) / 32.0).sqrt();
                for k in 0..32 {
                    weights[k] = av_x + xs[k].abs();
                }
                scales[j] = make_qkx_quants(
                    nmax,
                    xs,
                    Weights::Given(&weights),
                    &mut l[32 * j..32 * j + 32],
                    &mut mins[j],
                    &mut laux,
                    rmin,
                    0.1,
                    nstep,
                    false,
                    true,
                );
                if scales[j] > max_scale {
                    max_scale = scales[j];
                }
                if mins[j] > max_min {
                    max_min = mins[j];
                }
            }
            let inv_scale = if max_scale > 0.0 {
                63.0 / max_scale
            } else {
                0.0
            };
            let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
            for j in 0..QK_K / 32 {
                let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
                let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
                store_scale_min_k4(&mut yb[4..16], j, ls, lm);
            }
            put_f16(yb, 0, max_scale / 63.0);
            put_f16(yb, 2, max_min / 63.0);
        }
        Some(qw) => {
            let mut ls = [0u8; QK_K / 32];
            let mut lm = [0u8; QK_K / 32];
            let mut sw = [0.0f32; QK_K / 32];
            let sigma2 = 2.0 * sum_squares(xb) / QK_K as f32;
            for j in 0..QK_K / 32 {
                let xs = &xb[32 * j..32 * j + 32];
                let q = &qw[32 * j..32 * j + 32];
                for k in 0..32 {
                    weights[k] = q[k] * (sigma2 + xs[k] * xs[k]).sqrt();
                }
                let mut sumw = 0.0f32;
                for &w in &weights {
                    sumw += w;
                }
                sw[j] = sumw;
                scales[j] = make_qkx_quants(
                    nmax,
                    xs,
                    Weights::Given(&weights),
                    &mut l[32 * j..32 * j + 32],
                    &mut mins[j],
                    &mut laux,
                    -0.9,
                    0.05,
                    36,
                    false,
                    false,
                );
            }
            let d_block = make_qp_quants(63, &scales, &mut ls, &sw);
            let m_block = make_qp_quants(63, &mins, &mut lm, &sw);
            for j in 0..QK_K / 32 {
                store_scale_min_k4(&mut yb[4..16], j, ls[j].min(63), lm[j].min(63));
            }
            put_f16(yb, 0, d_block);
            put_f16(yb, 2, m_block);
        }
    }
    // Final levels from the stored scales.
    let d_all = fp16_to_f32(u16::from_le_bytes([yb[0], yb[1]]));
    let m_all = fp16_to_f32(u16::from_le_bytes([yb[2], yb[3]]));
    for j in 0..QK_K / 32 {
        let (sc, m) = scale_min_k4(j, &yb[4..16]);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = m_all * f32::from(m);
        for ii in 0..32 {
            let q = nearest_int((xb[32 * j + ii] + dm) / d);
            l[32 * j + ii] = q.min(nmax).max(0) as u8;
        }
    }
}

pub fn q4_k(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let mut l = [0u8; QK_K];
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(Q4_K_BYTES))
        .enumerate()
    {
        k4_scales(xb, yb, &mut l, 15, qw.map(|q| &q[QK_K * i..QK_K * (i + 1)]));
        let q = &mut yb[16..144];
        for (n, j) in (0..QK_K).step_by(64).enumerate() {
            for k in 0..32 {
                q[32 * n + k] = l[j + k] | (l[j + k + 32] << 4);
            }
        }
    }
}

pub fn q5_k(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let mut l = [0u8; QK_K];
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(Q5_K_BYTES))
        .enumerate()
    {
        k4_scales(xb, yb, &mut l, 31, qw.map(|q| &q[QK_K * i..QK_K * (i + 1)]));
        let (qh, ql) = yb[16..176].split_at_mut(32);
        qh.fill(0);
        let (mut m1, mut m2) = (1u8, 2u8);
        for (nb, n) in (0..QK_K).step_by(64).enumerate() {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[32 * nb + j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

// ---------------------------------------------------------------- Q6_K

pub fn q6_k(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    for (i, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(Q6_K_BYTES))
        .enumerate()
    {
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..QK_K / 16 {
            let xs = &xb[16 * ib..16 * ib + 16];
            let w = qw.map(|q| &q[QK_K * i + 16 * ib..QK_K * i + 16 * ib + 16]);
            let scale = make_qx_quants(32, xs, &mut l[16 * ib..16 * ib + 16], 1, w);
            scales[ib] = scale;
            let abs_scale = scale.abs();
            if abs_scale > max_abs_scale {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            yb.fill(0);
            put_f16(yb, 208, 0.0);
            continue;
        }
        let iscale = -128.0 / max_scale;
        put_f16(yb, 208, 1.0 / iscale);
        for ib in 0..QK_K / 16 {
            yb[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        let d_all = fp16_to_f32(u16::from_le_bytes([yb[208], yb[209]]));
        for j in 0..QK_K / 16 {
            let d = d_all * f32::from(yb[192 + j] as i8);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(xb[16 * j + ii] / d).min(31).max(-32);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        let lu: [u8; QK_K] = std::array::from_fn(|k| l[k] as u8);
        for (n, j) in (0..QK_K).step_by(128).enumerate() {
            for k in 0..32 {
                let q1 = lu[j + k] & 0xf;
                let q2 = lu[j + k + 32] & 0xf;
                let q3 = lu[j + k + 64] & 0xf;
                let q4 = lu[j + k + 96] & 0xf;
                yb[64 * n + k] = q1 | (q3 << 4);
                yb[64 * n + k + 32] = q2 | (q4 << 4);
                yb[128 + 32 * n + k] = (lu[j + k] >> 4)
                    | ((lu[j + k + 32] >> 4) << 2)
                    | ((lu[j + k + 64] >> 4) << 4)
                    | ((lu[j + k + 96] >> 4) << 6);
            }
        }
    }
}
