//! The layout of the fast mode's batched kernels ("r8"): 8 weight rows interleaved per block
//! so that one 256-bit register holds 4 bytes of each of the 8 rows, row `r` in 32-bit lane
//! `r`, and one pass over a block yields the exact integer dot products of all 8 rows with an
//! activation block, the 8 rows in the 8 lanes of one vector (the float work is then one
//! conversion and one FMA per 8 outputs and block, not per output; one broadcast of 4
//! activation bytes serves all 8 rows). The technique of ik_llama.cpp's `_r8` kernels.
//!
//! One r8 block (`R8_BLOCK_BYTES`): the 8 rows' scales as f32 in row order, then 8 quads
//! (elements `4k .. 4k + 4`), each 32 bytes: 4 bytes of every row in row order ([`quant_at`]).
//! Values are the weights' integers as i8 ([`R8Values::Signed8`], from Q8_0 and IQ4_NL) or
//! unsigned 0..31 ([`R8Values::Nibble4`]: Q4_0's nibbles, weight = nibble − 8; Q5_0's 5-bit
//! values, weight = value − 16; whose offset the kernels take off with the activation block's
//! sum; `maddubs` needs no sign trick for them). Groups are made per product in a task's own
//! buffer (the weights keep their ggml or repacked layout: nothing to re-derive on a swap).
//!
//! Leaf of the kernels: imports only the block formats. Also holds the scalar references of
//! the packing and of the kernel, which the SIMD ones equal bit for bit.

use crate::kernels::cpu::blocks::*;

/// Rows per group.
pub const R8_ROWS: usize = 8;

/// Bytes of one r8 block: 8 f32 scales, then 8 quads × 8 rows × 4 bytes.
pub const R8_BLOCK_BYTES: usize = 32 + 8 * 32;

/// Most activation columns one kernel call computes (the AVX2 kernel reads each weight
/// register once for all of them).
pub const R8_MAX_COLS: usize = 8;

/// How an r8 block's quant bytes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum R8Values {
    /// i8 weights (Q8_0; IQ4_NL after its packing).
    Signed8,
    /// Unsigned values 0..31 of weights value − offset (Q4_0: nibbles, offset 8; Q5_0: offset
    /// 16; the min types Q4_1/Q5_1: no offset), the offset × the activation block's sum given
    /// as `sx` ([`activation_meta`]).
    Nibble4,
}

/// The outputs of one kernel call: `out[c][r]` for column `c`, row `r` of the group.
pub type R8Out = [[f32; R8_ROWS]; R8_MAX_COLS];

/// An r8 kernel: `cols` (1..=[`R8_MAX_COLS`]) activation columns (Q8_0 rows of `nb` blocks,
/// `x_stride` bytes apart, starting at `x`) times one group of `nb` r8 blocks `w`, with the
/// columns' block scales `dx[c * meta_stride + b]` and (for `Nibble4`) 8 × their block sums
/// `sx[..]`: `out[c][r] = Σ_b fma-chain (isum · (d_w · d_x))`.
pub type R8Fn = fn(
    values: R8Values,
    nb: usize,
    w: &[u8],
    x: &[u8],
    x_stride: usize,
    cols: usize,
    dx: &[f32],
    sx: &[i32],
    meta_stride: usize,
    out: &mut R8Out,
);

/// Offset in an r8 block of row `r`'s quant byte of element `e`.
#[inline(always)]
pub fn quant_at(e: usize, r: usize) -> usize {
    32 + 32 * (e / 4) + 4 * r + e % 4
}

/// Writes the scales of one r8 block from the 8 rows' f32 scales.
#[inline(always)]
pub fn put_scales(blk: &mut [u8], d: [f32; R8_ROWS]) {
    for (r, d) in d.iter().enumerate() {
        blk[4 * r..4 * r + 4].copy_from_slice(&d.to_le_bytes());
    }
}

