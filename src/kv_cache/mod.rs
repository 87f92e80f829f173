//! The KV cache, as upstream's `llama_kv_cache`: streams of cells (a position and a set of
//! sequence ids each, see [`cells`]) with a search head each, and per layer the cached keys
//! and values (F32, F16, or blocks of BF16/Q8_0/Q4_0/Q4_1), one row of `n_embd_k_gqa` /
//! `n_embd_v_gqa` values per cell.
//!
//! With `kv_unified = true` every sequence shares one stream of `n_ctx` cells; with
//! `kv_unified = false` (upstream's default) each sequence has its own stream of
//! `n_ctx_seq` cells: its tokens are placed, attended to, shifted and removed there only, a
//! full stream makes decode report "no slot" while others are empty, and `seq_cp` between
//! two sequences copies the stream. Sliding-window layers read the same cells through a
//! sliding-window mask (upstream's `swa_full = true` layout); slots are never reused while a
//! full-attention layer may still need them.

pub mod cells;
pub mod recurrent;
pub mod state;

use half::f16;

use crate::gguf::GgmlType;

pub use cells::{CellExt, KvCells, SeqSet, MAX_SEQ};
pub use recurrent::{RsGroup, RsMemory};

/// Element type of the cached keys or values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    F32,
    F16,
    /// Rows stored in ggml blocks of another type (BF16, Q8_0, Q4_0, Q4_1: see
    /// `kernels::cpu::is_kv_cache_type`), written as the CPU backend's SET_ROWS does.
    Packed(GgmlType),
}

/// Cached rows of one layer's keys or values.
#[derive(Debug)]
pub enum KvBuffer {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Rows of `width` values in blocks of `ty`.
    Packed {
        ty: GgmlType,
        row_bytes: usize,
        data: Vec<u8>,
    },
}

/// A KV cache that could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum KvAllocError {
    #[error("the KV cache size overflows (n_ctx and the layers' widths are too large)")]
    Overflow,
    #[error("failed to allocate {bytes} bytes for the KV cache")]
    OutOfMemory { bytes: u64 },
}

/// A zero-filled vector of `len` values, or the error when it cannot be allocated (never an
/// abort: the allocation is fallible, the fill happens only once it succeeded).
fn zeroed<T: Copy>(len: usize, zero: T) -> Result<Vec<T>, KvAllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| KvAllocError::OutOfMemory {
            bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        })?;
    v.resize(len, zero);
    Ok(v)
}

impl KvBuffer {
    /// Bytes of one row of `width` values; None on overflow (sizes are checked before any
    /// allocation, so a hostile width must not overflow here either).
    fn row_bytes(ty: KvType, width: usize) -> Option<usize> {
        match ty {
            KvType::F32 => width.checked_mul(4),
            KvType::F16 => width.checked_mul(2),
            KvType::Packed(ty) => Some(crate::kernels::cpu::row_bytes(ty, width)),
        }
    }

    fn new(ty: KvType, rows: usize, width: usize) -> Result<KvBuffer, KvAllocError> {
        let len = rows.checked_mul(width).ok_or(KvAllocError::Overflow)?;
        Ok(match ty {
            KvType::F32 => KvBuffer::F32(zeroed(len, 0.0)?),
            KvType::F16 => KvBuffer::F16(zeroed(len, f16::ZERO)?),
            KvType::Packed(ty) => {
                let row_bytes = crate::kernels::cpu::row_bytes(ty, width);
                let n = rows.checked_mul(row_bytes).ok_or(KvAllocError::Overflow)?;
                KvBuffer::Packed {
                    ty,
                    row_bytes,
                    data: zeroed(n, 0u8)?,
                }
            }
        })
    }

    /// Stores `src` as row `cell` (rows of `src.len()` values).
    pub fn set_row(&mut self, cell: usize, src: &[f32]) {
        let n = src.len();
        match self {
            KvBuffer::F32(v) => v[cell * n..(cell + 1) * n].copy_from_slice(src),
            KvBuffer::F16(v) => {
                for (d, s) in v[cell * n..(cell + 1) * n].iter_mut().zip(src) {
                    *d = f16::from_f32(*s);
                }
            }
            KvBuffer::Packed {
                ty,
                row_bytes,
                data,
            } => crate::kernels::cpu::store_row(
                *ty,
                src,
                &mut data[cell * *row_bytes..(cell + 1) * *row_bytes],
            ),
        }
    }

    /// Stores `src` as values `off..off + src.len()` of row `cell` (rows of `width` values),
    /// the rest of the row as it is (a block type: `off` and the length whole blocks).
    pub fn set_row_part(&mut self, cell: usize, width: usize, off: usize, src: &[f32]) {
        let at = cell * width + off;
        match self {
            KvBuffer::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            KvBuffer::F16(v) => {
                for (d, s) in v[at..at + src.len()].iter_mut().zip(src) {
                    *d = f16::from_f32(*s);
                }
            }
            KvBuffer::Packed {
                ty,
                row_bytes,
                data,
            } => {
                let start = cell * *row_bytes + crate::kernels::cpu::row_bytes(*ty, off);
                let n = crate::kernels::cpu::row_bytes(*ty, src.len());
                crate::kernels::cpu::store_row(*ty, src, &mut data[start..start + n]);
            }
        }
    }

    /// Reads row `cell` (rows of `dst.len()` values) as f32.
    pub fn get_row(&self, cell: usize, dst: &mut [f32]) {
        let n = dst.len();
        match self {
            KvBuffer::F32(v) => dst.copy_from_slice(&v[cell * n..(cell + 1) * n]),
            KvBuffer::F16(v) => {
                for (d, s) in dst.iter_mut().zip(&v[cell * n..(cell + 1) * n]) {
                    *d = s.to_f32();
                }
            }
            KvBuffer::Packed {
                ty,
                row_bytes,
                data,
            } => crate::kernels::cpu::dequantize_row(
                *ty,
                &data[cell * *row_bytes..(cell + 1) * *row_bytes],
                dst,
            ),
        }
    }

