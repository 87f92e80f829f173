//! The grid IQ types on the CPU (IQ1_S/M, IQ2_XXS/XS/S, IQ3_XXS/S): ggml's
//! `dequantize_row_*`, and dot products against Q8_K in the arithmetic of upstream's AVX2
//! `ggml_vec_dot_*_q8_K` (the oracle's build), written as scalar code: per super-block eight
//! i32 lanes (lane `L` sums positions `4L..4L+4` of every 32-value block times the block's
//! scale; signs applied to the activations with `vpsignb`'s wrap, -(-128) = -128), folded into
//! eight f32 lanes with one FMA each, reduced as `hsum_float_8`. Bit-identical to upstream's
//! AVX2 kernels (tests/kernels_upstream.rs); no SIMD version yet.

use super::blocks::*;
use super::iq_grids::*;

pub const IQ2_XXS_BYTES: usize = 66; // f16 d; u16 qs[32]
pub const IQ2_XS_BYTES: usize = 74; // f16 d; u16 qs[32]; u8 scales[8]
pub const IQ2_S_BYTES: usize = 82; // f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]
pub const IQ3_XXS_BYTES: usize = 98; // f16 d; u8 qs[64]; u32 scales_and_signs[8]
pub const IQ3_S_BYTES: usize = 110; // f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]
pub const IQ1_S_BYTES: usize = 50; // f16 d; u8 qs[32]; u16 qh[8]
pub const IQ1_M_BYTES: usize = 56; // u8 qs[32]; u8 qh[16]; u16 scales[4]

const IQ1S_DELTA: f32 = 0.125;
const IQ1M_DELTA: f32 = 0.125;

#[inline(always)]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & (1 << j) != 0 {
        -1.0
    } else {
        1.0
    }
}

/// An activation with a sign applied as `_mm256_sign_epi8` applies it (-128 stays -128).
#[inline(always)]
fn sw(q: u8, neg: bool) -> i32 {
    let q = q as i8;
    i32::from(if neg { q.wrapping_neg() } else { q })
}

#[inline(always)]
fn u16_le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn u32_le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The f16 super-block scale of an IQ1_M block, spread over its sub-scale words.
#[inline(always)]
fn iq1m_scale(b: &[u8]) -> f32 {
    let sc = |i: usize| u16_le(b, 48 + 2 * i);
    let h = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000);
    half::f16::from_bits(h).to_f32()
}

/// IQ2_S grid index of group `l` (0..4) of sub-block `ib32`.
#[inline(always)]
fn iq2s_index(b: &[u8], ib32: usize, l: usize) -> usize {
    usize::from(b[2 + 4 * ib32 + l]) | ((usize::from(b[66 + ib32]) << (8 - 2 * l)) & 0x300)
}

/// IQ3_S grid index of point `p` (0..8) of sub-block `ib32`.
#[inline(always)]
fn iq3s_index(b: &[u8], ib32: usize, p: usize) -> usize {
    usize::from(b[2 + 8 * ib32 + p]) | ((usize::from(b[66 + ib32]) << (8 - p)) & 256)
}