/// Packs 8 Q8_0 rows (`nb` blocks each) into `nb` r8 blocks of [`R8Values::Signed8`].
pub fn pack_q8_0(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    for b in 0..nb {
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        let src = rows.map(|r| &r[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES]);
        put_scales(blk, src.map(|s| f16_at(s, 0)));
        for (r, s) in src.iter().enumerate() {
            for e in 0..QK {
                blk[quant_at(e, r)] = s[2 + e];
            }
        }
    }
}

/// Packs 8 Q4_0 rows (`nb` blocks each) into `nb` r8 blocks of [`R8Values::Nibble4`].
pub fn pack_q4_0(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    for b in 0..nb {
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        let src = rows.map(|r| &r[b * Q4_0_BYTES..(b + 1) * Q4_0_BYTES]);
        put_scales(blk, src.map(|s| f16_at(s, 0)));
        for (r, s) in src.iter().enumerate() {
            for e in 0..QK {
                let q = if e < 16 {
                    s[2 + e] & 15
                } else {
                    s[2 + e - 16] >> 4
                };
                blk[quant_at(e, r)] = q;
            }
        }
    }
}

/// Packs 8 Q5_0 rows (`nb` blocks each) into `nb` r8 blocks of [`R8Values::Nibble4`]: each
/// element's nibble with its fifth bit from `qh` (0..31: the weight's integer + 16).
pub fn pack_q5_0(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8]) {
    for b in 0..nb {
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        let src = rows.map(|r| &r[b * Q5_0_BYTES..(b + 1) * Q5_0_BYTES]);
        put_scales(blk, src.map(|s| f16_at(s, 0)));
        for (r, s) in src.iter().enumerate() {
            let qh = u32::from_le_bytes([s[2], s[3], s[4], s[5]]);
            for e in 0..QK {
                let nibble = if e < 16 {
                    s[6 + e] & 15
                } else {
                    s[6 + e - 16] >> 4
                };
                let high = ((qh >> e) & 1) as u8;
                blk[quant_at(e, r)] = nibble | high << 4;
            }
        }
    }
}

/// Packs one group of a repacked `q4_0x8` weight (`nb` blocks of 144 bytes: 8 f16 scales,
/// then the rows' quant bytes 0..8, then 8..16, 8 bytes a row) into `nb` r8 blocks of
/// [`R8Values::Nibble4`].
pub fn pack_q4_0x8(group: &[u8], nb: usize, out: &mut [u8]) {
    const GB: usize = R8_ROWS * Q4_0_BYTES;
    for b in 0..nb {
        let src = &group[b * GB..(b + 1) * GB];
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        put_scales(blk, std::array::from_fn(|r| f16_at(src, 2 * r)));
        for r in 0..R8_ROWS {
            for e in 0..QK {
                let j = e % 16; // the quant byte holding element e
                let byte = src[2 * R8_ROWS + 8 * ((j / 8) * R8_ROWS + r) + j % 8];
                let q = if e < 16 { byte & 15 } else { byte >> 4 };
                blk[quant_at(e, r)] = q;
            }
        }
    }
}

/// Maps every quant byte (a nibble 0..15) of `nb` r8 blocks through IQ4_NL's code book,
/// turning [`R8Values::Nibble4`] blocks packed from IQ4_NL bytes (the same layout as Q4_0's)
/// into [`R8Values::Signed8`] ones of the weights' integers.
pub fn iq4_nl_values(nb: usize, out: &mut [u8]) {
    for blk in out[..nb * R8_BLOCK_BYTES].chunks_exact_mut(R8_BLOCK_BYTES) {
        for q in &mut blk[32..] {
            *q = KVALUES_IQ4NL[usize::from(*q & 15)] as u8;
        }
    }
}