    /// Stores `src` bit for bit as row `cell` of a layer `2 * src.len()` wide (F32 values
    /// kept exact in any F32 or F16 buffer: an F16 buffer holds each value's two 16-bit
    /// halves). False for block types. DeepSeek-V4's compressor inputs, which upstream keeps
    /// in F32 whatever the cache's type.
    pub fn set_row_exact(&mut self, cell: usize, src: &[f32]) -> bool {
        let w = 2 * src.len();
        match self {
            KvBuffer::F32(v) => v[cell * w..cell * w + src.len()].copy_from_slice(src),
            KvBuffer::F16(v) => {
                for (d, s) in v[cell * w..(cell + 1) * w].chunks_exact_mut(2).zip(src) {
                    let b = s.to_bits();
                    d[0] = f16::from_bits(b as u16);
                    d[1] = f16::from_bits((b >> 16) as u16);
                }
            }
            KvBuffer::Packed { .. } => return false,
        }
        true
    }

    /// Reads a row [`KvBuffer::set_row_exact`] stored.
    pub fn get_row_exact(&self, cell: usize, dst: &mut [f32]) -> bool {
        let w = 2 * dst.len();
        match self {
            KvBuffer::F32(v) => dst.copy_from_slice(&v[cell * w..cell * w + dst.len()]),
            KvBuffer::F16(v) => {
                for (d, s) in dst
                    .iter_mut()
                    .zip(v[cell * w..(cell + 1) * w].chunks_exact(2))
                {
                    *d =
                        f32::from_bits(u32::from(s[0].to_bits()) | u32::from(s[1].to_bits()) << 16);
                }
            }
            KvBuffer::Packed { .. } => return false,
        }
        true
    }

    /// Row `cell` (rows of `n` values) in half precision, when the buffer is F16.
    pub fn row_f16(&self, cell: usize, n: usize) -> Option<&[f16]> {
        match self {
            KvBuffer::F16(v) => Some(&v[cell * n..(cell + 1) * n]),
            _ => None,
        }
    }

    /// Copies rows `from .. from + n` (rows of `width` values) over rows `to .. to + n`.
    pub fn copy_rows(&mut self, from: usize, to: usize, n: usize, width: usize) {
        match self {
            KvBuffer::F32(v) => v.copy_within(from * width..(from + n) * width, to * width),
            KvBuffer::F16(v) => v.copy_within(from * width..(from + n) * width, to * width),
            KvBuffer::Packed {
                row_bytes, data, ..
            } => {
                let rb = *row_bytes;
                data.copy_within(from * rb..(from + n) * rb, to * rb)
            }
        }
    }