/// IQ1_S grid index of group `l` of sub-block `ib`.
#[inline(always)]
fn iq1s_index(b: &[u8], ib: usize, l: usize) -> usize {
    let qh = usize::from(u16_le(b, 34 + 2 * ib));
    usize::from(b[2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8)
}

/// IQ1_M grid index of group `l` (0..4) of 32-value sub-block `ib`.
#[inline(always)]
fn iq1m_index(b: &[u8], ib: usize, l: usize) -> usize {
    let qh = usize::from(b[32 + 2 * ib + l / 2]);
    usize::from(b[4 * ib + l]) | ((qh << (8 - 4 * (l % 2))) & 0x700)
}

/// IQ1_M shift sign of group `l` of sub-block `ib`: true for -delta.
#[inline(always)]
fn iq1m_minus(b: &[u8], ib: usize, l: usize) -> bool {
    let qh = b[32 + 2 * ib + l / 2];
    qh & if l % 2 == 0 { 0x08 } else { 0x80 } != 0
}

pub fn dequant_iq2_xxs(src: &[u8], dst: &mut [f32]) {
    let grid = iq2xxs_grid();
    for (b, y) in src
        .chunks_exact(IQ2_XXS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib32 in 0..QK_K / 32 {
            let a0 = u32_le(b, 2 + 8 * ib32);
            let a1 = u32_le(b, 6 + 8 * ib32);
            let db = d * (0.5 + (a1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let g = &grid[((a0 >> (8 * l)) & 255) as usize];
                let signs = ksigns_iq2xs(((a1 >> (7 * l)) & 127) as usize);
                for j in 0..8 {
                    y[32 * ib32 + 8 * l + j] = db * f32::from(g[j]) * sign(signs, j);
                }
            }
        }
    }
}

pub fn dequant_iq2_xs(src: &[u8], dst: &mut [f32]) {
    let grid = iq2xs_grid();
    for (b, y) in src
        .chunks_exact(IQ2_XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib32 in 0..QK_K / 32 {
            let sc = b[66 + ib32];
            let db = [
                d * (0.5 + f32::from(sc & 0xf)) * 0.25,
                d * (0.5 + f32::from(sc >> 4)) * 0.25,
            ];
            for l in 0..4 {
                let q = u16_le(b, 2 + 2 * (4 * ib32 + l));
                let g = &grid[usize::from(q & 511)];
                let signs = ksigns_iq2xs(usize::from(q >> 9));
                for j in 0..8 {
                    y[32 * ib32 + 8 * l + j] = db[l / 2] * f32::from(g[j]) * sign(signs, j);
                }
            }
        }
    }
}

pub fn dequant_iq2_s(src: &[u8], dst: &mut [f32]) {
    let grid = iq2s_grid();
    for (b, y) in src
        .chunks_exact(IQ2_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib32 in 0..QK_K / 32 {
            let sc = b[74 + ib32];
            let db = [
                d * (0.5 + f32::from(sc & 0xf)) * 0.25,
                d * (0.5 + f32::from(sc >> 4)) * 0.25,
            ];
            for l in 0..4 {
                let g = &grid[iq2s_index(b, ib32, l)];
                let signs = b[34 + 4 * ib32 + l];
                for j in 0..8 {
                    y[32 * ib32 + 8 * l + j] = db[l / 2] * f32::from(g[j]) * sign(signs, j);
                }
            }
        }
    }
}

pub fn dequant_iq3_xxs(src: &[u8], dst: &mut [f32]) {
    let grid = iq3xxs_grid();
    for (b, y) in src
        .chunks_exact(IQ3_XXS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib32 in 0..QK_K / 32 {
            let aux = u32_le(b, 2 + QK_K / 4 + 4 * ib32);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = ksigns_iq2xs(((aux >> (7 * l)) & 127) as usize);
                let g1 = &grid[usize::from(b[2 + 8 * ib32 + 2 * l])];
                let g2 = &grid[usize::from(b[2 + 8 * ib32 + 2 * l + 1])];
                let y = &mut y[32 * ib32 + 8 * l..];
                for j in 0..4 {
                    y[j] = db * f32::from(g1[j]) * sign(signs, j);
                    y[j + 4] = db * f32::from(g2[j]) * sign(signs, j + 4);
                }
            }
        }
    }
}

pub fn dequant_iq3_s(src: &[u8], dst: &mut [f32]) {
    let grid = iq3s_grid();
    for (b, y) in src
        .chunks_exact(IQ3_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib32 in 0..QK_K / 32 {
            let sc = b[106 + ib32 / 2];
            let s = if ib32 % 2 == 0 { sc & 0xf } else { sc >> 4 };
            let db = d * (1 + 2 * i32::from(s)) as f32;
            for l in 0..4 {
                let signs = b[74 + 4 * ib32 + l];
                let g1 = &grid[iq3s_index(b, ib32, 2 * l)];
                let g2 = &grid[iq3s_index(b, ib32, 2 * l + 1)];
                let y = &mut y[32 * ib32 + 8 * l..];
                for j in 0..4 {
                    y[j] = db * f32::from(g1[j]) * sign(signs, j);
                    y[j + 4] = db * f32::from(g2[j]) * sign(signs, j + 4);
                }
            }
        }
    }
}

pub fn dequant_iq1_s(src: &[u8], dst: &mut [f32]) {
    let grid = iq1s_grid();
    for (b, y) in src
        .chunks_exact(IQ1_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = f16_at(b, 0);
        for ib in 0..QK_K / 32 {
            let qh = u16_le(b, 34 + 2 * ib);
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for l in 0..4 {
                let g = &grid[iq1s_index(b, ib, l)];
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (f32::from(g[j] as i8) + delta);
                }
            }
        }
    }
}

