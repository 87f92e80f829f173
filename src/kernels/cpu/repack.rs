//! Weights repacked at load into 8-row interleaved layouts, as upstream's CPU backend does on
//! AVX2 (`ggml-cpu/repack.cpp`, the `CPU_REPACK` buffer type): a Q4_0 weight with a multiple
//! of 8 rows becomes `block_q4_0x8`s (`q4_0_8x8_q8_0`), so one pass over a block column
//! yields the dot products of 8 weight rows with an activation row (upstream's gemv), or with
//! 4 activation rows at once (its gemm).
//!
//! IQ4_NL weights become `block_iq4_nlx8`s (`iq4_nl_8x8_q8_0`) the same way. Q4_K weights
//! (`q4_K_8x8_q8_K`) get a layout of ours ([`Q4KX8_BYTES`]: the 6-bit scales unpacked, 2.8%
//! larger than the blocks) with upstream's two float orders: its gemm makes the FMAs per pair
//! of sub-blocks, its gemv per super-block, and its 4-row Q8_K quantizer breaks a tie of
//! magnitudes differently from the row quantizer ([`q8_k_mat_fixup`]).
//!
//! Layout of one `block_q4_0x8` (144 bytes: the 8 blocks it came from, same size): the 8 f16
//! scales of rows `8g .. 8g + 8` at one block index, then 128 bytes of quants, interleaved 8
//! bytes at a time: bytes `8i .. 8i + 8` are bytes `8 (i / 8) .. 8 (i / 8) + 8` of row
//! `i % 8`'s `qs` (upstream's `make_block_q4_0x8` with interleave 8). Upstream also XORs every
//! nibble with 8 for its signed lookup; we keep the nibbles unsigned and subtract `8 · Σ x`
//! from the integer sum, the same integer.
//!
//! Float order (what makes results bit-identical to upstream's): per output, one f32
//! accumulator over the blocks in order, `acc = fma(isum_b as f32, d_w · d_x, acc)`, where
//! `isum_b` is the exact integer dot product of block `b` and `d_w · d_x` the product of the two
//! f16 scales rounded to f32 (upstream's `_mm256_fmadd_ps(cvtepi32(iacc), col_scale *
//! row_scale, acc)` in both its gemv and its gemm). Activations are Q8_0 rows quantized as
//! `quantize_row_q8_0` does; upstream's `quantize_mat_q8_0` interleaves 4 rows but computes
//! the same values, so plain rows serve both shapes here.

use super::blocks::*;
use super::{Activations, Scratch, SharedOut, ThreadPool};
use crate::gguf::GgmlType;

/// Rows interleaved per group.
pub const ROWS: usize = 8;

/// A repacked layout upstream's AVX2 build picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepackKind {
    /// `q4_0_8x8_q8_0`.
    Q4_0x8,
    /// `iq4_nl_8x8_q8_0` (the same interleave; nibbles index the IQ4_NL value table).
    Iq4NlX8,
    /// `q4_K_8x8_q8_K` (our layout of it: see [`repack`]).
    Q4Kx8,
}

impl RepackKind {
    /// Elements per block.
    fn block_elems(self) -> usize {
        match self {
            RepackKind::Q4Kx8 => QK_K,
            _ => QK,
        }
    }

    /// Bytes of the 8 rows' blocks at one block index.
    fn group_block_bytes(self) -> usize {
        match self {
            RepackKind::Q4Kx8 => Q4KX8_BYTES,
            _ => ROWS * Q4_0_BYTES,
        }
    }

    /// The ggml type the layout is made from.
    fn plain_type(self) -> GgmlType {
        match self {
            RepackKind::Q4_0x8 => GgmlType::Q4_0,
            RepackKind::Iq4NlX8 => GgmlType::IQ4_NL,
            RepackKind::Q4Kx8 => GgmlType::Q4_K,
        }
    }