    /// Appends rows `from .. from + n` (rows of `width` values) in ggml's byte layout
    /// (little-endian values, or the blocks as stored).
    pub fn append_row_bytes(&self, from: usize, n: usize, width: usize, out: &mut Vec<u8>) {
        match self {
            KvBuffer::F32(v) => {
                for x in &v[from * width..(from + n) * width] {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            KvBuffer::F16(v) => {
                for x in &v[from * width..(from + n) * width] {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            KvBuffer::Packed {
                row_bytes, data, ..
            } => out.extend_from_slice(&data[from * row_bytes..(from + n) * row_bytes]),
        }
    }

    /// Appends value `col` of rows `from .. from + n` (rows of `width` values): a column,
    /// as upstream's transposed V cache holds it. A block type must hold one value per block.
    pub fn append_col_bytes(
        &self,
        col: usize,
        from: usize,
        n: usize,
        width: usize,
        out: &mut Vec<u8>,
    ) {
        match self {
            KvBuffer::F32(v) => {
                for r in from..from + n {
                    out.extend_from_slice(&v[r * width + col].to_le_bytes());
                }
            }
            KvBuffer::F16(v) => {
                for r in from..from + n {
                    out.extend_from_slice(&v[r * width + col].to_le_bytes());
                }
            }
            KvBuffer::Packed {
                ty,
                row_bytes,
                data,
            } => {
                let el = ty.type_size() as usize;
                debug_assert_eq!(ty.block_size(), 1);
                for r in from..from + n {
                    let at = r * row_bytes + col * el;
                    out.extend_from_slice(&data[at..at + el]);
                }
            }
        }
    }

    /// Overwrites row `row` (rows of `width` values) with `bytes`, one row in ggml's byte
    /// layout ([`KvBuffer::append_row_bytes`]).
    pub fn set_row_bytes(&mut self, row: usize, width: usize, bytes: &[u8]) {
        match self {
            KvBuffer::F32(v) => {
                for (d, b) in v[row * width..(row + 1) * width]
                    .iter_mut()
                    .zip(bytes.chunks_exact(4))
                {
                    *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            KvBuffer::F16(v) => {
                for (d, b) in v[row * width..(row + 1) * width]
                    .iter_mut()
                    .zip(bytes.chunks_exact(2))
                {
                    *d = f16::from_le_bytes([b[0], b[1]]);
                }
            }
            KvBuffer::Packed {
                row_bytes, data, ..
            } => {
                let rb = *row_bytes;
                data[row * rb..(row + 1) * rb].copy_from_slice(&bytes[..rb])
            }
        }
    }

    pub fn clear(&mut self) {
        match self {
            KvBuffer::F32(v) => v.fill(0.0),
            KvBuffer::F16(v) => v.fill(f16::ZERO),
            KvBuffer::Packed { data, .. } => data.fill(0),
        }
    }
}

/// One layer's K or V rows with their width, for the attention kernel.
pub struct KvLayerRows<'a> {
    pub buf: &'a KvBuffer,
    pub width: usize,
    /// Attention reads an F32 buffer rounded to F16 (upstream's cast before flash attention).
    pub cast_f16: bool,
}

impl crate::kernels::cpu::ops::KvRows for KvLayerRows<'_> {
    fn read(&self, cell: usize, off: usize, dst: &mut [f32]) {
        let start = cell * self.width + off;
        let n = dst.len();
        match self.buf {
            KvBuffer::F32(v) => dst.copy_from_slice(&v[start..start + n]),
            KvBuffer::F16(v) => {
                for (d, s) in dst.iter_mut().zip(&v[start..start + n]) {
                    *d = s.to_f32();
                }
            }
            KvBuffer::Packed { .. } => {
                let (ty, bytes) = self.packed(cell, off, n).expect("a packed buffer");
                crate::kernels::cpu::dequantize_row(ty, bytes, dst);
            }
        }
    }
    fn half(&self, cell: usize, off: usize, len: usize) -> Option<&[f16]> {
        let start = cell * self.width + off;
        match self.buf {
            KvBuffer::F16(v) => Some(&v[start..start + len]),
            _ => None,
        }
    }
    fn packed(&self, cell: usize, off: usize, len: usize) -> Option<(GgmlType, &[u8])> {
        match self.buf {
            KvBuffer::Packed {
                ty,
                row_bytes,
                data,
            } => {
                let start = cell * row_bytes + crate::kernels::cpu::row_bytes(*ty, off);
                let n = crate::kernels::cpu::row_bytes(*ty, len);
                Some((*ty, &data[start..start + n]))
            }
            _ => None,
        }
    }
    fn is_f16(&self) -> bool {
        matches!(self.buf, KvBuffer::F16(_))
    }
    fn cast_f16(&self) -> bool {
        self.cast_f16 && matches!(self.buf, KvBuffer::F32(_))
    }
}

/// One layer's cache.
#[derive(Debug)]
pub struct KvLayer {
    pub k: KvBuffer,
    pub v: KvBuffer,
    pub n_embd_k: usize,
    pub n_embd_v: usize,
}

/// Shape of the cache: cells per stream, streams and, per layer, the K and V row widths.
#[derive(Clone, Debug)]
pub struct KvShape {
    /// Cells per stream (upstream's `kv_size`: `n_ctx` when unified, else `n_ctx_seq`).
    pub size: u32,
    /// Sequence ids are below this (at most [`MAX_SEQ`]).
    pub n_seq_max: usize,
    /// One stream shared by every sequence (`kv_unified`), else one stream per sequence.
    pub unified: bool,
    pub type_k: KvType,
    pub type_v: KvType,
    pub layers: Vec<(usize, usize)>,
}

impl KvType {
    /// ggml's type id (`enum ggml_type`).
    pub fn ggml_id(self) -> i32 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
            KvType::Packed(ty) => ty.id() as i32,
        }
    }

    /// Bytes of one element (of one block for block types): `ggml_type_size`.
    pub fn type_size(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
            KvType::Packed(ty) => ty.type_size() as usize,
        }
    }

    /// Values per block (1 for F32, F16, BF16).
    pub fn block_size(self) -> usize {
        match self {
            KvType::F32 | KvType::F16 => 1,
            KvType::Packed(ty) => ty.block_size() as usize,
        }
    }

    /// Bytes of one cached row of `width` values.
    pub fn row_bytes(self, width: usize) -> usize {
        match self {
            KvType::F32 => 4 * width,
            KvType::F16 => 2 * width,
            KvType::Packed(ty) => crate::kernels::cpu::row_bytes(ty, width),
        }
    }
}

impl KvShape {
    /// Bytes the cache of this shape holds: every layer's K and V rows, every stream
    /// (`u64::MAX` when that overflows; [`KvShape::checked_bytes`] says so).
    pub fn bytes(&self) -> u64 {
        self.checked_bytes().unwrap_or(u64::MAX)
    }
}

/// The cells of one stream and the head where the next slot search starts.
#[derive(Clone, Debug)]
pub struct KvStream {
    pub cells: KvCells,
    head: u32,
}

/// Why a memory operation was refused (upstream asserts in these cases).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

/// The KV cache, as upstream's `llama_kv_cache`: `n_stream` streams of `size` cells each (one
/// stream when unified, else one per sequence: sequence `s` lives in stream `s`). The K and V
/// buffers of a layer hold every stream's rows, stream after stream: the cell `i` of stream
/// `s` is row `s * size + i` (a "row" below).
#[derive(Debug)]
pub struct KvCache {
    streams: Vec<KvStream>,
    /// Stream of each sequence id a memory operation accepts: [`MAX_SEQ`] ids mapping to
    /// stream 0 with one stream, `n_seq_max` ids mapping to themselves otherwise (upstream's
    /// `seq_to_stream`, whose length bounds the ids its memory operations accept).
    seq_to_stream: Vec<usize>,
    size: u32,
    /// Sequence ids below this are the context's (`n_seq_max`, at most [`MAX_SEQ`]).
    n_seq_max: usize,
    pub layers: Vec<KvLayer>,
    pub type_k: KvType,
    pub type_v: KvType,
    /// Whether positions may be shifted (`seq_add`/`seq_div`; false for M-RoPE archs).
    pub can_shift: bool,
    /// The recurrent states of a recurrent or hybrid model (upstream's
    /// `llama_memory_recurrent`, beside the KV cells in a `llama_memory_hybrid`).
    pub rs: Option<RsMemory>,
    /// Whether the KV cells take part (false for a recurrent model: upstream has no KV
    /// cache there, the memory API answers from the recurrent states alone).
    pub attn: bool,
    /// Whole-stream copies (source stream, destination stream) of `seq_cp` across streams
    /// since the last decode, in order: the host rows are copied at once, a backend keeping
    /// rows in its own memory copies them before the next decode (as upstream defers it).
    pub stream_copies: Vec<(usize, usize)>,
    /// GLM5-Next's k-pool indexer (upstream's `llama_memory_hybrid_idx`): cells pooled into
    /// one key (0: none). Its pooled keys are kept in the indexer layers' rows.
    pub kpool: usize,
    /// Per sequence, the first position whose pools an edit may have regrouped since the
    /// last micro-batch ([`POOLS_CLEAN`]: none; upstream's `mem_idx_stale`): the next
    /// micro-batch pools them again.
    pub pools_stale: Vec<i32>,
}

/// No pool of the sequence is stale (upstream's `POS_CLEAN`).
pub const POOLS_CLEAN: i32 = i32::MAX;

impl KvShape {
    /// Streams the cache holds (one when unified, else one per sequence).
    fn n_stream(&self) -> usize {
        if self.unified {
            1
        } else {
            self.n_seq_max.clamp(1, MAX_SEQ)
        }
    }

    /// Bytes of every layer's K and V rows (upstream's KV buffer size); None on overflow.
    pub fn checked_bytes(&self) -> Option<u64> {
        let rows = u64::from(self.size).checked_mul(self.n_stream() as u64)?;
        self.layers.iter().try_fold(0u64, |total, &(nk, nv)| {
            let row = (KvBuffer::row_bytes(self.type_k, nk)? as u64)
                .checked_add(KvBuffer::row_bytes(self.type_v, nv)? as u64)?;
            total.checked_add(rows.checked_mul(row)?)
        })
    }
}

impl KvShape {
    /// Bytes the whole cache takes: [`KvShape::bytes`] and the cells' bookkeeping (position,
    /// sequence set, shift and a position-index entry per cell); None on overflow.
    pub fn memory_bytes(&self) -> Option<u64> {
        let rows = u64::from(self.size).checked_mul(self.n_stream() as u64)?;
        let per_cell = (4 + 4 + 8 + std::mem::size_of::<SeqSet>()) as u64;
        self.checked_bytes()?
            .checked_add(rows.checked_mul(per_cell)?)
    }
}

impl KvCache {
    /// A cache of `shape`, which must be small enough to allocate (tests and empty caches;
    /// contexts use [`KvCache::try_new`]).
    pub fn new(shape: &KvShape) -> KvCache {
        Self::try_new(shape).expect("a KV cache of this shape can be allocated")
    }