pub fn dequant_iq1_m(src: &[u8], dst: &mut [f32]) {
    let grid = iq1s_grid();
    for (b, y) in src
        .chunks_exact(IQ1_M_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = iq1m_scale(b);
        for ib in 0..QK_K / 32 {
            let sc = u16_le(b, 48 + 2 * (ib / 2));
            let dl1 = d * (2 * ((sc >> (6 * (ib % 2))) & 7) + 1) as f32;
            let dl2 = d * (2 * ((sc >> (6 * (ib % 2) + 3)) & 7) + 1) as f32;
            for l in 0..4 {
                let g = &grid[iq1m_index(b, ib, l)];
                let delta = if iq1m_minus(b, ib, l) {
                    -IQ1M_DELTA
                } else {
                    IQ1M_DELTA
                };
                let dl = if l < 2 { dl1 } else { dl2 };
                for j in 0..8 {
                    y[32 * ib + 8 * l + j] = dl * (f32::from(g[j] as i8) + delta);
                }
            }
        }
    }
}

/// Q8_K activation block: (d, qs).
#[inline(always)]
fn q8k(xb: &[u8]) -> (f32, &[u8]) {
    (f32_at(xb, 0), &xb[4..4 + QK_K])
}

/// `hsum_float_8`: `((0+4)+(2+6))+((1+5)+(3+7))`.
#[inline(always)]
fn hsum8(a: &[f32; 8]) -> f32 {
    let w: [f32; 4] = std::array::from_fn(|i| a[i + 4] + a[i]);
    (w[0] + w[2]) + (w[1] + w[3])
}

/// The AVX2 kernels' accumulation: per super-block its 8 integer lanes (from `lanes`), then
/// `acc = fma(d, lanes, acc)` with `d` the weight scale times the activation scale.
#[inline(always)]
fn lane_dot(
    n: usize,
    w: &[u8],
    x: &[u8],
    block_bytes: usize,
    lanes: impl Fn(&[u8], &[u8], &mut [i32; 8]),
) -> f32 {
    let mut acc = [0.0f32; 8];
    for (b, xb) in w
        .chunks_exact(block_bytes)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let d = f16_at(b, 0) * yd;
        let mut l = [0i32; 8];
        lanes(b, yq, &mut l);
        for i in 0..8 {
            acc[i] = d.mul_add(l[i] as f32, acc[i]);
        }
    }
    hsum8(&acc)
}

/// Adds 8 magnitudes `g` times signed activations at `pos` (a multiple of 8) to the lanes.
#[inline(always)]
fn add8(lanes: &mut [i32; 8], pos: usize, g: &[u8], q8: &[u8], signs: u8, scale: i32) {
    let lane = (pos % 32) / 4;
    let mut s = [0i32; 2];
    for j in 0..8 {
        s[j / 4] += i32::from(g[j]) * sw(q8[pos + j], signs & (1 << j) != 0);
    }
    lanes[lane] += s[0] * scale;
    lanes[lane + 1] += s[1] * scale;
}

