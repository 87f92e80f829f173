//! The search tables of the grid IQ quantizers, built as `iq2xs_init_impl` /
//! `iq3xs_init_impl` build them: each grid point in quantizer space (coordinate `2l + 1` for
//! level `l`), a map from every packed point of the level box to its grid index, and for the
//! points off the grid the list of their nearest grid points (all those at the `nwant`
//! smallest squared distances, ordered by distance then index, as upstream's sort orders them).
//! Built once per grid on first use (`OnceLock`: thread-safe), shared by all rows after.

use std::sync::OnceLock;

use crate::kernels::cpu::iq_grids;

/// One grid's tables. `D` is the number of coordinates per point (8 for IQ1/IQ2, 4 for IQ3).
pub(super) struct Grid<const D: usize> {
    /// Grid points, coordinates `2l + 1` (ggml's `kgrid_q2xs` / `kgrid_q3xs` bytes).
    pub points: Vec<[i8; D]>,
    /// Packed point -> grid index, or `-(offset + 1)` of its neighbour list.
    map: Vec<i32>,
    /// Neighbour lists: a count, then that many grid indices.
    neighbours: Vec<u16>,
    /// Bits per packed level (2 for IQ1/IQ2, 3 for IQ3).
    bits: u32,
}

/// Where a packed point lies: on the grid (its index) or off it (its neighbours).
pub(super) enum Lookup<'a> {
    OnGrid(usize),
    Neighbours(&'a [u16]),
}

impl<const D: usize> Grid<D> {
    fn build(kgrid: &[u16], bits: u32, map_size: usize, nwant: usize) -> Self {
        let mask = (1u32 << bits) - 1;
        let unpack = |v: u32| -> [i8; D] {
            let mut p = [0i8; D];
            for (i, c) in p.iter_mut().enumerate() {
                *c = (2 * ((v >> (bits as usize * i)) & mask) + 1) as i8;
            }
            p
        };
        let points: Vec<[i8; D]> = kgrid.iter().map(|&v| unpack(u32::from(v))).collect();
        let mut map = vec![-1i32; map_size];
        for (i, p) in points.iter().enumerate() {
            let mut index = 0usize;
            for (k, &c) in p.iter().enumerate() {
                index |= (((c - 1) / 2) as usize) << (bits as usize * k);
            }
            map[index] = i as i32;
        }
        // Squared distances are small integers: a histogram finds the `nwant`-th smallest
        // distinct one without sorting the whole grid per point (same lists as upstream's
        // full sort on (distance, index)).
        let max_d2 = D * (2 * mask as usize + 1).pow(2) + 1;
        let mut neighbours = Vec::new();
        let mut dist = vec![0usize; points.len()];
        let mut hist = vec![0u32; max_d2 + 1];
        let mut chosen: Vec<(usize, u16)> = Vec::new();
        for i in 0..map_size {
            if map[i] >= 0 {
                continue;
            }
            let pos = unpack(i as u32);
            hist.fill(0);
            for (j, p) in points.iter().enumerate() {
                let mut d2 = 0i32;
                for k in 0..D {
                    let d = i32::from(p[k]) - i32::from(pos[k]);
                    d2 += d * d;
                }
                dist[j] = d2 as usize;
                hist[d2 as usize] += 1;
            }
            let mut distinct = 0;
            let mut limit = 0;
            for (d2, &n) in hist.iter().enumerate() {
                if n > 0 {
                    distinct += 1;
                    limit = d2;
                    if distinct == nwant {
                        break;
                    }
                }
            }
            chosen.clear();
            chosen.extend(
                dist.iter()
                    .enumerate()
                    .filter(|&(_, &d)| d <= limit)
                    .map(|(j, &d)| (d, j as u16)),
            );
            chosen.sort_unstable();
            map[i] = -(neighbours.len() as i32 + 1);
            neighbours.push(chosen.len() as u16);
            neighbours.extend(chosen.iter().map(|&(_, j)| j));
        }
        Grid {
            points,
            map,
            neighbours,
            bits,
        }
    }