    /// A cache of `shape`, or why it cannot be allocated (sizes checked before any
    /// allocation; every allocation fallible).
    pub fn try_new(shape: &KvShape) -> Result<KvCache, KvAllocError> {
        shape.checked_bytes().ok_or(KvAllocError::Overflow)?;
        let n_seq_max = shape.n_seq_max.clamp(1, MAX_SEQ);
        let n_stream = shape.n_stream();
        let rows = (shape.size as usize)
            .checked_mul(n_stream)
            .ok_or(KvAllocError::Overflow)?;
        // the buffers first (fallible): the cells' bookkeeping is small beside them
        let layers = shape
            .layers
            .iter()
            .map(|&(nk, nv)| {
                Ok(KvLayer {
                    k: KvBuffer::new(shape.type_k, rows, nk)?,
                    v: KvBuffer::new(shape.type_v, rows, nv)?,
                    n_embd_k: nk,
                    n_embd_v: nv,
                })
            })
            .collect::<Result<Vec<_>, KvAllocError>>()?;
        let streams = (0..n_stream)
            .map(|s| KvStream {
                cells: if shape.unified {
                    KvCells::for_seqs(shape.size, 0..n_seq_max)
                } else {
                    KvCells::for_seqs(shape.size, s..s + 1)
                },
                head: 0,
            })
            .collect();
        // upstream keeps LLAMA_MAX_SEQ entries (all stream 0) whenever there is one stream,
        // also with kv_unified = false and n_seq_max = 1
        let seq_to_stream = if n_stream == 1 {
            vec![0; MAX_SEQ]
        } else {
            (0..n_seq_max).collect()
        };
        Ok(KvCache {
            streams,
            seq_to_stream,
            size: shape.size,
            n_seq_max,
            layers,
            type_k: shape.type_k,
            type_v: shape.type_v,
            can_shift: true,
            rs: None,
            attn: true,
            stream_copies: Vec::new(),
            kpool: 0,
            pools_stale: vec![POOLS_CLEAN; MAX_SEQ],
        })
    }

    /// Cells per stream (upstream's `get_size`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The context's `n_seq_max` (sequence ids below it are its own).
    pub fn n_seq_max(&self) -> usize {
        self.n_seq_max
    }

    pub fn n_stream(&self) -> usize {
        self.streams.len()
    }

    /// The stream of sequence `seq`; None for an id memory operations refuse.
    pub fn stream_of(&self, seq: usize) -> Option<usize> {
        self.seq_to_stream.get(seq).copied()
    }

    /// A caller's sequence id checked as upstream's memory operations assert it.
    pub fn check_seq(&self, seq_id: i32) -> Result<usize, KvError> {
        if seq_id < 0 || seq_id as usize >= self.seq_to_stream.len() {
            return Err(KvError(format!(
                "seq_id {seq_id} is outside [0, {}){}",
                self.seq_to_stream.len(),
                if self.streams.len() == 1 {
                    ""
                } else {
                    " (one KV stream per sequence, kv_unified = false)"
                }
            )));
        }
        Ok(seq_id as usize)
    }

    /// The cells of stream `s`.
    pub fn cells(&self, s: usize) -> &KvCells {
        &self.streams[s].cells
    }

    /// The cells of the stream of sequence `seq` (which must be an accepted id).
    fn seq_cells(&self, seq: usize) -> &KvCells {
        &self.streams[self.seq_to_stream[seq]].cells
    }

    /// Used cells over all streams.
    pub fn used(&self) -> u32 {
        self.streams.iter().map(|s| s.cells.used()).sum()
    }

    /// Empty cells of stream `s`: how many tokens can still be placed there.
    pub fn n_free(&self, s: usize) -> u32 {
        self.size - self.streams[s].cells.used()
    }

    /// Whether any stream has pending position shifts.
    pub fn has_shift(&self) -> bool {
        self.streams.iter().any(|s| s.cells.has_shift())
    }

    pub fn reset_shift(&mut self) {
        for s in &mut self.streams {
            s.cells.reset_shift();
        }
    }

    /// `llama_memory_clear`: empties every cell; `data` also zeroes the buffers.
    fn kv_clear(&mut self, data: bool) {
        for s in &mut self.streams {
            s.cells.reset();
            s.head = 0;
        }
        if data {
            for l in &mut self.layers {
                l.k.clear();
                l.v.clear();
            }
        }
    }

    /// `llama_memory_clear`: empties every cell (KV and recurrent); `data` also zeroes the
    /// buffers.
    pub fn clear(&mut self, data: bool) {
        self.pools_stale_from(None, 0);
        self.kv_clear(data);
        if let Some(rs) = &mut self.rs {
            rs.clear(data);
        }
    }

    /// `llama_memory_seq_rm`: removes `seq` (every sequence when None) from positions
    /// [p0, p1). A KV cache always succeeds; recurrent states are tried first and may refuse
    /// (false, nothing changed: upstream's hybrid memory does the same).
    pub fn seq_rm(&mut self, seq: Option<usize>, p0: i32, p1: i32) -> bool {
        if let Some(rs) = &mut self.rs {
            if !rs.seq_rm(seq.map_or(-1, |s| s as i32), p0, p1) {
                return false;
            }
            if !self.attn {
                return true;
            }
        }
        let stale = self.pools_stale_pos(seq, p0);
        let ok = self.kv_seq_rm(seq, p0, p1);
        self.pools_stale_from(seq, stale);
        // freed cells another sequence shared end that sharing: every sequence regroups
        if self.pools_shared() {
            self.pools_stale_from(None, 0);
        }
        ok
    }

    /// Where an edit of `seq` at `p0` makes its pools stale: from `p0`, or the whole sequence
    /// when the edit reaches its first position (pools count from it).
    fn pools_stale_pos(&self, seq: Option<usize>, p0: i32) -> i32 {
        match seq {
            Some(s) if self.kpool > 0 && p0 > self.kv_seq_pos_min(s) => p0,
            _ => 0,
        }
    }