/// Adds 4 magnitudes to the lane of `pos` (a multiple of 4).
#[inline(always)]
fn add4(
    lanes: &mut [i32; 8],
    pos: usize,
    g: &[u8],
    q8: &[u8],
    signs: u8,
    shift: usize,
    scale: i32,
) {
    let mut s = 0i32;
    for j in 0..4 {
        s += i32::from(g[j]) * sw(q8[pos + j], signs & (1 << (j + shift)) != 0);
    }
    lanes[(pos % 32) / 4] += s * scale;
}

pub fn dot_iq2_xxs(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq2xxs_grid();
    let s = lane_dot(n, w, x, IQ2_XXS_BYTES, |b, q8, lanes| {
        for ib32 in 0..QK_K / 32 {
            let a0 = u32_le(b, 2 + 8 * ib32);
            let a1 = u32_le(b, 6 + 8 * ib32);
            let ls = (2 * (a1 >> 28) + 1) as i32;
            for l in 0..4 {
                let g = &grid[((a0 >> (8 * l)) & 255) as usize];
                let signs = ksigns_iq2xs(((a1 >> (7 * l)) & 127) as usize);
                add8(lanes, 32 * ib32 + 8 * l, g, q8, signs, ls);
            }
        }
    });
    0.125 * s
}

pub fn dot_iq2_xs(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq2xs_grid();
    let s = lane_dot(n, w, x, IQ2_XS_BYTES, |b, q8, lanes| {
        for ib32 in 0..QK_K / 32 {
            let sc = b[66 + ib32];
            let ls = [2 * i32::from(sc & 0xf) + 1, 2 * i32::from(sc >> 4) + 1];
            for l in 0..4 {
                let q = u16_le(b, 2 + 2 * (4 * ib32 + l));
                let g = &grid[usize::from(q & 511)];
                let signs = ksigns_iq2xs(usize::from(q >> 9));
                add8(lanes, 32 * ib32 + 8 * l, g, q8, signs, ls[l / 2]);
            }
        }
    });
    0.125 * s
}

pub fn dot_iq2_s(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq2s_grid();
    let s = lane_dot(n, w, x, IQ2_S_BYTES, |b, q8, lanes| {
        for ib32 in 0..QK_K / 32 {
            let sc = b[74 + ib32];
            let ls = [1 + 2 * i32::from(sc & 0xf), 1 + 2 * i32::from(sc >> 4)];
            for l in 0..4 {
                let g = &grid[iq2s_index(b, ib32, l)];
                let signs = b[34 + 4 * ib32 + l];
                add8(lanes, 32 * ib32 + 8 * l, g, q8, signs, ls[l / 2]);
            }
        }
    });
    0.125 * s
}

pub fn dot_iq3_xxs(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq3xxs_grid();
    let s = lane_dot(n, w, x, IQ3_XXS_BYTES, |b, q8, lanes| {
        for ib32 in 0..QK_K / 32 {
            let aux = u32_le(b, 2 + QK_K / 4 + 4 * ib32);
            let ls = (2 * (aux >> 28) + 1) as i32;
            for l in 0..4 {
                let signs = ksigns_iq2xs(((aux >> (7 * l)) & 127) as usize);
                let at = 32 * ib32 + 8 * l;
                let g1 = &grid[usize::from(b[2 + 8 * ib32 + 2 * l])];
                let g2 = &grid[usize::from(b[2 + 8 * ib32 + 2 * l + 1])];
                add4(lanes, at, g1, q8, signs, 0, ls);
                add4(lanes, at + 4, g2, q8, signs, 4, ls);
            }
        }
    });
    0.25 * s
}

pub fn dot_iq3_s(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq3s_grid();
    lane_dot(n, w, x, IQ3_S_BYTES, |b, q8, lanes| {
        for ib32 in 0..QK_K / 32 {
            let sc = b[106 + ib32 / 2];
            let ls = 2 * i32::from(if ib32 % 2 == 0 { sc & 0xf } else { sc >> 4 }) + 1;
            for l in 0..4 {
                let signs = b[74 + 4 * ib32 + l];
                let at = 32 * ib32 + 8 * l;
                add4(
                    lanes,
                    at,
                    &grid[iq3s_index(b, ib32, 2 * l)],
                    q8,
                    signs,
                    0,
                    ls,
                );
                add4(
                    lanes,
                    at + 4,
                    &grid[iq3s_index(b, ib32, 2 * l + 1)],
                    q8,
                    signs,
                    4,
                    ls,
                );
            }
        }
    })
}