    /// The first `D` levels of `l` packed as the map's key.
    #[inline]
    pub fn pack(&self, l: &[i8]) -> usize {
        let mut u = 0usize;
        for (i, &v) in l.iter().enumerate().take(D) {
            u |= (v as usize) << (self.bits as usize * i);
        }
        u
    }

    /// Looks up the packed point `u`.
    #[inline]
    pub fn lookup(&self, u: usize) -> Lookup<'_> {
        let m = self.map[u];
        if m >= 0 {
            Lookup::OnGrid(m as usize)
        } else {
            let at = (-m - 1) as usize;
            let n = usize::from(self.neighbours[at]);
            Lookup::Neighbours(&self.neighbours[at + 1..at + 1 + n])
        }
    }

    /// The grid index of `u`, if it lies on the grid.
    #[inline]
    pub fn index(&self, u: usize) -> Option<usize> {
        let m = self.map[u];
        (m >= 0).then_some(m as usize)
    }
}

/// `iq2xs_init_impl`'s map size: every packed 8 × 2-bit point up to 0xAAAA (levels 0..2).
const MAP_Q2XS: usize = 43692;
/// `iq3xs_init_impl`'s map size: every packed 4 × 3-bit point.
const MAP_Q3XS: usize = 4096;

pub(super) fn iq2xxs() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ2XXS_POINTS, 2, MAP_Q2XS, 2))
}

pub(super) fn iq2xs() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ2XS_POINTS, 2, MAP_Q2XS, 2))
}

pub(super) fn iq2s() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ2S_POINTS, 2, MAP_Q2XS, 1))
}

/// IQ1_S and IQ1_M share one grid.
pub(super) fn iq1s() -> &'static Grid<8> {
    static G: OnceLock<Grid<8>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ1S_POINTS, 2, MAP_Q2XS, 3))
}

pub(super) fn iq3xxs() -> &'static Grid<4> {
    static G: OnceLock<Grid<4>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ3XXS_POINTS, 3, MAP_Q3XS, 2))
}

pub(super) fn iq3s() -> &'static Grid<4> {
    static G: OnceLock<Grid<4>> = OnceLock::new();
    G.get_or_init(|| Grid::build(&iq_grids::IQ3S_POINTS, 3, MAP_Q3XS, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every grid point maps to itself; every other point has a non-empty neighbour list
    /// ordered by distance, holding all points at the smallest distance.
    #[test]
    fn maps_and_neighbours_are_consistent() {
        let g = iq3xxs();
        for (i, p) in g.points.iter().enumerate() {
            let u: usize = p
                .iter()
                .enumerate()
                .map(|(k, &c)| (((c - 1) / 2) as usize) << (3 * k))
                .sum();
            assert_eq!(g.index(u), Some(i));
        }
        let d2 = |a: &[i8; 4], u: usize| -> i32 {
            (0..4)
                .map(|k| {
                    let d = i32::from(a[k]) - (2 * ((u >> (3 * k)) & 7) as i32 + 1);
                    d * d
                })
                .sum()
        };
        for u in 0..MAP_Q3XS {
            if let Lookup::Neighbours(n) = g.lookup(u) {
                assert!(!n.is_empty());
                let ds: Vec<i32> = n
                    .iter()
                    .map(|&j| d2(&g.points[usize::from(j)], u))
                    .collect();
                assert!(ds.windows(2).all(|w| w[0] <= w[1]), "{u}: {ds:?}");
                let best = g.points.iter().map(|p| d2(p, u)).min().unwrap();
                let at_best = g.points.iter().filter(|p| d2(p, u) == best).count();
                assert_eq!(ds[0], best);
                assert!(ds.iter().filter(|&&d| d == best).count() == at_best);
            }
        }
    }
}