    /// Marks the pools of `seq` (every sequence when None) stale from `p0` on.
    pub fn pools_stale_from(&mut self, seq: Option<usize>, p0: i32) {
        if self.kpool == 0 {
            return;
        }
        let p0 = p0.max(0);
        match seq {
            Some(s) => self.pools_stale[s] = self.pools_stale[s].min(p0),
            None => self.pools_stale.iter_mut().for_each(|p| *p = (*p).min(p0)),
        }
    }

    /// A micro-batch pooled what was stale.
    pub fn pools_clean(&mut self) {
        self.pools_stale.fill(POOLS_CLEAN);
    }

    /// Whether some cell of the one stream holds several sequences: the pooled keys are
    /// then not cached (upstream's `cache_safe` false).
    pub fn pools_shared(&self) -> bool {
        self.kpool > 0
            && self.streams.len() == 1
            && (0..self.size).any(|i| self.streams[0].cells.seq_count(i) > 1)
    }

    /// The cells of `seq` as (position, row) pairs in position order (then row order):
    /// upstream's `seq_pos` set, over the sequence's stream.
    pub fn seq_cells_by_pos(&self, seq: usize) -> Vec<(i32, u32)> {
        let st = self.seq_to_stream[seq];
        let cells = &self.streams[st].cells;
        let mut v: Vec<(i32, u32)> = (0..self.size)
            .filter(|&i| !cells.is_empty(i) && cells.seq_has(i, seq))
            .map(|i| (cells.pos(i), st as u32 * self.size + i))
            .collect();
        v.sort_unstable();
        v
    }

    /// `llama_memory_seq_cp` (see `kv_seq_cp`; recurrent states are shared whole).
    pub fn seq_cp(&mut self, src: usize, dst: usize, p0: i32, p1: i32) -> Result<(), KvError> {
        if self.attn {
            self.kv_seq_cp(src, dst, p0, p1)?;
        }
        // shared cells cannot hold two groupings
        self.pools_stale_from(Some(src), 0);
        self.pools_stale_from(Some(dst), 0);
        if let Some(rs) = &mut self.rs {
            rs.seq_cp(src as i32, dst as i32, p0, p1);
        }
        Ok(())
    }

    /// `llama_memory_seq_keep`.
    pub fn seq_keep(&mut self, seq: usize) {
        self.pools_stale_from(None, 0);
        if self.attn {
            self.kv_seq_keep(seq);
        }
        if let Some(rs) = &mut self.rs {
            rs.seq_keep(seq as i32);
        }
    }

    /// `llama_memory_seq_add` (a recurrent state only moves its recorded position).
    pub fn seq_add(&mut self, seq: usize, p0: i32, p1: i32, delta: i32) {
        // a negative shift moves cells below p0: they regroup too
        let stale = self.pools_stale_pos(Some(seq), if delta < 0 { p0 + delta } else { p0 });
        if self.attn {
            self.kv_seq_add(seq, p0, p1, delta);
        }
        self.pools_stale_from(Some(seq), stale);
        if let Some(rs) = &mut self.rs {
            rs.seq_add(seq as i32, p0, p1, delta);
        }
    }

    /// `llama_memory_seq_div`.
    pub fn seq_div(&mut self, seq: usize, p0: i32, p1: i32, d: i32) {
        self.pools_stale_from(Some(seq), 0);
        if self.attn {
            self.kv_seq_div(seq, p0, p1, d);
        }
        if let Some(rs) = &mut self.rs {
            rs.seq_div(seq as i32, p0, p1, d);
        }
    }

    /// `llama_memory_seq_pos_min`: with both memories, the larger of their minimums (as
    /// upstream's hybrid memory).
    pub fn seq_pos_min(&self, seq: usize) -> i32 {
        match (&self.rs, self.attn) {
            (None, _) => self.kv_seq_pos_min(seq),
            (Some(rs), false) => rs.seq_pos_min(seq as i32),
            (Some(rs), true) => self.kv_seq_pos_min(seq).max(rs.seq_pos_min(seq as i32)),
        }
    }

    /// `llama_memory_seq_pos_max`: with both memories, the smaller of their maximums.
    pub fn seq_pos_max(&self, seq: usize) -> i32 {
        match (&self.rs, self.attn) {
            (None, _) => self.kv_seq_pos_max(seq),
            (Some(rs), false) => rs.seq_pos_max(seq as i32),
            (Some(rs), true) => self.kv_seq_pos_max(seq).min(rs.seq_pos_max(seq as i32)),
        }
    }

    fn range(p0: i32, p1: i32) -> (i32, i32) {
        (p0.max(0), if p1 < 0 { i32::MAX } else { p1 })
    }

    /// `llama_memory_seq_rm`: removes `seq` (any sequence, in every stream, when None) from
    /// the cells with positions in [p0, p1). Always succeeds for a KV cache.
    fn kv_seq_rm(&mut self, seq: Option<usize>, p0: i32, p1: i32) -> bool {
        let (p0, p1) = Self::range(p0, p1);
        let size = self.size;
        let targets = match seq {
            Some(s) => {
                let st = self.seq_to_stream[s];
                st..st + 1
            }
            None => 0..self.streams.len(),
        };
        for st in targets {
            let stream = &mut self.streams[st];
            let cells = &mut stream.cells;
            let mut new_head = size;
            for i in 0..size {
                if !cells.pos_in(i, p0, p1) {
                    continue;
                }
                let freed = match seq {
                    Some(s) => cells.seq_has(i, s) && cells.seq_rm(i, s),
                    None => {
                        cells.rm(i);
                        true
                    }
                };
                if freed && new_head == size {
                    new_head = i;
                }
            }
            if new_head != size && new_head < stream.head {
                stream.head = new_head;
            }
        }
        true
    }

