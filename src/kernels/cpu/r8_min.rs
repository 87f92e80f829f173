//! The r8 kernels (`r8_layout.rs`) for the weight types with a per-block min, Q4_1 and Q5_1
//! (weight = `d · q + m`, `q` unsigned: 0..15, 0..31): the quants go into r8 blocks as
//! unsigned bytes (`R8Values::Nibble4` with no offset to take off: `maddubs` takes u8 up to
//! 31 against i8 activations without overflow, 4 quads summed in i16 ≤ 4 · 2 · 31 · 127 <
//! 2¹⁵), the block's `d` as the r8 scale, and its `m` into a separate list, 8 rows a block
//! in row order. A product with a Q8_1 activation block (`d_x`, `s_x = d_x · Σ x_q`, the quants) is then
//! `d · d_x · Σ q · x_q + m · s_x` (upstream's `ggml_vec_dot_q4_1_q8_1` term by term): the r8
//! kernel gives the first sum, [`min_term`] the second, one FMA per block for 8 rows.
//!
//! The Q8_1 activation rows are copied into the Q8_0-shaped rows the r8 kernel reads
//! ([`q8_1_as_q8_0`]). Scalar references here; the AVX2 forms (`x86/r8_min.rs`) equal them
//! bit for bit. Leaf of the kernels: imports only the block formats and the r8 layout.

use crate::kernels::cpu::blocks::*;
use crate::kernels::cpu::r8_layout::{put_scales, quant_at, R8_BLOCK_BYTES, R8_ROWS};

/// A packing of 8 rows of a min type into `nb` r8 blocks and `8 · nb` mins (row order).
pub type R8MinPackFn = fn([&[u8]; R8_ROWS], usize, &mut [u8], &mut [f32]);

/// The min terms of one group and `m` columns: `nb` blocks' 8 mins and each column's `nb`
/// block sums `s_x` (column `c` at `c · nb`), into `out[c]`, the 8 rows' sums of column `c`.
pub type R8MinTermFn = fn(usize, &[f32], &[f32], usize, &mut [[f32; R8_ROWS]]);

/// Packs 8 Q4_1 rows (`nb` blocks each) into `nb` r8 blocks (nibbles 0..15, scale `d`) and
/// their mins `m` into `mins[8 · b + r]`.
pub fn pack_q4_1(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8], mins: &mut [f32]) {
    for b in 0..nb {
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        let src = rows.map(|r| &r[b * Q4_1_BYTES..(b + 1) * Q4_1_BYTES]);
        put_scales(blk, src.map(|s| f16_at(s, 0)));
        for (r, s) in src.iter().enumerate() {
            mins[R8_ROWS * b + r] = f16_at(s, 2);
            for e in 0..QK {
                let q = if e < 16 {
                    s[4 + e] & 15
                } else {
                    s[4 + e - 16] >> 4
                };
                blk[quant_at(e, r)] = q;
            }
        }
    }
}

/// Packs 8 Q5_1 rows (`nb` blocks each) into `nb` r8 blocks (each element's nibble with its
/// fifth bit from `qh`: 0..31, scale `d`) and their mins `m` into `mins[8 · b + r]`.
pub fn pack_q5_1(rows: [&[u8]; R8_ROWS], nb: usize, out: &mut [u8], mins: &mut [f32]) {
    for b in 0..nb {
        let blk = &mut out[b * R8_BLOCK_BYTES..(b + 1) * R8_BLOCK_BYTES];
        let src = rows.map(|r| &r[b * Q5_1_BYTES..(b + 1) * Q5_1_BYTES]);
        put_scales(blk, src.map(|s| f16_at(s, 0)));
        for (r, s) in src.iter().enumerate() {
            mins[R8_ROWS * b + r] = f16_at(s, 2);
            let qh = u32_at(s, 4);
            for e in 0..QK {
                let nibble = if e < 16 {
                    s[8 + e] & 15
                } else {
                    s[8 + e - 16] >> 4
                };
                let high = ((qh >> e) & 1) as u8;
                blk[quant_at(e, r)] = nibble | high << 4;
            }
        }
    }
}

/// One Q8_1 activation row of `nb` blocks as the r8 kernels read it: its quants into the
/// Q8_0-shaped blocks of `xq` (the scale bytes left as they are: the kernels take the scales
/// from `dx`), each block's `d` into `dx[b]` and its `s` into `sx[b]` (as f32: upstream's f16
/// value, so the min term is upstream's).
pub fn q8_1_as_q8_0(x: &[u8], nb: usize, xq: &mut [u8], dx: &mut [f32], sx: &mut [f32]) {
    for b in 0..nb {
        let blk = &x[b * Q8_1_BYTES..(b + 1) * Q8_1_BYTES];
        dx[b] = f16_at(blk, 0);
        sx[b] = f16_at(blk, 2);
        xq[b * Q8_0_BYTES + 2..(b + 1) * Q8_0_BYTES].copy_from_slice(&blk[4..]);
    }
}

/// The scalar reference of [`R8MinTermFn`]: per row and column one f32 accumulator over the
/// blocks in order, `acc = fma(m, s_x, acc)`.
pub fn min_term(nb: usize, mins: &[f32], sx: &[f32], m: usize, out: &mut [[f32; R8_ROWS]]) {
    assert!(
        mins.len() >= nb * R8_ROWS && sx.len() >= m * nb && out.len() >= m,
        "min terms of {nb} blocks × {m} columns"
    );
    for (c, acc) in out.iter_mut().enumerate().take(m) {
        *acc = [0f32; R8_ROWS];
        for b in 0..nb {
            for (r, a) in acc.iter_mut().enumerate() {
                *a = mins[R8_ROWS * b + r].mul_add(sx[c * nb + b], *a);
            }
        }
    }
}