    /// Bytes of one ggml block of [`Self::plain_type`] (IQ4_NL's are Q4_0's size).
    fn plain_block_bytes(self) -> usize {
        match self {
            RepackKind::Q4Kx8 => Q4_K_BYTES,
            _ => Q4_0_BYTES,
        }
    }

    /// Puts row `r`'s ggml block `inb` into its places in the group block `blk`.
    fn pack_row(self, r: usize, inb: &[u8], blk: &mut [u8]) {
        match self {
            RepackKind::Q4Kx8 => pack_q4_kx8_row(r, inb, blk),
            _ => {
                blk[2 * r..2 * r + 2].copy_from_slice(&inb[..2]);
                for half in 0..2 {
                    let at = q4_0x8_quants_at(half, r);
                    blk[at..at + 8].copy_from_slice(&inb[2 + 8 * half..2 + 8 * half + 8]);
                }
            }
        }
    }

    /// Row `r`'s ggml block out of the group block `blk` (the inverse of [`Self::pack_row`]).
    fn unpack_row(self, blk: &[u8], r: usize, out: &mut [u8]) {
        match self {
            RepackKind::Q4Kx8 => unpack_q4_kx8_row(blk, r, out),
            _ => {
                out[..2].copy_from_slice(&blk[2 * r..2 * r + 2]);
                for half in 0..2 {
                    let at = q4_0x8_quants_at(half, r);
                    out[2 + 8 * half..2 + 8 * half + 8].copy_from_slice(&blk[at..at + 8]);
                }
            }
        }
    }

    /// Words of [`fill_meta`] per activation block.
    fn meta_words(self) -> usize {
        match self {
            RepackKind::Q4Kx8 => 9,
            _ => 2,
        }
    }
}

/// One `Q4Kx8` block: `d[8]` and `dmin[8]` (f16), `scales[8 sub-blocks][8 rows]` and
/// `mins[8][8]` (u8, unpacked from the 6-bit fields), then the quants: for each 64-element chunk
/// c and 8-byte piece p, row r's `qs[32c + 8p .. 32c + 8p + 8]` at `((4c + p) · 8 + r) · 8`.
pub const Q4KX8_BYTES: usize = 16 + 16 + 64 + 64 + 1024;

/// A weight in a repacked layout: `n_rows` rows of `k` elements of `ty`, in groups of
/// [`ROWS`] rows.
#[derive(Debug)]
pub struct Repacked {
    pub kind: RepackKind,
    pub ty: GgmlType,
    pub n_rows: usize,
    pub k: usize,
    bytes: Vec<u8>,
}

impl Repacked {
    /// Bytes of the repacked layout.
    pub fn nbytes(&self) -> usize {
        self.bytes.len()
    }

    /// The repacked bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn group_bytes(&self) -> usize {
        self.k / self.kind.block_elems() * self.kind.group_block_bytes()
    }

    /// Bytes of the plain (ggml) layout the weight came from.
    pub fn plain_nbytes(&self) -> usize {
        self.n_rows * (self.k / self.kind.block_elems()) * self.kind.plain_block_bytes()
    }

    /// Writes the plain (ggml) layout back into `dst` ([`Self::plain_nbytes`] bytes), byte for
    /// byte the bytes [`repack`] was given: the layouts only move bytes, and the Q4_K scales
    /// unpacked from their 6-bit fields pack back into the same 12 bytes (all 96 bits are
    /// scales or mins). Lets an owned load keep only the repacked copy (as upstream's
    /// `CPU_REPACK` buffer) and still hand out the tensor's bytes.
    pub fn unrepack_into(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.plain_nbytes(), "plain layout size");
        let block = self.kind.plain_block_bytes();
        let row = self.k / self.kind.block_elems() * block;
        let groups = dst.chunks_exact_mut(ROWS * row);
        for (rows, packed) in groups.zip(self.bytes.chunks_exact(self.group_bytes())) {
            let blocks = packed.chunks_exact(self.kind.group_block_bytes());
            for (b, blk) in blocks.enumerate() {
                for r in 0..ROWS {
                    self.kind
                        .unpack_row(blk, r, &mut rows[r * row + b * block..][..block]);
                }
            }
        }
    }
}

