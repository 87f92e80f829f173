//! The repacked weight layouts (upstream's `block_q4_0x8` and kin): 8 rows interleaved per
//! block group, the repacking and unpacking of rows, and the kernel signatures over them.

use crate::gguf::GgmlType;
use crate::kernels::cpu::blocks::*;

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
    pub(in crate::kernels::cpu) fn block_elems(self) -> usize {
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
    pub(in crate::kernels::cpu) fn meta_words(self) -> usize {
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
    pub(in crate::kernels::cpu) bytes: Vec<u8>,
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

    pub(in crate::kernels::cpu) fn group_bytes(&self) -> usize {
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
    pub(in crate::kernels::cpu) one: GroupFn<1>,
    pub(in crate::kernels::cpu) four: GroupFn<4>,
}

impl GroupKernels {
    pub(in crate::kernels::cpu) fn from_parts(one: GroupFn<1>, four: GroupFn<4>) -> GroupKernels {
        GroupKernels { one, four }
    }
}
