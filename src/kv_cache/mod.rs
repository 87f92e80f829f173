//! The KV cache: a unified cache as upstream's `llama_kv_cache` with one stream — cells (a
//! position and a set of sequence ids each, see [`cells`]), the search head, and per layer
//! the cached keys and values (F32, F16, or blocks of BF16/Q8_0/Q4_0/Q4_1), one row of `n_embd_k_gqa` / `n_embd_v_gqa`
//! values per cell.
//!
//! Every sequence shares the cells, as with upstream's `kv_unified = true`; with
//! `kv_unified = false` upstream gives each sequence a stream of `n_ctx / n_seq_max` cells
//! instead, which differs only in when the cache reports itself full. Sliding-window layers
//! read the same cells through a sliding-window mask (upstream's `swa_full = true` layout);
//! slots are never reused while a full-attention layer may still need them.

pub mod cells;

use half::f16;

use crate::gguf::GgmlType;

pub use cells::{KvCells, SeqSet, MAX_SEQ};

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

impl KvBuffer {
    fn new(ty: KvType, rows: usize, width: usize) -> KvBuffer {
        let len = rows * width;
        match ty {
            KvType::F32 => KvBuffer::F32(vec![0.0; len]),
            KvType::F16 => KvBuffer::F16(vec![f16::ZERO; len]),
            KvType::Packed(ty) => {
                let row_bytes = crate::kernels::cpu::row_bytes(ty, width);
                KvBuffer::Packed {
                    ty,
                    row_bytes,
                    data: vec![0; rows * row_bytes],
                }
            }
        }
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

    /// Row `cell` (rows of `n` values) in half precision, when the buffer is F16.
    pub fn row_f16(&self, cell: usize, n: usize) -> Option<&[f16]> {
        match self {
            KvBuffer::F16(v) => Some(&v[cell * n..(cell + 1) * n]),
            _ => None,
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

/// Shape of the cache: size in cells and, per layer, the K and V row widths.
#[derive(Clone, Debug)]
pub struct KvShape {
    pub size: u32,
    /// Sequence ids are below this (at most [`MAX_SEQ`]).
    pub n_seq_max: usize,
    pub type_k: KvType,
    pub type_v: KvType,
    pub layers: Vec<(usize, usize)>,
}

#[derive(Debug)]
pub struct KvCache {
    pub cells: KvCells,
    head: u32,
    pub layers: Vec<KvLayer>,
    pub type_k: KvType,
    pub type_v: KvType,
    /// Whether positions may be shifted (`seq_add`/`seq_div`; false for M-RoPE archs).
    pub can_shift: bool,
}

impl KvCache {
    pub fn new(shape: &KvShape) -> KvCache {
        let n = shape.size as usize;
        KvCache {
            cells: KvCells::new(shape.size, shape.n_seq_max.min(MAX_SEQ)),
            head: 0,
            layers: shape
                .layers
                .iter()
                .map(|&(nk, nv)| KvLayer {
                    k: KvBuffer::new(shape.type_k, n, nk),
                    v: KvBuffer::new(shape.type_v, n, nv),
                    n_embd_k: nk,
                    n_embd_v: nv,
                })
                .collect(),
            type_k: shape.type_k,
            type_v: shape.type_v,
            can_shift: true,
        }
    }

    pub fn size(&self) -> u32 {
        self.cells.size()
    }

    /// `llama_memory_clear`: empties every cell; `data` also zeroes the buffers.
    pub fn clear(&mut self, data: bool) {
        self.cells.reset();
        self.head = 0;
        if data {
            for l in &mut self.layers {
                l.k.clear();
                l.v.clear();
            }
        }
    }

    fn range(p0: i32, p1: i32) -> (i32, i32) {
        (p0.max(0), if p1 < 0 { i32::MAX } else { p1 })
    }

    /// `llama_memory_seq_rm`: removes `seq` (any sequence when negative) from the cells with
    /// positions in [p0, p1). Always succeeds for a KV cache.
    pub fn seq_rm(&mut self, seq: Option<usize>, p0: i32, p1: i32) -> bool {
        let (p0, p1) = Self::range(p0, p1);
        let size = self.cells.size();
        let mut new_head = size;
        for i in 0..size {
            if !self.cells.pos_in(i, p0, p1) {
                continue;
            }
            let freed = match seq {
                Some(s) => self.cells.seq_has(i, s) && self.cells.seq_rm(i, s),
                None => {
                    self.cells.rm(i);
                    true
                }
            };
            if freed && new_head == size {
                new_head = i;
            }
        }
        if new_head != size && new_head < self.head {
            self.head = new_head;
        }
        true
    }

    /// `llama_memory_seq_cp`: adds `dst` to the cells of `src` with positions in [p0, p1).
    pub fn seq_cp(&mut self, src: usize, dst: usize, p0: i32, p1: i32) {
        if src == dst {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        for i in 0..self.cells.size() {
            if self.cells.pos_in(i, p0, p1) && self.cells.seq_has(i, src) {
                self.cells.seq_add(i, dst);
            }
        }
    }

    /// `llama_memory_seq_keep`: removes every sequence but `seq`.
    pub fn seq_keep(&mut self, seq: usize) {
        let size = self.cells.size();
        let mut new_head = size;
        for i in 0..size {
            if self.cells.seq_keep(i, seq) && new_head == size {
                new_head = i;
            }
        }
        if new_head != size && new_head < self.head {
            self.head = new_head;
        }
    }

    /// `llama_memory_seq_add`: adds `delta` to the positions of `seq` in [p0, p1); cells whose
    /// position becomes negative are freed. The keys are re-rotated before the next decode.
    pub fn seq_add(&mut self, seq: usize, p0: i32, p1: i32, delta: i32) {
        if delta == 0 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if p0 == p1 {
            return;
        }
        let size = self.cells.size();
        let mut new_head = size;
        for i in 0..size {
            if self.cells.pos_in(i, p0, p1)
                && self.cells.seq_has(i, seq)
                && self.cells.pos_add(i, delta)
                && new_head == size
            {
                new_head = i;
            }
        }
        self.head = if new_head != size { new_head } else { 0 };
    }

    /// `llama_memory_seq_div`: integer-divides the positions of `seq` in [p0, p1) by `d`.
    pub fn seq_div(&mut self, seq: usize, p0: i32, p1: i32, d: i32) {
        if d == 1 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if p0 == p1 {
            return;
        }
        for i in 0..self.cells.size() {
            if self.cells.pos_in(i, p0, p1) && self.cells.seq_has(i, seq) {
                self.cells.pos_div(i, d);
            }
        }
    }

    pub fn seq_pos_min(&self, seq: usize) -> i32 {
        self.cells.seq_pos_min(seq)
    }

    pub fn seq_pos_max(&self, seq: usize) -> i32 {
        self.cells.seq_pos_max(seq)
    }

    /// Empty cells: how many tokens can still be placed.
    pub fn n_free(&self) -> u32 {
        self.cells.size() - self.cells.used()
    }

    /// Upstream's `find_slot` (non-contiguous): one empty cell per token, searching from the
    /// head (or from 0 when enough unused cells lie before it). Fills `out`; false when
    /// there are not enough empty cells.
    pub fn find_slot(&self, n_tokens: u32, out: &mut Vec<u32>) -> bool {
        out.clear();
        let size = self.cells.size();
        if n_tokens > size {
            crate::log_error!("find_slot: n_tokens = {n_tokens} > size = {size}");
            return false;
        }
        let mut head = self.head;
        if head > self.cells.used() + 2 * n_tokens {
            head = 0;
        }
        let mut tested = 0;
        while (out.len() as u32) < n_tokens && tested < size {
            if head >= size {
                head = 0;
            }
            if self.cells.is_empty(head) {
                out.push(head);
            }
            head += 1;
            tested += 1;
        }
        out.len() as u32 == n_tokens
    }

    /// Upstream's `apply_ubatch`: token `t` goes to cell `slots[t]` with position `pos[t]`
    /// and sequences `seqs[t]`; the head moves past the last slot.
    pub fn apply(&mut self, slots: &[u32], pos: &[i32], seqs: &[SeqSet]) {
        for (t, &cell) in slots.iter().enumerate() {
            if !self.cells.is_empty(cell) {
                self.cells.rm(cell);
            }
            self.cells.pos_set(cell, pos[t]);
            for s in seqs[t].iter() {
                self.cells.seq_add(cell, s);
            }
        }
        if let Some(&last) = slots.last() {
            self.head = last + 1;
        }
    }

    /// Whether cell `j` is visible to a token of sequence `seq` at position `pos`: it holds
    /// `seq`, is not in the future (causal), and is inside the sliding window when `n_swa > 0`.
    #[inline]
    pub fn visible(&self, j: u32, seq: usize, pos: i32, causal: bool, n_swa: u32) -> bool {
        if self.cells.is_empty(j) || !self.cells.seq_has(j, seq) {
            return false;
        }
        let pj = self.cells.pos(j);
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

    fn cache(size: u32) -> KvCache {
        KvCache::new(&KvShape {
            size,
            n_seq_max: MAX_SEQ,
            type_k: KvType::F16,
            type_v: KvType::F32,
            layers: vec![(4, 4)],
        })
    }

    fn place(kv: &mut KvCache, pos: &[i32], seq: usize) -> Vec<u32> {
        let mut slots = Vec::new();
        assert!(kv.find_slot(pos.len() as u32, &mut slots));
        let seqs = vec![SeqSet::single(seq); pos.len()];
        kv.apply(&slots, pos, &seqs);
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
        assert_eq!(kv.n_free(), 3);
        let mut slots = Vec::new();
        assert!(!kv.find_slot(4, &mut slots));
        assert!(!kv.find_slot(9, &mut slots));
        assert!(kv.find_slot(3, &mut slots));
    }

    #[test]
    fn seq_rm_frees_cells_and_moves_head_back() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3], 0);
        assert!(kv.seq_rm(Some(0), 2, -1));
        assert_eq!(kv.seq_pos_max(0), 1);
        assert_eq!(kv.cells.used(), 2);
        // the freed cells are found again first
        assert_eq!(place(&mut kv, &[2], 0), vec![2]);
        assert!(kv.seq_rm(None, -1, -1));
        assert_eq!(kv.cells.used(), 0);
        assert_eq!(kv.seq_pos_min(0), -1);
    }

    #[test]
    fn seq_cp_shares_cells_and_seq_keep_drops_others() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2], 0);
        kv.seq_cp(0, 3, 1, -1);
        assert_eq!((kv.seq_pos_min(3), kv.seq_pos_max(3)), (1, 2));
        assert_eq!(kv.cells.used(), 3);
        // removing the copy leaves the original
        kv.seq_rm(Some(3), -1, -1);
        assert_eq!(kv.seq_pos_max(3), -1);
        assert_eq!(kv.seq_pos_max(0), 2);
        kv.seq_cp(0, 5, -1, -1);
        place(&mut kv, &[0], 1);
        kv.seq_keep(5);
        assert_eq!(kv.seq_pos_max(0), -1);
        assert_eq!(kv.seq_pos_max(1), -1);
        assert_eq!((kv.seq_pos_min(5), kv.seq_pos_max(5)), (0, 2));
        assert_eq!(kv.cells.used(), 3);
    }

    #[test]
    fn seq_add_shifts_and_frees_negative_positions() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3], 0);
        kv.seq_add(0, 2, -1, -2);
        // positions 2,3 became 0,1: the sequence now holds 0,0,1,1
        assert_eq!(kv.seq_pos_max(0), 1);
        assert!(kv.cells.has_shift());
        assert_eq!(kv.cells.shift(2), -2);
        kv.seq_add(0, -1, -1, -1);
        // the two cells at position 0 went to -1 and were freed
        assert_eq!(kv.cells.used(), 2);
        assert_eq!((kv.seq_pos_min(0), kv.seq_pos_max(0)), (0, 0));
    }

    #[test]
    fn seq_div_records_the_change_of_position() {
        let mut kv = cache(8);
        place(&mut kv, &[0, 1, 2, 3, 4, 5], 0);
        kv.seq_div(0, 2, 6, 2);
        assert_eq!(kv.cells.pos(5), 2);
        assert_eq!(kv.cells.shift(5), -3);
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
}