/// Where row `r`'s 8 quant bytes of half `half` (of the block's 16) sit in a `Q4_0x8` /
/// `Iq4NlX8` group block: after the 8 scales, half-major, row-minor.
fn q4_0x8_quants_at(half: usize, r: usize) -> usize {
    2 * ROWS + 8 * (half * ROWS + r)
}

/// Row `r`'s Q4_K block out of one `Q4Kx8` block (the inverse of [`pack_q4_kx8_row`]).
fn unpack_q4_kx8_row(blk: &[u8], r: usize, out: &mut [u8]) {
    out[0..2].copy_from_slice(&blk[2 * r..2 * r + 2]);
    out[2..4].copy_from_slice(&blk[16 + 2 * r..16 + 2 * r + 2]);
    let sc = |sub: usize| blk[32 + sub * ROWS + r];
    let mn = |sub: usize| blk[96 + sub * ROWS + r];
    let q = &mut out[4..16];
    for j in 0..4 {
        q[j] = (sc(j) & 63) | ((sc(j + 4) >> 4) << 6);
        q[j + 4] = (mn(j) & 63) | ((mn(j + 4) >> 4) << 6);
        q[j + 8] = (sc(j + 4) & 0xF) | ((mn(j + 4) & 0xF) << 4);
    }
    for c in 0..4 {
        for p in 0..4 {
            let at = 160 + ((4 * c + p) * ROWS + r) * 8;
            let to = 16 + 32 * c + 8 * p;
            out[to..to + 8].copy_from_slice(&blk[at..at + 8]);
        }
    }
}

/// The layout upstream's `ggml_repack_get_optimal_repack_type` picks for a weight of type
/// `t` and shape `ne` on this CPU, when the weight feeds MUL_MAT (2-D): `q4_0_8x8_q8_0`,
/// `iq4_nl_8x8_q8_0` and `q4_K_8x8_q8_K` for Q4_0, IQ4_NL and Q4_K with a multiple of 8 rows,
/// on a CPU with AVX2 (off with `LLAMA_HOTSWAP_KERNELS=scalar`,
/// as upstream's generic build does not repack).
pub fn repack_kind(t: GgmlType, ne: [i64; 4]) -> Option<RepackKind> {
    if !simd() || ne[2] != 1 || ne[3] != 1 || ne[1] <= 0 || ne[1] % ROWS as i64 != 0 {
        return None;
    }
    match t {
        GgmlType::Q4_0 if ne[0] > 0 && ne[0] % QK as i64 == 0 => Some(RepackKind::Q4_0x8),
        GgmlType::IQ4_NL if ne[0] > 0 && ne[0] % QK as i64 == 0 => Some(RepackKind::Iq4NlX8),
        GgmlType::Q4_K if ne[0] > 0 && ne[0] % QK_K as i64 == 0 => Some(RepackKind::Q4Kx8),
        _ => None,
    }
}

fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    return super::x86::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Repacks `n_rows` rows of `k` elements of `t` (ggml layout, `src`) into `kind`'s layout.
/// Panics if `src` is short or the shape does not fit the layout.
pub fn repack(kind: RepackKind, t: GgmlType, src: &[u8], n_rows: usize, k: usize) -> Repacked {
    assert!(
        t == kind.plain_type() && n_rows % ROWS == 0 && k % kind.block_elems() == 0,
        "{t} [{k}, {n_rows}] does not repack as {kind:?}"
    );
    let nb = k / kind.block_elems();
    let block = kind.plain_block_bytes();
    let row = nb * block;
    assert!(src.len() >= n_rows * row, "{t} weight: {} bytes", src.len());
    let group_block = kind.group_block_bytes();
    let mut bytes = vec![0u8; n_rows / ROWS * nb * group_block];
    for (g, packed) in bytes.chunks_exact_mut(nb * group_block).enumerate() {
        let rows = &src[g * ROWS * row..(g + 1) * ROWS * row];
        for (b, blk) in packed.chunks_exact_mut(group_block).enumerate() {
            for r in 0..ROWS {
                kind.pack_row(r, &rows[r * row + b * block..][..block], blk);
            }
        }
    }
    Repacked {
        kind,
        ty: t,
        n_rows,
        k,
        bytes,
    }
}