    /// `llama_memory_seq_cp`: adds `dst` to the cells of `src` with positions in [p0, p1)
    /// when both share a stream. Across streams, upstream copies the whole stream: the
    /// destination stream is emptied, gets every cell of `src` (position, pending shift)
    /// for `dst`, the source's head and a copy of the source stream's K and V rows (upstream
    /// defers the copy to the next decode, before any K-shift; nothing writes the rows in
    /// between, so copying now gives the same result). Only whole sequences copy across
    /// streams: a bounded range is refused (upstream aborts).
    fn kv_seq_cp(&mut self, src: usize, dst: usize, p0: i32, p1: i32) -> Result<(), KvError> {
        let (s0, s1) = (self.seq_to_stream[src], self.seq_to_stream[dst]);
        if s0 == s1 {
            if src == dst {
                return Ok(());
            }
            let (p0, p1) = Self::range(p0, p1);
            let cells = &mut self.streams[s0].cells;
            for i in 0..cells.size() {
                if cells.pos_in(i, p0, p1) && cells.seq_has(i, src) {
                    cells.seq_add(i, dst);
                }
            }
            return Ok(());
        }
        let size = self.size as i64;
        let partial = |p: i32| p > 0 && (p as i64) + 1 < size;
        if partial(p0) || partial(p1) {
            return Err(KvError(format!(
                "seq_cp({src} -> {dst}, [{p0}, {p1})): the sequences are in different KV streams (kv_unified = false), where only whole sequences can be copied (p0 <= 0, and p1 <= 0 or p1 >= {} - 1)",
                self.size
            )));
        }
        let (from, to) = if s0 < s1 {
            let (a, b) = self.streams.split_at_mut(s1);
            (&a[s0], &mut b[0])
        } else {
            let (a, b) = self.streams.split_at_mut(s0);
            (&b[0], &mut a[s1])
        };
        to.cells.reset();
        for i in 0..from.cells.size() {
            if from.cells.seq_has(i, src) {
                let shift = from.cells.shift(i);
                to.cells.pos_set(i, from.cells.pos(i) - shift);
                to.cells.ext_set(i, from.cells.ext(i));
                to.cells.seq_add(i, dst);
                if shift != 0 {
                    to.cells.pos_add(i, shift);
                }
            }
        }
        to.head = from.head;
        let n = self.size as usize;
        for l in &mut self.layers {
            l.k.copy_rows(s0 * n, s1 * n, n, l.n_embd_k);
            l.v.copy_rows(s0 * n, s1 * n, n, l.n_embd_v);
        }
        self.stream_copies.push((s0, s1));
        Ok(())
    }

    /// `llama_memory_seq_keep`: removes every sequence but `seq` from the stream of `seq`
    /// (other streams keep their sequences, as upstream's).
    fn kv_seq_keep(&mut self, seq: usize) {
        let size = self.size;
        let stream = &mut self.streams[self.seq_to_stream[seq]];
        let mut new_head = size;
        for i in 0..size {
            if stream.cells.seq_keep(i, seq) && new_head == size {
                new_head = i;
            }
        }
        if new_head != size && new_head < stream.head {
            stream.head = new_head;
        }
    }

    /// `llama_memory_seq_add`: adds `delta` to the positions of `seq` in [p0, p1); cells whose
    /// position becomes negative are freed. The keys are re-rotated before the next decode.
    fn kv_seq_add(&mut self, seq: usize, p0: i32, p1: i32, delta: i32) {
        if delta == 0 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if p0 == p1 {
            return;
        }
        let size = self.size;
        let stream = &mut self.streams[self.seq_to_stream[seq]];
        let mut new_head = size;
        for i in 0..size {
            if stream.cells.pos_in(i, p0, p1)
                && stream.cells.seq_has(i, seq)
                && stream.cells.pos_add(i, delta)
                && new_head == size
            {
                new_head = i;
            }
        }
        stream.head = if new_head != size { new_head } else { 0 };
    }

    /// `llama_memory_seq_div`: integer-divides the positions of `seq` in [p0, p1) by `d`.
    fn kv_seq_div(&mut self, seq: usize, p0: i32, p1: i32, d: i32) {
        if d == 1 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if p0 == p1 {
            return;
        }
        let cells = &mut self.streams[self.seq_to_stream[seq]].cells;
        for i in 0..cells.size() {
            if cells.pos_in(i, p0, p1) && cells.seq_has(i, seq) {
                cells.pos_div(i, d);
            }
        }
    }

    fn kv_seq_pos_min(&self, seq: usize) -> i32 {
        self.seq_cells(seq).seq_pos_min(seq)
    }

    fn kv_seq_pos_max(&self, seq: usize) -> i32 {
        self.seq_cells(seq).seq_pos_max(seq)
    }

    /// Upstream's `find_slot` (non-contiguous) for one micro-batch: `groups` lists, in the
    /// micro-batch's order, a stream and how many consecutive tokens go there (one group
    /// when unified; one per sequence otherwise). In each stream, one empty cell per token,
    /// searching from the stream's head (or from 0 when enough unused cells lie before it).
    /// Fills `out` with the rows; false when a stream has not enough empty cells.
    pub fn find_slot(&self, groups: &[(usize, u32)], out: &mut Vec<u32>) -> bool {
        out.clear();
        let size = self.size;
        for &(st, n_tokens) in groups {
            let stream = &self.streams[st];
            if n_tokens > size {
                crate::log_error!("find_slot: n_tokens = {n_tokens} > size = {size}");
                return false;
            }
            let base = st as u32 * size;
            let start = out.len();
            let mut head = stream.head;
            if head > stream.cells.used() + 2 * n_tokens {
                head = 0;
            }
            let mut tested = 0;
            while ((out.len() - start) as u32) < n_tokens && tested < size {
                if head >= size {
                    head = 0;
                }
                if stream.cells.is_empty(head) {
                    out.push(base + head);
                }
                head += 1;
                tested += 1;
            }
            if ((out.len() - start) as u32) < n_tokens {
                return false;
            }
        }
        true
    }

    /// Upstream's `apply_ubatch`: token `t` goes to row `rows[t]` with position `pos[t]` and
    /// sequences `seqs[t]`; each stream's head moves past its last slot. The cell's
    /// [`CellExt`] takes the token id (`toks`; None: input embeddings) and the position as
    /// its 2D position (a text token's under M-RoPE; the engine reads one position per token).
    pub fn apply(&mut self, rows: &[u32], pos: &[i32], seqs: &[SeqSet], toks: Option<&[i32]>) {
        let size = self.size;
        for (t, &row) in rows.iter().enumerate() {
            let stream = &mut self.streams[(row / size) as usize];
            let cell = row % size;
            if !stream.cells.is_empty(cell) {
                stream.cells.rm(cell);
            }
            stream.cells.pos_set(cell, pos[t]);
            stream.cells.ext_set(
                cell,
                CellExt {
                    x: pos[t],
                    y: pos[t],
                    tok: toks.map_or(-1, |toks| toks[t]),
                },
            );
            for s in seqs[t].iter() {
                stream.cells.seq_add(cell, s);
            }
            stream.head = cell + 1;
        }
    }

