//! The scalar helpers of ggml's weight quantizers (`ggml-quants.c`), written so every float
//! operation happens in the same order and precision as upstream's portable build (no FMA
//! contraction: ggml-base is compiled without `-mfma`), which keeps the output bit-identical.

/// `GROUP_MAX_EPS`: below this a group counts as all zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// `nearest_int`: round to nearest (ties to even) through the 1.5 * 2^23 trick; valid for
/// |x| <= 4194303 as upstream asserts.
#[inline(always)]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// C's conversion of a float to a narrow integer type: `cvttss2si` to 32 bits, then the low
/// bits kept. NaN and out-of-range values give `INT_MIN` (low byte 0) as on x86.
#[inline(always)]
pub fn c_trunc_i32(v: f32) -> i32 {
    if v.is_nan() || v >= 2_147_483_648.0 || v < -2_147_483_648.0 {
        i32::MIN
    } else {
        v as i32
    }
}

/// `GGML_FP32_TO_FP16` of the portable build (software conversion): round to nearest even;
/// NaN becomes 0x7E00 with the sign kept.
#[inline(always)]
pub fn fp16(x: f32) -> u16 {
    if x.is_nan() {
        let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
        return sign | 0x7e00;
    }
    half::f16::from_f32(x).to_bits()
}

#[inline(always)]
pub fn fp16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

#[inline(always)]
pub fn put_f16(dst: &mut [u8], at: usize, x: f32) -> u16 {
    let h = fp16(x);
    dst[at..at + 2].copy_from_slice(&h.to_le_bytes());
    h
}

/// `best_index_int8`: the index of the code-book value nearest to `x` (binary search over the
/// sorted `val`; an exact tie goes to the upper index, as upstream).
#[inline(always)]
pub fn best_index_int8(val: &[i8], x: f32) -> usize {
    let n = val.len();
    if x <= f32::from(val[0]) {
        return 0;
    }
    if x >= f32::from(val[n - 1]) {
        return n - 1;
    }
    let (mut ml, mut mu) = (0usize, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < f32::from(val[mav]) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - f32::from(val[mu - 1]) < f32::from(val[mu]) - x {
        mu - 1
    } else {
        mu
    }
}

/// `make_qx_quants`: symmetric quantization of `x` to `nmax` levels each side with a search
/// over 18 scales; `L` gets values in `0..2*nmax`; returns the scale.
pub fn make_qx_quants(
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    mut rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    if rmse_type == 0 {
        for i in 0..n {
            let l = nearest_int(iscale * x[i]);
            l_out[i] = (nmax + l.min(nmax - 1).max(-nmax)) as i8;
        }
        return 1.0 / iscale;
    }
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    let weight = |i: usize| -> f32 {
        match qw {
            Some(w) => w[i],
            None => match rmse_type {
                1 => x[i] * x[i],
                2 => 1.0,
                3 => x[i].abs(),
                _ => x[i].abs().sqrt(),
            },
        }
    };
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax - 1).max(-nmax);
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).min(nmax - 1).max(-nmax);
            let w = weight(i);
            let lf = l as f32;
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.min(nmax - 1).max(-nmax)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants` with `do_rmse` (the only way Q3_K's reference calls it): `L` in
/// `0..2*nmax`.
pub fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax - 1).max(-nmax);
        l_out[i] = l as i8;
        let w = x[i] * x[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = f32::from(l_out[i]);
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax - 1).max(-nmax);
                if new_l != i32::from(l_out[i]) {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for v in l_out[..n].iter_mut() {
        *v += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Which weighting `make_qkx_quants` uses where its caller passes no weights.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    Given(&'a [f32]),
    /// `make_qkx3_quants` with `weights == NULL`: x².
    Squares,
}

/// `make_qkx2_quants` (`strict_equal` = true: gives up when max == min) and
/// `make_qkx3_quants` (false: when max <= min): asymmetric quantization with a min, searching
/// `nstep + 1` scales. Returns the scale; `the_min` gets minus the min.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx_quants(
    nmax: i32,
    x: &[f32],
    weights: Weights<'_>,
    l_out: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
    strict_equal: bool,
) -> f32 {
    let n = x.len();
    let w_at = |i: usize| -> f32 {
        match weights {
            Weights::Given(w) => w[i],
            Weights::Squares => x[i] * x[i],
        }
    };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w_at(0);
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = w_at(i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    let degenerate = if strict_equal { max == min } else { max <= min };
    if degenerate {
        l_out[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.min(nmax).max(0) as u8;
        let mut diff = scale * f32::from(l_out[i]) + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += w_at(i) * diff;
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).min(nmax).max(0);
            laux[i] = l as u8;
            let w = w_at(i);
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += w_at(i) * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// `make_qp_quants`: non-negative values to `0..=nmax` with weights; returns the scale.
pub fn make_qp_quants(nmax: i32, x: &[f32], l_out: &mut [u8], quant_weights: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    for i in 0..n {
        l_out[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for i in 0..n {
        let diff = x[i] - scale * f32::from(l_out[i]);
        let w = quant_weights[i];
        best_mse += w * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1f32 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            let w = quant_weights[i];
            mse += w * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax);
        l_out[i] = l as u8;
        let w = quant_weights[i];
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = quant_weights[i];
            let li = f32::from(l_out[i]);
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != i32::from(l_out[i]) {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
    }

    #[test]
    fn best_index_picks_nearest_and_lower_on_ties() {
        let v: [i8; 4] = [-10, 0, 10, 20];
        assert_eq!(best_index_int8(&v, -50.0), 0);
        assert_eq!(best_index_int8(&v, 4.0), 1);
        assert_eq!(best_index_int8(&v, 5.0), 2); // tie: upstream's `<` picks the upper
        assert_eq!(best_index_int8(&v, 99.0), 3);
    }

    #[test]
    fn fp16_nan_is_canonical() {
        assert_eq!(fp16(f32::NAN), 0x7e00);
        assert_eq!(fp16(1.0), 0x3c00);
    }
}