/// Row `r`'s Q4_K block `inb` into its places in one `Q4Kx8` block.
fn pack_q4_kx8_row(r: usize, inb: &[u8], blk: &mut [u8]) {
    blk[2 * r..2 * r + 2].copy_from_slice(&inb[0..2]);
    blk[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&inb[2..4]);
    for sub in 0..8 {
        let (sc, mn) = scale_min_k4(sub, &inb[4..16]);
        blk[32 + sub * ROWS + r] = sc;
        blk[96 + sub * ROWS + r] = mn;
    }
    for c in 0..4 {
        for p in 0..4 {
            let at = 160 + ((4 * c + p) * ROWS + r) * 8;
            let from = 16 + 32 * c + 8 * p;
            blk[at..at + 8].copy_from_slice(&inb[from..from + 8]);
        }
    }
}

/// The f32 outputs of one row group for `C` activation rows. `meta` holds, per activation
/// row and block, the block's f32 scale (bits) and `8 · Σ x` ([`fill_meta`]).
pub type GroupFn<const C: usize> =
    fn(nb: usize, w: &[u8], x: [&[u8]; C], meta: [&[u32]; C], out: &mut [[f32; ROWS]; C]);

/// The kernels for a row group: 1 and 4 activation rows (upstream's gemv and gemm).
#[derive(Clone, Copy)]
pub struct GroupKernels {
    one: GroupFn<1>,
    four: GroupFn<4>,
}

/// The scalar reference kernels (the float order of the SIMD ones, with `f32::mul_add`).
pub fn scalar_kernels(kind: RepackKind) -> GroupKernels {
    match kind {
        RepackKind::Q4_0x8 => GroupKernels {
            one: group_scalar::<1, false>,
            four: group_scalar::<4, false>,
        },
        RepackKind::Iq4NlX8 => GroupKernels {
            one: group_scalar::<1, true>,
            four: group_scalar::<4, true>,
        },
        RepackKind::Q4Kx8 => GroupKernels {
            one: q4_kx8_scalar::<1, false>,
            four: q4_kx8_scalar::<4, true>,
        },
    }
}

