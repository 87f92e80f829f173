//! IQ4_NL and IQ4_XS: `quantize_iq4_nl` / `quantize_iq4_xs` of `ggml-quants.c` (the non-linear
//! 4-bit code book, 7 scale tries each side), with or without an importance matrix.

use super::blocks::{IQ4_NL_BYTES, IQ4_XS_BYTES, QK, QK_K};
use super::helpers::*;

/// `kvalues_iq4nl`.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const NTRY: i32 = 7;

/// `quantize_row_iq4_nl_impl` for one super-block of `x.len()` (32 or 256) values with
/// `ntry = 7`. Writes `d` to `dh`, the packed nibbles to `q4`, and for super-blocks of more
/// than one block the 6-bit sub-scales to `scales_h` / `scales_l`.
fn iq4_impl(
    x: &[f32],
    dh: &mut [u8],
    q4: &mut [u8],
    scales_h: &mut u16,
    scales_l: &mut [u8],
    qw: Option<&[f32]>,
) {
    let sbs = x.len();
    let values = &KVALUES_IQ4NL;
    let v0 = f32::from(values[0]);
    let mut sigma2 = 0.0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / sbs as f32;
    q4.fill(0);
    dh.copy_from_slice(&fp16(0.0).to_le_bytes());

    let nblocks = sbs / QK;
    let mut scales = [0.0f32; QK_K / QK];
    let mut weight = [0.0f32; QK];
    let mut l_all = [0u8; QK_K];
    let mut max_scale = 0.0f32;
    let mut amax_scale = 0.0f32;
    for ib in 0..nblocks {
        let xb = &x[ib * QK..(ib + 1) * QK];
        match qw {
            Some(qw) => {
                let q = &qw[ib * QK..(ib + 1) * QK];
                for j in 0..QK {
                    weight[j] = q[j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..QK {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let lb = &mut l_all[ib * QK..(ib + 1) * QK];
        let mut d = -max / v0;
        let mut id = 1.0 / d;
        let mut sumqx = 0.0f32;
        let mut sumq2 = 0.0f32;
        for j in 0..QK {
            let al = id * xb[j];
            let l = best_index_int8(values, al);
            lb[j] = l as u8;
            let q = f32::from(values[l]);
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            id = (itry + i32::from(values[0])) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..QK {
                let al = id * xb[j];
                let l = best_index_int8(values, al);
                let q = f32::from(values[l]);
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        let abs_d = d.abs();
        if abs_d > amax_scale {
            amax_scale = abs_d;
            max_scale = d;
        }
    }

    if nblocks > 1 {
        *scales_h = 0;
        let d = -max_scale / 32.0;
        dh.copy_from_slice(&fp16(d).to_le_bytes());
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nblocks {
            let mut l = nearest_int(id * scales[ib]).min(31).max(-32);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            let xb = &x[ib * QK..(ib + 1) * QK];
            for j in 0..QK {
                l_all[ib * QK + j] = best_index_int8(values, idl * xb[j]) as u8;
            }
            l += 32;
            let l_l = (l & 0xf) as u8;
            let l_h = (l >> 4) as u16;
            if ib % 2 == 0 {
                scales_l[ib / 2] = l_l;
            } else {
                scales_l[ib / 2] |= l_l << 4;
            }
            *scales_h |= l_h << (2 * (ib % 8));
        }
    } else {
        dh.copy_from_slice(&fp16(scales[0]).to_le_bytes());
        let id = if scales[0] != 0.0 {
            1.0 / scales[0]
        } else {
            0.0
        };
        for j in 0..sbs {
            l_all[j] = best_index_int8(values, id * x[j]) as u8;
        }
    }
    for i in 0..sbs / 32 {
        for j in 0..16 {
            q4[16 * i + j] = l_all[32 * i + j] | (l_all[32 * i + 16 + j] << 4);
        }
    }
}

pub fn iq4_nl(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let mut unused_h = 0u16;
    for (ib, (xb, yb)) in x
        .chunks_exact(QK)
        .zip(y.chunks_exact_mut(IQ4_NL_BYTES))
        .enumerate()
    {
        let (dh, q4) = yb.split_at_mut(2);
        let w = qw.map(|q| &q[QK * ib..QK * (ib + 1)]);
        iq4_impl(xb, dh, q4, &mut unused_h, &mut [], w);
    }
}

pub fn iq4_xs(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    for (ib, (xb, yb)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(IQ4_XS_BYTES))
        .enumerate()
    {
        let (dh, rest) = yb.split_at_mut(2);
        let (sh, rest) = rest.split_at_mut(2);
        let (sl, q4) = rest.split_at_mut(4);
        let mut scales_h = 0u16;
        let w = qw.map(|q| &q[QK_K * ib..QK_K * (ib + 1)]);
        iq4_impl(xb, dh, q4, &mut scales_h, sl, w);
        sh.copy_from_slice(&scales_h.to_le_bytes());
    }
}