/// Lanes of 8 ternary grid values (-1, 0, +1) times activations, as `mul_add_epi8`
/// (`vpsignb` of the activations by the grid value, so -1 × -128 gives -128).
#[inline(always)]
fn add8_ternary(lanes: &mut [i32; 8], pos: usize, g: &[u8], q8: &[u8], scale: i32) {
    let lane = (pos % 32) / 4;
    let mut s = [0i32; 2];
    for j in 0..8 {
        let v = g[j] as i8;
        if v != 0 {
            s[j / 4] += sw(q8[pos + j], v < 0);
        }
    }
    lanes[lane] += s[0] * scale;
    lanes[lane + 1] += s[1] * scale;
}

#[inline(always)]
fn bsum_at(xb: &[u8], j: usize) -> i32 {
    i32::from(i16_at(xb, 4 + QK_K + 2 * j))
}

pub fn dot_iq1_s(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq1s_grid();
    let mut acc = [0.0f32; 8];
    let mut accum1 = 0.0f32;
    for (b, xb) in w
        .chunks_exact(IQ1_S_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let mut lanes = [0i32; 8];
        let mut sumi1 = 0i32;
        for ib in 0..QK_K / 32 {
            let qh = u16_le(b, 34 + 2 * ib);
            let ls = 2 * i32::from((qh >> 12) & 7) + 1;
            for l in 0..4 {
                add8_ternary(
                    &mut lanes,
                    32 * ib + 8 * l,
                    &grid[iq1s_index(b, ib, l)],
                    yq,
                    ls,
                );
            }
            let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
            sumi1 += (bsum_at(xb, 2 * ib) + bsum_at(xb, 2 * ib + 1)) * delta * ls;
        }
        let d = yd * f16_at(b, 0);
        for i in 0..8 {
            acc[i] = d.mul_add(lanes[i] as f32, acc[i]);
        }
        accum1 = d.mul_add(sumi1 as f32, accum1);
    }
    hsum8(&acc) + IQ1S_DELTA * accum1
}

pub fn dot_iq1_m(n: usize, w: &[u8], x: &[u8]) -> f32 {
    let grid = iq1s_grid();
    let mut acc1 = [0.0f32; 8];
    let mut acc2 = [0.0f32; 8];
    for (b, xb) in w
        .chunks_exact(IQ1_M_BYTES)
        .zip(x.chunks_exact(Q8_K_BYTES))
        .take(n / QK_K)
    {
        let (yd, yq) = q8k(xb);
        let mut lanes1 = [0i32; 8];
        let mut lanes2 = [0i32; 8];
        for ib in 0..QK_K / 32 {
            let sc = u16_le(b, 48 + 2 * (ib / 2));
            let ls = [
                2 * i32::from((sc >> (6 * (ib % 2))) & 7) + 1,
                2 * i32::from((sc >> (6 * (ib % 2) + 3)) & 7) + 1,
            ];
            for l in 0..4 {
                let pos = 32 * ib + 8 * l;
                add8_ternary(&mut lanes1, pos, &grid[iq1m_index(b, ib, l)], yq, ls[l / 2]);
                let minus = iq1m_minus(b, ib, l);
                let lane = (pos % 32) / 4;
                for h in 0..2 {
                    let s: i32 = (0..4).map(|j| sw(yq[pos + 4 * h + j], minus)).sum();
                    lanes2[lane + h] += s * ls[l / 2];
                }
            }
        }
        let d = yd * iq1m_scale(b);
        for i in 0..8 {
            acc1[i] = d.mul_add(lanes1[i] as f32, acc1[i]);
            acc2[i] = d.mul_add(lanes2[i] as f32, acc2[i]);
        }
    }
    hsum8(&acc1) + IQ1M_DELTA * hsum8(&acc2)
}