/// The scalar Q4Kx8 kernel in upstream's float order: its gemv (`PER_SB` false) sums a
/// whole super-block's integers, `acc = fma(Σ scale·dot, d·dx, acc)` and
/// `acc_min = fma(Σ min·bsum, dmin·dx, acc_min)` once per super-block; its gemm (`PER_SB`)
/// makes those two FMAs per pair of sub-blocks. The result is `acc - acc_min`.
fn q4_kx8_scalar<const C: usize, const PER_SB: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    _meta: [&[u32]; C],
    out: &mut [[f32; ROWS]; C],
) {
    assert!(w.len() >= nb * Q4KX8_BYTES && x.iter().all(|x| x.len() >= nb * Q8_K_BYTES));
    let mut acc = [[0f32; ROWS]; C];
    let mut accm = [[0f32; ROWS]; C];
    for b in 0..nb {
        let blk = &w[b * Q4KX8_BYTES..(b + 1) * Q4KX8_BYTES];
        for c in 0..C {
            let xb = &x[c][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
            let dx = f32_at(xb, 0);
            let q = |e: usize| i32::from(xb[4 + e] as i8);
            let bsum = |sub: usize| (32 * sub..32 * sub + 32).map(q).sum::<i32>();
            for r in 0..ROWS {
                let (dw, dm) = (f16_at(blk, 2 * r), f16_at(blk, 16 + 2 * r));
                let (mut isum_b, mut imin_b) = (0i32, 0i32);
                for sb in 0..4 {
                    let (mut isum, mut imin) = (0i32, 0i32);
                    for hi in 0..2 {
                        let sub = 2 * sb + hi;
                        let mut dot = 0i32;
                        for p in 0..4 {
                            let at = 160 + ((4 * sb + p) * ROWS + r) * 8;
                            for j in 0..8 {
                                let nib = if hi == 0 {
                                    blk[at + j] & 0xF
                                } else {
                                    blk[at + j] >> 4
                                };
                                dot += i32::from(nib) * q(64 * sb + 32 * hi + 8 * p + j);
                            }
                        }
                        isum += i32::from(blk[32 + sub * ROWS + r]) * dot;
                        imin += i32::from(blk[96 + sub * ROWS + r]) * bsum(sub);
                    }
                    if PER_SB {
                        acc[c][r] = (isum as f32).mul_add(dw * dx, acc[c][r]);
                        accm[c][r] = (imin as f32).mul_add(dm * dx, accm[c][r]);
                    } else {
                        isum_b += isum;
                        imin_b += imin;
                    }
                }
                if !PER_SB {
                    acc[c][r] = (isum_b as f32).mul_add(dw * dx, acc[c][r]);
                    accm[c][r] = (imin_b as f32).mul_add(dm * dx, accm[c][r]);
                }
            }
        }
    }
    for c in 0..C {
        for r in 0..ROWS {
            out[c][r] = acc[c][r] - accm[c][r];
        }
    }
}

/// The fastest kernels on this CPU (AVX2 when present, else the scalar reference).
pub fn kernels(kind: RepackKind) -> GroupKernels {
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = super::x86::repacked_kernels(kind) {
        return k;
    }
    scalar_kernels(kind)
}

impl GroupKernels {
    pub(super) fn from_parts(one: GroupFn<1>, four: GroupFn<4>) -> GroupKernels {
        GroupKernels { one, four }
    }
}

/// Per activation row and block: the f16 scale as f32 bits and `8 · Σ x` (the Q4_0 offset
/// term), computed once per product instead of once per row group.
pub fn fill_meta(kind: RepackKind, act: &Activations<'_>, meta: &mut Vec<u32>) {
    meta.clear();
    if kind == RepackKind::Q4Kx8 {
        // the Q8_K scale, then the sums of the 8 sub-blocks of 32
        let nb = act.k() / QK_K;
        meta.reserve(act.m() * nb * 9);
        for j in 0..act.m() {
            let row = act.row(j);
            for b in 0..nb {
                let blk = &row[b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
                meta.push(f32_at(blk, 0).to_bits());
                for sub in 0..8 {
                    let s = |i: usize| i32::from(i16_at(blk, 4 + QK_K + 2 * i));
                    meta.push((s(2 * sub) + s(2 * sub + 1)) as u32);
                }
            }
        }
        return;
    }
    let nb = act.k() / QK;
    meta.reserve(act.m() * nb * 2);
    for j in 0..act.m() {
        let row = act.row(j);
        for b in 0..nb {
            let blk = &row[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let sum: i32 = blk[2..].iter().map(|&q| i32::from(q as i8)).sum();
            meta.push(f16_at(blk, 0).to_bits());
            meta.push((8 * sum) as u32);
        }
    }
}

/// The scalar group kernel: nibbles are `n - 8` (Q4_0) or `KVALUES_IQ4NL[n]` (`IQ4`).
fn group_scalar<const C: usize, const IQ4: bool>(
    nb: usize,
    w: &[u8],
    x: [&[u8]; C],
    _meta: [&[u32]; C],
    out: &mut [[f32; ROWS]; C],
) {
    let blk_bytes = ROWS * Q4_0_BYTES;
    assert!(w.len() >= nb * blk_bytes && x.iter().all(|x| x.len() >= nb * Q8_0_BYTES));
    let mut acc = [[0f32; ROWS]; C];
    for b in 0..nb {
        let blk = &w[b * blk_bytes..(b + 1) * blk_bytes];
        for c in 0..C {
            let xb = &x[c][b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let dx = f16_at(xb, 0);
            let q = |e: usize| i32::from(xb[2 + e] as i8);
            for r in 0..ROWS {
                let mut isum = 0i32;
                for half in 0..2 {
                    let bytes = &blk[2 * ROWS + 8 * (half * ROWS + r)..][..8];
                    for (j, &byte) in bytes.iter().enumerate() {
                        let e = 8 * half + j;
                        let v = |n: u8| {
                            if IQ4 {
                                i32::from(KVALUES_IQ4NL[usize::from(n)])
                            } else {
                                i32::from(n) - 8
                            }
                        };
                        isum += v(byte & 0xF) * q(e);
                        isum += v(byte >> 4) * q(e + 16);
                    }
                }
                let dw = f16_at(blk, 2 * r);
                acc[c][r] = (isum as f32).mul_add(dw * dx, acc[c][r]);
            }
        }
    }
    *out = acc;
}

/// [`mul_mat_repacked`] with explicit kernels (tests run the scalar and SIMD ones).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked_with(
    kernels: GroupKernels,
    w: &Repacked,
    act: &Activations<'_>,
    meta: &[u32],
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
) {
    assert_eq!(
        act.vec_dot_type(),
        super::vec_dot_type(w.ty),
        "activations for {}",
        w.ty
    );
    assert_eq!(
        act.k(),
        w.k,
        "activations of {} for a weight of {}",
        act.k(),
        w.k
    );
    let (m, n_rows) = (act.m(), w.n_rows);
    if m == 0 || n_rows == 0 {
        return;
    }
    assert!(
        m == 1 || dst_row_offset + n_rows <= dst_stride,
        "dst rows overlap"
    );
    let need = (m - 1) * dst_stride + dst_row_offset + n_rows;
    assert!(dst.len() >= need, "dst: {} values, needs {need}", dst.len());
    let nb = w.k / w.kind.block_elems();
    let mw = w.kind.meta_words();
    assert!(
        meta.len() >= m * nb * mw,
        "meta of {} for {m} rows",
        meta.len()
    );
    let meta_row = |j: usize| &meta[j * nb * mw..(j + 1) * nb * mw];
    let groups = n_rows / ROWS;
    let gbytes = w.group_bytes();
    // Four chunks per thread (as upstream's repacked MUL_MAT); every output's arithmetic is
    // the same whatever the chunking.
    let nth = pool.n_threads();
    let nchunk = groups.min(nth * 4).max(1);
    let per = groups.div_ceil(nchunk);
    let nchunk = groups.div_ceil(per);
    let out = SharedOut::new(dst);
    let store = |col: usize, g: usize, vals: &[f32; ROWS]| {
        let at = col * dst_stride + dst_row_offset + g * ROWS;
        // SAFETY: (col, g) belongs to one task (groups are split among tasks, every task
        // covers all columns); the 8 indices are in bounds (checked above) and distinct per
        // (col, row); `dst` stays mutably borrowed until parallel_for returns.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), out.ptr().add(at), ROWS) };
    };
    let run = |task: usize, _thread: usize| {
        let (g0, g1) = (task * per, ((task + 1) * per).min(groups));
        for g in g0..g1 {
            let wg = &w.bytes[g * gbytes..(g + 1) * gbytes];
            let mut col = 0;
            while col + 4 <= m {
                let mut vals = [[0f32; ROWS]; 4];
                let x = [
                    act.row(col),
                    act.row(col + 1),
                    act.row(col + 2),
                    act.row(col + 3),
                ];
                let mt = [
                    meta_row(col),
                    meta_row(col + 1),
                    meta_row(col + 2),
                    meta_row(col + 3),
                ];
                (kernels.four)(nb, wg, x, mt, &mut vals);
                for (c, v) in vals.iter().enumerate() {
                    store(col + c, g, v);
                }
                col += 4;
            }
            while col < m {
                let mut vals = [[0f32; ROWS]; 1];
                (kernels.one)(nb, wg, [act.row(col)], [meta_row(col)], &mut vals);
                store(col, g, &vals[0]);
                col += 1;
            }
        }
    };
    pool.parallel_for(nchunk, &run);
}

/// ggml's MUL_MAT with a repacked weight: `dst[j * dst_stride + dst_row_offset + i] =
/// w row i · x row j` for the weight's rows and the `m` f32 rows of `x` (converted to Q8_0
/// first, as for the plain weight).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked(
    w: &Repacked,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    mul_mat_repacked_using(
        kernels(w.kind),
        w,
        x,
        m,
        dst,
        dst_stride,
        dst_row_offset,
        pool,
        scratch,
    )
}

/// [`mul_mat_repacked`] with explicit kernels (tests run the scalar and SIMD ones).
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_repacked_using(
    kernels: GroupKernels,
    w: &Repacked,
    x: &[f32],
    m: usize,
    dst: &mut [f32],
    dst_stride: usize,
    dst_row_offset: usize,
    pool: &ThreadPool,
    scratch: &mut Scratch,
) {
    let mut meta = std::mem::take(&mut scratch.repack_meta);
    {
        let _ = super::prepare_activations(w.ty, x, w.k, m, pool, scratch);
        if w.kind == RepackKind::Q4Kx8 {
            // rows in groups of 4 take upstream's `quantize_mat_q8_K_4x8` (see below)
            let row = super::row_bytes(GgmlType::Q8_K, w.k);
            for j in 0..m - m % 4 {
                let dst = &mut scratch.activations[j * row..(j + 1) * row];
                q8_k_mat_fixup(&x[j * w.k..(j + 1) * w.k], dst);
            }
        }
        let act = super::prepare_activations_done(w.ty, x, w.k, m, scratch);
        fill_meta(w.kind, &act, &mut meta);
        mul_mat_repacked_with(
            kernels,
            w,
            &act,
            &meta,
            dst,
            dst_stride,
            dst_row_offset,
            pool,
        );
    }
    scratch.repack_meta = meta;
}

/// Upstream's `quantize_mat_q8_K_4x8` (the activations of its repacked Q4_K gemm) differs from
/// `quantize_row_q8_K` in one case: when a super-block's largest magnitude occurs with both
/// signs, the row quantizer keeps the sign of its first occurrence, the 4-row one takes the
/// positive (scale `-127 / amax`). Re-quantizes such blocks of a row made by the former.
pub fn q8_k_mat_fixup(x: &[f32], dst: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let (max, amax) = super::quantize::q8_k_extreme(xb);
        if max < 0.0 && xb.contains(&amax) {
            super::quantize::q8_k_block(xb, yb, -127.0 / amax);
        }
    }
}

#[cfg(test)]
mod unrepack_tests {
    use super::*;

    /// Every byte pattern (scales, quants, the Q4_K 6-bit fields) comes back unchanged.
    #[test]
    fn unrepack_gives_back_the_bytes_repack_was_given() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        };
        for (kind, ty, block, elems) in [
            (RepackKind::Q4_0x8, GgmlType::Q4_0, Q4_0_BYTES, QK),
            (RepackKind::Iq4NlX8, GgmlType::IQ4_NL, Q4_0_BYTES, QK),
            (RepackKind::Q4Kx8, GgmlType::Q4_K, Q4_K_BYTES, QK_K),
        ] {
            let (n_rows, nb) = (16, 3);
            let src: Vec<u8> = (0..n_rows * nb * block).map(|_| next()).collect();
            let packed = repack(kind, ty, &src, n_rows, nb * elems);
            assert_eq!(packed.plain_nbytes(), src.len(), "{kind:?}");
            let mut back = vec![0u8; src.len()];
            packed.unrepack_into(&mut back);
            assert!(back == src, "{kind:?}: the plain bytes come back");
        }
    }
}
