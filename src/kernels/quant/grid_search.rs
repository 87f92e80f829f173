//! The steps the grid IQ quantizers (IQ1_*, IQ2_*, IQ3_*) share, as `ggml-quants.c` repeats
//! them per type: sums and signs of a group, levels at an inverse scale, snapping a group of
//! levels to the grid (its nearest neighbour when off it), the 4-bit sub-block scale. Every
//! float operation is in upstream's order.

use super::grids::{Grid, Lookup};
use super::helpers::nearest_int;

#[inline(always)]
pub(super) fn fmax(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Sum of squares of a super-block, in order.
#[inline]
pub(super) fn sum_sq(x: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &v in x {
        s += v * v;
    }
    s
}

/// Magnitudes of 8 values into `xval` and their sign bits; with `even`, an odd count of
/// negatives flips the least important value (smallest `w * x^2`) so the count is even, and
/// only 7 bits are returned.
#[inline]
pub(super) fn signs8(xb: &[f32], w: &[f32], xval: &mut [f32], even: bool) -> u8 {
    let mut nflip = 0;
    let mut s = 0u8;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if !even {
        return s;
    }
    if nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = w[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = w[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// `iq2_find_best_neighbour` / `iq3_find_best_neighbour`: the neighbour with the least
/// weighted squared error at `scale`; writes its levels to `l`.
#[inline]
pub(super) fn best_neighbour<const D: usize>(
    neighbours: &[u16],
    grid: &Grid<D>,
    xval: &[f32],
    weight: &[f32],
    scale: f32,
    l: &mut [i8],
) -> usize {
    let mut best_d2 = f32::MAX;
    // Upstream asserts a neighbour wins (only NaN errors miss them all): the first then.
    let mut index = usize::from(neighbours[0]);
    for &j in neighbours {
        let pg = &grid.points[usize::from(j)];
        let mut d2 = 0.0f32;
        for i in 0..D {
            let q = f32::from(pg[i]);
            let diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if d2 < best_d2 {
            best_d2 = d2;
            index = usize::from(j);
        }
    }
    let pg = &grid.points[index];
    for i in 0..D {
        l[i] = (pg[i] - 1) / 2;
    }
    index
}

/// (sum w x q, sum w q^2) with q = 2l + 1.
#[inline]
pub(super) fn sums(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for i in 0..weight.len() {
        let w = weight[i];
        let q = (2 * i32::from(l[i]) + 1) as f32;
        sumqx += w * xval[i] * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// Levels of `l.len()` values at inverse scale `id`: `(id * x - 1) / 2` rounded, clamped to
/// `0..kmaxq - 1`.
#[inline]
pub(super) fn levels(xval: &[f32], id: f32, kmaxq: i32, l: &mut [i8]) {
    for (li, &x) in l.iter_mut().zip(xval) {
        *li = nearest_int(0.5 * (id * x - 1.0)).clamp(0, kmaxq - 1) as i8;
    }
}

/// Snaps the `D` levels at `l` to the grid: on it, its index; off it, the best neighbour at
/// `scale` (levels rewritten). Returns (index, was on grid).
#[inline]
pub(super) fn snap<const D: usize>(
    grid: &Grid<D>,
    xval: &[f32],
    waux: &[f32],
    scale: f32,
    l: &mut [i8],
) -> (usize, bool) {
    match grid.lookup(grid.pack(l)) {
        Lookup::OnGrid(i) => (i, true),
        Lookup::Neighbours(n) => (best_neighbour(n, grid, xval, waux, scale, l), false),
    }
}

/// The grid index of levels the search left on the grid.
#[inline]
pub(super) fn grid_index<const D: usize>(grid: &Grid<D>, l: &[i8]) -> usize {
    // Upstream aborts on a point off the grid here ("Oops: found point"); the searches
    // always end on the grid, so this cannot happen.
    grid.index(grid.pack(l)).unwrap_or(0)
}

/// The 4-bit sub-block scale of `scale` at super-block inverse scale `id`.
#[inline]
pub(super) fn scale4(id: f32, scale: f32) -> i32 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15)
}