    /// The rows a token of sequence `seq` may attend to: its stream's rows up to the last
    /// used cell.
    pub fn rows_of(&self, seq: usize) -> std::ops::Range<u32> {
        let st = self.seq_to_stream[seq];
        let base = st as u32 * self.size;
        base..base + self.streams[st].cells.used_max_p1()
    }

    /// The position of the token in row `row` (-1: an empty cell or a row past the cache),
    /// for ALiBi's distance bias (upstream's KQ mask value `-|p0 - p1|`).
    #[inline]
    pub fn row_pos(&self, row: u32) -> i32 {
        let (st, j) = ((row / self.size) as usize, row % self.size);
        self.streams.get(st).map_or(-1, |s| s.cells.pos(j))
    }

    /// The token id row `row`'s cell carries (its [`CellExt`]; -1: none).
    pub fn row_tok(&self, row: u32) -> i32 {
        let (st, j) = ((row / self.size) as usize, row % self.size);
        self.streams.get(st).map_or(-1, |s| s.cells.ext(j).tok)
    }

    /// Whether row `row` is visible to a token of sequence `seq` at position `pos`: it is a
    /// cell of the sequence's stream that holds `seq`, is not in the future (causal), and is
    /// inside the sliding window when `n_swa > 0`.
    #[inline]
    pub fn visible(&self, row: u32, seq: usize, pos: i32, causal: bool, n_swa: u32) -> bool {
        let st = self.seq_to_stream[seq];
        let Some(j) = row.checked_sub(st as u32 * self.size) else {
            return false;
        };
        if j >= self.size {
            return false;
        }
        let cells = &self.streams[st].cells;
        if cells.is_empty(j) || !cells.seq_has(j, seq) {
            return false;
        }
        let pj = cells.pos(j);
        if causal && pj > pos {
            return false;
        }
        if n_swa > 0 && pos - pj >= n_swa as i32 {
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35, finding 8: sizes are checked before allocating; a shape whose size
    /// overflows is an error, never a panic or an abort.
    #[test]
    fn oversized_shapes_are_errors() {
        let shape = |size: u32, width: usize| KvShape {
            size,
            n_seq_max: 256,
            unified: false,
            type_k: KvType::F16,
            type_v: KvType::F32,
            layers: vec![(width, width); 4],
        };
        assert_eq!(shape(16, 8).checked_bytes(), Some(4 * 16 * 256 * (16 + 32)));
        assert!(shape(16, 8).memory_bytes().unwrap() > shape(16, 8).bytes());
        assert_eq!(shape(u32::MAX, usize::MAX / 2).checked_bytes(), None);
        assert!(matches!(
            KvCache::try_new(&shape(u32::MAX, usize::MAX / 2)),
            Err(KvAllocError::Overflow)
        ));
        // far past any host: the allocation itself fails (no abort)
        assert!(KvCache::try_new(&shape(u32::MAX, 1 << 20)).is_err());
        assert!(matches!(
            KvCache::try_new(&shape(1 << 24, 1 << 16)),
            Err(KvAllocError::OutOfMemory { .. })
        ));
        assert!(KvCache::try_new(&shape(16, 8)).is_ok());
    }

    fn cache(size: u32) -> KvCache {
        KvCache::new(&KvShape {
            size,
            n_seq_max: MAX_SEQ,
            unified: true,
            type_k: KvType::F16,
            type_v: KvType::F32,
            layers: vec![(4, 4)],
        })
    }

    fn streams(size: u32, n_seq_max: usize) -> KvCache {
        KvCache::new(&KvShape {
            size,
            n_seq_max,
            unified: false,
            type_k: KvType::F32,
            type_v: KvType::F16,
            layers: vec![(2, 2)],
        })
    }

    fn place(kv: &mut KvCache, pos: &[i32], seq: usize) -> Vec<u32> {
        let mut slots = Vec::new();
        let st = kv.stream_of(seq).unwrap();
        assert!(kv.find_slot(&[(st, pos.len() as u32)], &mut slots));
        let seqs = vec![SeqSet::single(seq); pos.len()];
        kv.apply(&slots, pos, &seqs, None);
        slots
    }

    #[test]
    fn slots_fill_in_order_and_report_full() {
        let mut kv = cache(8);
        assert_eq!(place(&mut kv, &[0, 1, 2], 0), vec![0, 1, 2]);
        assert_eq!(place(&mut kv, &[0, 1], 1), vec![3, 4]);
        assert_eq!(kv.seq_pos_min(0), 0);
        assert_eq!(kv.seq_pos_max(0), 2);
        assert_eq!(kv.seq_pos_max(1), 1);
        assert_eq!(kv.seq_pos_max(2), -1);
        assert_eq!(kv.n_free(0), 3);
        let mut slots = Vec::new();
        assert!(!kv.find_slot(&[(0, 4)], &mut slots));
        assert!(!kv.find_slot(&[(0, 9)], &mut slots));
        assert!(kv.find_slot(&[(0, 3)], &mut slots));
    }

    #[test]
    fn seq_rm_frees_cells_and_moves_head_back() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3], 0);
        assert!(kv.seq_rm(Some(0), 2, -1));
        assert_eq!(kv.seq_pos_max(0), 1);
        assert_eq!(kv.used(), 2);
        // the freed cells are found again first
        assert_eq!(place(&mut kv, &[2], 0), vec![2]);
        assert!(kv.seq_rm(None, -1, -1));
        assert_eq!(kv.used(), 0);
        assert_eq!(kv.seq_pos_min(0), -1);
    }