/// The scale (f32) of each Q8_0 block of the activation row `x` and `offset` × its quants'
/// sum (the [`R8Values::Nibble4`] weight type's offset).
pub fn activation_meta(x: &[u8], nb: usize, dx: &mut [f32], sx: &mut [i32], offset: i32) {
    for b in 0..nb {
        let blk = &x[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
        dx[b] = f16_at(blk, 0);
        let mut sum = 0i32;
        for &q in &blk[2..] {
            sum += i32::from(q as i8);
        }
        sx[b] = offset * sum;
    }
}

/// The scalar reference of [`R8Fn`]: per output one f32 accumulator over the blocks in order,
/// `acc = fma(isum as f32, d_w · d_x, acc)` with `isum` the exact integer dot product (minus
/// `8 Σ x` for nibbles); the SIMD kernels compute the same operations, hence the same bits.
#[allow(clippy::too_many_arguments)]
pub fn r8_scalar(
    values: R8Values,
    nb: usize,
    w: &[u8],
    x: &[u8],
    x_stride: usize,
    cols: usize,
    dx: &[f32],
    sx: &[i32],
    meta_stride: usize,
    out: &mut R8Out,
) {
    assert!((1..=R8_MAX_COLS).contains(&cols), "{cols} columns");
    for c in 0..cols {
        let xr = &x[c * x_stride..c * x_stride + nb * Q8_0_BYTES];
        let mut acc = [0f32; R8_ROWS];
        for b in 0..nb {
            let blk = &w[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
            let xb = &xr[b * Q8_0_BYTES + 2..(b + 1) * Q8_0_BYTES];
            let d = dx[c * meta_stride + b];
            for (r, acc) in acc.iter_mut().enumerate() {
                let mut isum = 0i32;
                for e in 0..QK {
                    let q = blk[quant_at(e, r)];
                    let q = match values {
                        R8Values::Signed8 => i32::from(q as i8),
                        R8Values::Nibble4 => i32::from(q),
                    };
                    isum += q * i32::from(xb[e] as i8);
                }
                if values == R8Values::Nibble4 {
                    isum -= sx[c * meta_stride + b];
                }
                let dw = f32_at(blk, 4 * r);
                *acc = (isum as f32).mul_add(dw * d, *acc);
            }
        }
        out[c] = acc;
    }
}

/// Bytes of one super-block of a repacked `Q4Kx8` group (8 Q4_K blocks): 8 f16 `d`, 8 f16
/// `dmin`, the 8 sub-blocks' 6-bit scales (sub-major, row-minor), their mins likewise, then
/// the quant bytes in pieces of 8 (`160 + ((4c + p) · 8 + r) · 8`: chunk `c` of 32 bytes, piece
/// `p`, row `r`; low nibbles are sub-block `2c`, high ones `2c + 1`). The fast Q4_K kernels
/// read this layout (made once, at load) as it is: one 256-bit load is 8 bytes of 4 rows.
pub const Q4_KX8_BLOCK_BYTES: usize = 16 + 16 + 64 + 64 + 8 * (Q4_K_BYTES - 16);

/// How a fast K-quant group kernel reads its weight: a repacked `Q4Kx8` group (made at
/// load), or 8 plain ggml rows `row_stride` bytes apart (the other types and stacked experts,
/// which are not repacked: each super-block of the 8 rows is made ready once per product,
/// for all its columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KLayout {
    Q4Kx8,
    Q4K,
    Q5K,
    Q6K,
    /// IQ4_XS: code-book values, signed (no min term).
    IQ4XS,
}

impl KLayout {
    /// Elements per sub-block with a scale of its own: 32, or 16 for Q6_K.
    pub fn sub_elems(self) -> usize {
        match self {
            KLayout::Q6K => 16,
            _ => 32,
        }
    }

    /// Whether the quants are signed (IQ4_XS: its code book's values, with no min term).
    pub fn signed(self) -> bool {
        self == KLayout::IQ4XS
    }
}

/// A fast K-quant group kernel: 8 weight rows (`nbk` super-blocks; `w` a repacked group, or
/// 8 plain rows `row_stride` bytes apart, as its [`KLayout`] says) times `m` Q8_K activation
/// rows (`x`, `x_stride` bytes apart): `out[c][r]` = row `r` · column `c`.
pub type KGroupFn = fn(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
);

/// One super-block of one weight row as the fast K-quant kernels compute with it: the
/// weight is `d · sc[e / sub] · q[e] − dmin · minc[e / 16]` for element `e`, with `q` and
/// the integer scales and min coefficients small enough for `maddubs` / `madd`.
pub struct KView {
    /// Unsigned quants: 0..15 (Q4_K), 0..31 (Q5_K), 0..63 (Q6_K); IQ4_XS: the code book's
    /// values -127..=113 as i8 bits.
    pub q: [u8; QK_K],
    /// Per sub-block scale (8 of 32 elements, or 16 of 16).
    pub sc: [i16; 16],
    /// Per 16 elements (the Q8_K `bsums`): the min's integer (Q4_K/Q5_K: the sub-block's
    /// 6-bit min; Q6_K: 32 · its scale, the quants' offset).
    pub minc: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

/// Row `r`'s super-block `sb` of the weight `w` read as `layout` says.
pub fn k_view(layout: KLayout, w: &[u8], row_stride: usize, r: usize, sb: usize) -> KView {
    let mut v = KView {
        q: [0; QK_K],
        sc: [0; 16],
        minc: [0; 16],
        d: 0.0,
        dmin: 0.0,
    };
    match layout {
        KLayout::Q4Kx8 => {
            let blk = &w[sb * Q4_KX8_BLOCK_BYTES..(sb + 1) * Q4_KX8_BLOCK_BYTES];
            v.d = f16_at(blk, 2 * r);
            v.dmin = f16_at(blk, 16 + 2 * r);
            for s in 0..8 {
                v.sc[s] = i16::from(blk[32 + s * R8_ROWS + r]);
                v.minc[2 * s] = i16::from(blk[96 + s * R8_ROWS + r]);
                v.minc[2 * s + 1] = v.minc[2 * s];
                let (c, shift) = (s / 2, 4 * (s % 2));
                for e in 0..32 {
                    let at = 160 + ((4 * c + e / 8) * R8_ROWS + r) * 8 + e % 8;
                    v.q[32 * s + e] = (blk[at] >> shift) & 15;
                }
            }
        }
        KLayout::Q4K | KLayout::Q5K => {
            let size = if layout == KLayout::Q4K {
                Q4_K_BYTES
            } else {
                Q5_K_BYTES
            };
            let blk = &w[r * row_stride + sb * size..][..size];
            v.d = f16_at(blk, 0);
            v.dmin = f16_at(blk, 2);
            for s in 0..8 {
                let (sc, mn) = scale_min_k4(s, &blk[4..16]);
                v.sc[s] = i16::from(sc);
                v.minc[2 * s] = i16::from(mn);
                v.minc[2 * s + 1] = i16::from(mn);
            }
            let qs = if layout == KLayout::Q4K { 16 } else { 48 };
            for c in 0..4 {
                for l in 0..32 {
                    let byte = blk[qs + 32 * c + l];
                    let (mut lo, mut hi) = (byte & 15, byte >> 4);
                    if layout == KLayout::Q5K {
                        let h = blk[16 + l];
                        lo |= ((h >> (2 * c)) & 1) << 4;
                        hi |= ((h >> (2 * c + 1)) & 1) << 4;
                    }
                    v.q[64 * c + l] = lo;
                    v.q[64 * c + 32 + l] = hi;
                }
            }
        }
        KLayout::IQ4XS => {
            let blk = &w[r * row_stride + sb * IQ4_XS_BYTES..][..IQ4_XS_BYTES];
            v.d = f16_at(blk, 0);
            for ib in 0..8 {
                v.sc[ib] = iq4_xs_scale(blk, ib) as i16;
                for j in 0..16 {
                    let q = blk[8 + 16 * ib + j];
                    v.q[32 * ib + j] = KVALUES_IQ4NL[usize::from(q & 15)] as u8;
                    v.q[32 * ib + 16 + j] = KVALUES_IQ4NL[usize::from(q >> 4)] as u8;
                }
            }
        }
        KLayout::Q6K => {
            let blk = &w[r * row_stride + sb * Q6_K_BYTES..][..Q6_K_BYTES];
            v.d = f16_at(blk, 208);
            v.dmin = v.d;
            for s in 0..16 {
                v.sc[s] = i16::from(blk[192 + s] as i8);
                v.minc[s] = 32 * v.sc[s];
            }
            for n in 0..2 {
                let (ql, qh) = (&blk[64 * n..], &blk[128 + 32 * n..]);
                for l in 0..32 {
                    let e = 128 * n + l;
                    v.q[e] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                    v.q[e + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                    v.q[e + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    v.q[e + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
    }
    v
}

/// The scalar reference of the fast K-quant kernels ([`KGroupFn`] with the layout given):
/// per output one f32 accumulator over the super-blocks in order, `acc = fma(isum, d · d_x,
/// acc)` then `acc = fma(-imin, dmin · d_x, acc)`, where `isum = Σ_s sc_s · Σ q · x_q` and
/// `imin = Σ_j minc_j · bsum_j` are exact integers: the sub-block scales and mins stay in
/// the integer sums, the min term comes from the activations' `bsums` (ik_llama.cpp's
/// technique), and the float work is once per super-block. The AVX2 kernels compute the same
/// operations, hence the same bits.
#[allow(clippy::too_many_arguments)]
pub fn k_group_scalar(
    layout: KLayout,
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    let sub = layout.sub_elems();
    for r in 0..R8_ROWS {
        let views: Vec<KView> = (0..nbk)
            .map(|sb| k_view(layout, w, row_stride, r, sb))
            .collect();
        for c in 0..m {
            let xr = &x[c * x_stride..c * x_stride + nbk * Q8_K_BYTES];
            let mut acc = 0f32;
            for (sb, v) in views.iter().enumerate() {
                let xb = &xr[sb * Q8_K_BYTES..(sb + 1) * Q8_K_BYTES];
                let (mut isum, mut imin) = (0i32, 0i32);
                for s in 0..QK_K / sub {
                    let mut dot = 0i32;
                    for e in s * sub..(s + 1) * sub {
                        let q = if layout.signed() {
                            i32::from(v.q[e] as i8)
                        } else {
                            i32::from(v.q[e])
                        };
                        dot += q * i32::from(xb[4 + e] as i8);
                    }
                    isum += i32::from(v.sc[s]) * dot;
                }
                for j in 0..16 {
                    imin += i32::from(v.minc[j]) * i32::from(i16_at(xb, 4 + QK_K + 2 * j));
                }
                let dx = f32_at(xb, 0);
                acc = (isum as f32).mul_add(v.d * dx, acc);
                if !layout.signed() {
                    acc = (-(imin as f32)).mul_add(v.dmin * dx, acc);
                }
            }
            out[c][r] = acc;
        }
    }
}

/// [`k_group_scalar`] of a repacked `Q4Kx8` group.
pub fn q4_kx8_scalar(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    k_group_scalar(KLayout::Q4Kx8, nbk, w, row_stride, x, x_stride, m, out);
}

/// [`k_group_scalar`] of 8 plain Q4_K rows.
pub fn q4_k_rows_scalar(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    k_group_scalar(KLayout::Q4K, nbk, w, row_stride, x, x_stride, m, out);
}

/// [`k_group_scalar`] of 8 plain Q5_K rows.
pub fn q5_k_rows_scalar(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    k_group_scalar(KLayout::Q5K, nbk, w, row_stride, x, x_stride, m, out);
}

/// [`k_group_scalar`] of 8 plain Q6_K rows.
pub fn q6_k_rows_scalar(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    k_group_scalar(KLayout::Q6K, nbk, w, row_stride, x, x_stride, m, out);
}

/// [`k_group_scalar`] of 8 plain IQ4_XS rows.
pub fn iq4_xs_rows_scalar(
    nbk: usize,
    w: &[u8],
    row_stride: usize,
    x: &[u8],
    x_stride: usize,
    m: usize,
    out: &mut [[f32; R8_ROWS]],
) {
    k_group_scalar(KLayout::IQ4XS, nbk, w, row_stride, x, x_stride, m, out);
}