    #[test]
    fn seq_cp_shares_cells_and_seq_keep_drops_others() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2], 0);
        kv.seq_cp(0, 3, 1, -1).unwrap();
        assert_eq!((kv.seq_pos_min(3), kv.seq_pos_max(3)), (1, 2));
        assert_eq!(kv.used(), 3);
        // removing the copy leaves the original
        kv.seq_rm(Some(3), -1, -1);
        assert_eq!(kv.seq_pos_max(3), -1);
        assert_eq!(kv.seq_pos_max(0), 2);
        kv.seq_cp(0, 5, -1, -1).unwrap();
        place(&mut kv, &[0], 1);
        kv.seq_keep(5);
        assert_eq!(kv.seq_pos_max(0), -1);
        assert_eq!(kv.seq_pos_max(1), -1);
        assert_eq!((kv.seq_pos_min(5), kv.seq_pos_max(5)), (0, 2));
        assert_eq!(kv.used(), 3);
    }

    #[test]
    fn seq_add_shifts_and_frees_negative_positions() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3], 0);
        kv.seq_add(0, 2, -1, -2);
        // positions 2,3 became 0,1: the sequence now holds 0,0,1,1
        assert_eq!(kv.seq_pos_max(0), 1);
        assert!(kv.has_shift());
        assert_eq!(kv.cells(0).shift(2), -2);
        kv.seq_add(0, -1, -1, -1);
        // the two cells at position 0 went to -1 and were freed
        assert_eq!(kv.used(), 2);
        assert_eq!((kv.seq_pos_min(0), kv.seq_pos_max(0)), (0, 0));
    }

    #[test]
    fn seq_div_records_the_change_of_position() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3, 4, 5], 0);
        kv.seq_div(0, 2, 6, 2);
        assert_eq!(kv.cells(0).pos(5), 2);
        assert_eq!(kv.cells(0).shift(5), -3);
        assert_eq!(kv.seq_pos_max(0), 2);
    }

    #[test]
    fn visibility_is_causal_per_sequence_and_windowed() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3], 0);
        place(&mut kv, &[0], 1);
        assert!(kv.visible(0, 0, 2, true, 0));
        assert!(!kv.visible(3, 0, 2, true, 0));
        assert!(kv.visible(3, 0, 2, false, 0));
        assert!(!kv.visible(4, 0, 3, true, 0));
        assert!(kv.visible(4, 1, 0, true, 0));
        // window of 2: position 3 sees 2 and 3 only
        assert!(!kv.visible(1, 0, 3, true, 2));
        assert!(kv.visible(2, 0, 3, true, 2));
    }

    #[test]
    fn f16_rows_round_trip_through_half_precision() {
        let mut kv = cache(2);
        kv.layers[0].k.set_row(1, &[1.0, 0.1, -2.5, 65504.0]);
        let mut out = [0.0; 4];
        kv.layers[0].k.get_row(1, &mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], half::f16::from_f32(0.1).to_f32());
        assert_eq!(out[3], 65504.0);
    }

    #[test]
    fn each_sequence_fills_its_own_stream() {
        let mut kv = streams(4, 3);
        assert_eq!((kv.n_stream(), kv.size()), (3, 4));
        // rows are stream * size + cell
        assert_eq!(place(&mut kv, &[0, 1, 2, 3], 0), vec![0, 1, 2, 3]);
        assert_eq!(place(&mut kv, &[0, 1], 2), vec![8, 9]);
        assert_eq!(kv.used(), 6);
        // stream 0 is full while the others have room
        let mut slots = Vec::new();
        assert!(!kv.find_slot(&[(0, 1)], &mut slots));
        assert!(kv.find_slot(&[(1, 4)], &mut slots));
        assert!(kv.find_slot(&[(1, 2), (2, 2)], &mut slots));
        assert_eq!(slots, vec![4, 5, 10, 11]);
        assert_eq!(kv.rows_of(0), 0..4);
        assert_eq!(kv.rows_of(2), 8..10);
        // a sequence sees only its stream's rows
        assert!(kv.visible(8, 2, 5, true, 0));
        assert!(!kv.visible(0, 2, 5, true, 0));
        assert!(!kv.visible(8, 0, 5, true, 0));
        // ids are bounded by n_seq_max (MAX_SEQ when unified)
        assert!(kv.check_seq(2).is_ok());
        assert!(kv.check_seq(3).is_err());
        assert!(kv.check_seq(-1).is_err());
        assert!(cache(4).check_seq(255).is_ok());
        assert!(cache(4).check_seq(256).is_err());
        // one stream (n_seq_max = 1) takes every id below 256 too, as upstream
        assert!(streams(4, 1).check_seq(255).is_ok());
    }

    #[test]
    fn memory_operations_stay_in_the_stream_of_the_sequence() {
        let mut kv = streams(4, 3);
        place(&mut kv, &[0, 1, 2], 0);
        place(&mut kv, &[0, 1], 1);
        // seq_keep(1) leaves the other streams alone, as upstream's
        kv.seq_keep(1);
        assert_eq!(kv.seq_pos_max(0), 2);
        kv.seq_add(0, -1, -1, 2);
        assert!(kv.has_shift());
        assert_eq!(kv.seq_pos_max(0), 4);
        assert_eq!(kv.seq_pos_max(1), 1);
        kv.seq_rm(Some(1), -1, -1);
        assert_eq!(kv.used(), 3);
        kv.seq_rm(None, 3, -1);
        assert_eq!((kv.seq_pos_min(0), kv.seq_pos_max(0)), (2, 2));
    }

    #[test]
    fn seq_cp_across_streams_copies_cells_shifts_and_rows() {
        let mut kv = streams(4, 2);
        place(&mut kv, &[0, 1, 2], 0);
        for r in 0..3 {
            kv.layers[0].k.set_row(r, &[r as f32, 1.0]);
            kv.layers[0].v.set_row(r, &[2.0, r as f32]);
        }
        place(&mut kv, &[0], 1);
        kv.seq_add(0, 1, -1, 3);
        // a bounded range cannot be copied across streams
        assert!(kv.seq_cp(0, 1, 1, 3).is_err());
        assert_eq!(kv.seq_pos_max(1), 0);
        kv.seq_cp(0, 1, -1, -1).unwrap();
        // the destination stream was emptied, then got the source's cells
        assert_eq!((kv.seq_pos_min(1), kv.seq_pos_max(1)), (0, 5));
        assert_eq!(kv.cells(1).shift(2), 3);
        assert_eq!(kv.cells(1).pos(2), 5);
        let mut row = [0.0; 2];
        kv.layers[0].k.get_row(4 + 2, &mut row);
        assert_eq!(row, [2.0, 1.0]);
        kv.layers[0].v.get_row(4 + 1, &mut row);
        assert_eq!(row, [2.0, 1.0]);
        // the next token of the copy goes after the copied cells
        assert_eq!(place(&mut kv, &[6], 1), vec![4 + 3]);
    }
}
