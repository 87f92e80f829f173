//! Saving and restoring the cache in upstream's byte layout (`llama_kv_cache::state_write`
//! and `state_read`), so that a state written by either library loads in the other:
//!
//! ```text
//! u32 n_stream
//! per stream: u32 cell_count, then (when > 0)
//!   per cell:  i32 pos, u32 n_seq_id, [M-RoPE: i32 x, i32 y, i32 tok], i32 seq_id × n_seq_id
//!   u32 v_trans, u32 n_layer
//!   per layer: i32 k_type, u64 k_row_bytes, the cells' K rows
//!   v_trans = 0, per layer: i32 v_type, u64 v_row_bytes, the cells' V rows
//!   v_trans = 1, per layer: i32 v_type, u32 v_elem_bytes, u32 n_embd_v,
//!                           per V column: that value of each cell
//! ```
//!
//! Cells are written in index order (runs of consecutive cells). Upstream keeps V transposed
//! when flash attention is off; ours keeps rows and writes (reads) the columns instead.
//!
//! A restore is parsed and checked whole before anything changes ([`KvCache::state_parse`]
//! stages the cells and rows, [`KvCache::state_apply`] installs them): a state that fails
//! leaves the cache as it was. Upstream has by then emptied the cache (a whole restore) or
//! the destination sequence (a sequence restore); we keep it instead.

use super::{CellExt, KvCache, RsMemory, SeqSet};

/// A state that cannot be written or read; the text says what and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StateError(pub String);

fn fail<T>(msg: impl Into<String>) -> Result<T, StateError> {
    Err(StateError(msg.into()))
}

/// Where a state's bytes go.
pub enum StateOut<'a> {
    /// Nowhere: only counted (`tensors`: whether tensor data counts, upstream's dummy writer).
    Count { tensors: bool },
    /// Everything in order.
    Bytes(&'a mut dyn std::io::Write),
    /// Metadata in order; tensor data kept aside (`LLAMA_STATE_SEQ_FLAGS_ON_DEVICE`: upstream
    /// leaves it in device buffers and neither writes nor counts it).
    Aside {
        out: &'a mut dyn std::io::Write,
        tensors: &'a mut Vec<u8>,
    },
}

/// A state being written: the sink and the bytes written so far (upstream's `n_bytes`).
pub struct StateWriter<'a> {
    out: StateOut<'a>,
    n: usize,
    scratch: Vec<u8>,
}

impl<'a> StateWriter<'a> {
    pub fn new(out: StateOut<'a>) -> StateWriter<'a> {
        StateWriter {
            out,
            n: 0,
            scratch: Vec::new(),
        }
    }

    /// Bytes written (counted) so far.
    pub fn n_bytes(&self) -> usize {
        self.n
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<(), StateError> {
        match &mut self.out {
            StateOut::Count { .. } => {}
            StateOut::Bytes(out) | StateOut::Aside { out, .. } => out
                .write_all(bytes)
                .map_err(|e| StateError(format!("cannot write the state: {e}")))?,
        }
        self.n += bytes.len();
        Ok(())
    }

    pub fn u32(&mut self, v: u32) -> Result<(), StateError> {
        self.write(&v.to_le_bytes())
    }

    pub fn i32(&mut self, v: i32) -> Result<(), StateError> {
        self.write(&v.to_le_bytes())
    }

    pub fn u64(&mut self, v: u64) -> Result<(), StateError> {
        self.write(&v.to_le_bytes())
    }

    /// A length-prefixed string (upstream's `write_string`).
    pub fn string(&mut self, s: &str) -> Result<(), StateError> {
        let n = u32::try_from(s.len()).map_err(|_| StateError("string too long".into()))?;
        self.u32(n)?;
        self.write(s.as_bytes())
    }

    /// `len` bytes of tensor data, made by `fill` only where they are stored.
    fn tensor(&mut self, len: usize, fill: impl FnOnce(&mut Vec<u8>)) -> Result<(), StateError> {
        match &mut self.out {
            StateOut::Count { tensors } => {
                if *tensors {
                    self.n += len;
                }
                Ok(())
            }
            StateOut::Aside { tensors, .. } => {
                fill(tensors);
                Ok(())
            }
            StateOut::Bytes(_) => {
                let mut buf = std::mem::take(&mut self.scratch);
                buf.clear();
                fill(&mut buf);
                debug_assert_eq!(buf.len(), len);
                let r = self.write(&buf);
                self.scratch = buf;
                r
            }
        }
    }
}

/// Bytes a state is read from, in order.
pub trait StateSource {
    /// The next `n` bytes; None when fewer are left (nothing is consumed then).
    fn take(&mut self, n: usize) -> Option<&[u8]>;
}

/// A state in a byte slice.
pub struct SliceSource<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> SliceSource<'a> {
    pub fn new(data: &'a [u8]) -> SliceSource<'a> {
        SliceSource { data, at: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.at
    }
}

impl StateSource for SliceSource<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len())?;
        let s = &self.data[self.at..end];
        self.at = end;
        Some(s)
    }
}

/// A state being read: its source, the tensor data kept aside where it was written so, and
/// the bytes read so far (upstream's `n_bytes`, which does not count data kept aside).
pub struct StateReader<'a> {
    src: &'a mut dyn StateSource,
    aside: Option<SliceSource<'a>>,
    n: usize,
}

impl<'a> StateReader<'a> {
    pub fn new(src: &'a mut dyn StateSource, aside: Option<&'a [u8]>) -> StateReader<'a> {
        StateReader {
            src,
            aside: aside.map(SliceSource::new),
            n: 0,
        }
    }

    pub fn n_bytes(&self) -> usize {
        self.n
    }

    pub fn read(&mut self, n: usize) -> Result<&[u8], StateError> {
        match self.src.take(n) {
            Some(b) => {
                self.n += n;
                Ok(b)
            }
            None => fail("unexpectedly reached end of buffer"),
        }
    }

    pub fn u32(&mut self) -> Result<u32, StateError> {
        let b = self.read(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i32(&mut self) -> Result<i32, StateError> {
        Ok(self.u32()? as i32)
    }

    pub fn u64(&mut self) -> Result<u64, StateError> {
        let lo = u64::from(self.u32()?);
        let hi = u64::from(self.u32()?);
        Ok(lo | hi << 32)
    }

    /// A length-prefixed string (upstream's `read_string`).
    pub fn string(&mut self) -> Result<String, StateError> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.read(n)?).into_owned())
    }

    fn tensor(&mut self, n: usize) -> Result<&[u8], StateError> {
        if self.aside.is_none() {
            return self.read(n);
        }
        match self.aside.as_mut().and_then(|a| a.take(n)) {
            Some(b) => Ok(b),
            None => fail("the tensor data kept aside for this sequence is shorter than the state"),
        }
    }
}

/// Which part of the cache a state section holds: upstream writes one section per cache
/// (one for most models, the full-attention then the sliding-window layers for models with
/// a sliding window).
#[derive(Clone, Debug)]
pub struct StateLayers {
    /// The layers of the section, in order.
    pub layers: Vec<usize>,
    /// Sliding window of these layers (0: none): a sequence's state leaves out the cells
    /// outside its window, as upstream's SWA cache.
    pub n_swa: u32,
    /// V kept transposed upstream (flash attention off).
    pub v_trans: bool,
    /// Each cell's record carries its [`CellExt`] (upstream's `has_cell_ext()`: M-RoPE
    /// models, whose cells hold a 2D position).
    pub cell_ext: bool,
    /// Width of V rows upstream's cache of these layers holds and never fills (MiniMax-M3's
    /// indexer cache, a plain `llama_kv_cache` of one key head: its V tensors stay zero),
    /// where ours keeps no V (`n_embd_v` 0): written as zeros, read and dropped. 0: none.
    pub zero_v: usize,
    /// The section's cells are those of the section before it (upstream's second cache
    /// filled in step with the first, MiniMax-M3's indexer keys): a restore writes its rows
    /// into the cells the first one placed.
    pub follows: bool,
    /// The section comes after the recurrent states (upstream's `llama_memory_hybrid_idx`
    /// writes its indexer cache last).
    pub after_rs: bool,
}

impl StateLayers {
    /// A plain cache's section: its own cells, V rows where it has them, before the recurrent
    /// states (the other fields set by struct update where a section differs).
    pub fn cache(layers: Vec<usize>, n_swa: u32, v_trans: bool, cell_ext: bool) -> StateLayers {
        StateLayers {
            layers,
            n_swa,
            v_trans,
            cell_ext,
            zero_v: 0,
            follows: false,
            after_rs: false,
        }
    }
}

/// One stream's part of a parsed state: its cells and their K and V rows.
#[derive(Debug)]
struct StreamState {
    /// Stream the cells go to.
    strm: usize,
    pos: Vec<i32>,
    seqs: Vec<SeqSet>,
    /// The cells' [`CellExt`] (as saved when the section carries them).
    ext: Vec<CellExt>,
    /// Per section layer: the cells' rows, row after row (V as rows, also when transposed).
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
}

/// A parsed and checked state of one section, ready for [`KvCache::state_apply`].
#[derive(Debug)]
pub struct KvRestore {
    streams: Vec<StreamState>,
}

impl KvRestore {
    /// Whether every cell of `self` (a sliding-window section) is a cell of `base` (the
    /// full-attention section of the same state): same stream, position and sequences, in
    /// order. Upstream keeps two caches; ours keeps one set of cells for both, so a window
    /// section must describe cells the other one has.
    pub fn cells_within(&self, base: &KvRestore) -> bool {
        self.streams.iter().all(|st| {
            let Some(b) = base.streams.iter().find(|b| b.strm == st.strm) else {
                return false;
            };
            let mut j = 0;
            st.pos.iter().zip(&st.seqs).all(|(p, q)| {
                while j < b.pos.len() && (b.pos[j] != *p || b.seqs[j] != *q) {
                    j += 1;
                }
                j += 1;
                j <= b.pos.len()
            })
        })
    }
}

impl KvCache {
    /// The rows of the cells a parsed section describes, matched in this cache's cells by
    /// position (and sequences; for a sequence restore, cells holding `seq`), in index
    /// order; None when one is missing. For a sliding-window section restored after its
    /// full-attention section, or alone (`LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`).
    pub fn state_match_rows(
        &self,
        restore: &KvRestore,
        seq: Option<usize>,
    ) -> Option<Vec<Vec<u32>>> {
        restore
            .streams
            .iter()
            .map(|st| {
                let cells = &self.streams[st.strm].cells;
                let mut i = 0u32;
                st.pos
                    .iter()
                    .zip(&st.seqs)
                    .map(|(&p, q)| {
                        while i < self.size {
                            let hit = !cells.is_empty(i)
                                && cells.pos(i) == p
                                && match seq {
                                    Some(s) => cells.seq_has(i, s),
                                    None => cells.seqs(i) == q,
                                };
                            i += 1;
                            if hit {
                                return Some(st.strm as u32 * self.size + i - 1);
                            }
                        }
                        None
                    })
                    .collect()
            })
            .collect()
    }

    /// Writes the rows of a parsed section's layers into `rows` (from
    /// [`KvCache::state_match_rows`]); the cells stay as they are.
    pub fn state_apply_rows(&mut self, restore: &KvRestore, rows: &[Vec<u32>], sect: &StateLayers) {
        for (st, rows) in restore.streams.iter().zip(rows) {
            for (li, &il) in sect.layers.iter().enumerate() {
                let l = &mut self.layers[il];
                let rk = self.type_k.row_bytes(l.n_embd_k);
                let rv = self.type_v.row_bytes(l.n_embd_v);
                for (i, &row) in rows.iter().enumerate() {
                    l.k.set_row_bytes(row as usize, l.n_embd_k, &st.k[li][i * rk..(i + 1) * rk]);
                    if l.n_embd_v > 0 {
                        l.v.set_row_bytes(
                            row as usize,
                            l.n_embd_v,
                            &st.v[li][i * rv..(i + 1) * rv],
                        );
                    }
                }
            }
        }
    }

    /// Writes the cells of `seq` (every cell when None) and their rows of the section's
    /// layers, as upstream's `state_write`.
    pub fn state_write(
        &self,
        w: &mut StateWriter,
        seq: Option<usize>,
        sect: &StateLayers,
    ) -> Result<(), StateError> {
        if sect.v_trans && self.type_v.block_size() != 1 {
            return fail("a quantized V cache cannot be transposed (it needs flash attention)");
        }
        w.u32(self.streams.len() as u32)?;
        let size = self.size as usize;
        for (s, stream) in self.streams.iter().enumerate() {
            let cells = &stream.cells;
            let max = seq.map(|q| cells.seq_pos_max(q));
            let keep = |i: u32| {
                if cells.is_empty(i) {
                    return false;
                }
                match seq {
                    None => true,
                    Some(q) => {
                        cells.seq_has(i, q)
                            && !(sect.n_swa > 0
                                && max.unwrap_or(-1) - cells.pos(i) >= sect.n_swa as i32)
                    }
                }
            };
            let mut ranges: Vec<(usize, usize)> = Vec::new();
            let mut begin = None;
            for i in 0..self.size {
                match (keep(i), begin) {
                    (true, None) => begin = Some(i as usize),
                    (false, Some(b)) => {
                        ranges.push((b, i as usize));
                        begin = None;
                    }
                    _ => {}
                }
            }
            if let Some(b) = begin {
                ranges.push((b, size));
            }
            let count: usize = ranges.iter().map(|r| r.1 - r.0).sum();
            w.u32(count as u32)?;
            if count == 0 {
                continue;
            }
            for &(a, b) in &ranges {
                for i in a..b {
                    let ids: Vec<usize> = (0..self.n_seq_max)
                        .filter(|&cur| {
                            (seq.is_none() || seq == Some(cur)) && cells.seq_has(i as u32, cur)
                        })
                        .collect();
                    w.i32(cells.pos(i as u32))?;
                    w.u32(ids.len() as u32)?;
                    if sect.cell_ext {
                        let ext = cells.ext(i as u32);
                        w.i32(ext.x)?;
                        w.i32(ext.y)?;
                        w.i32(ext.tok)?;
                    }
                    for id in ids {
                        w.i32(id as i32)?;
                    }
                }
            }
            let base = s * size;
            w.u32(sect.v_trans as u32)?;
            w.u32(sect.layers.len() as u32)?;
            for &il in &sect.layers {
                let l = &self.layers[il];
                let row = self.type_k.row_bytes(l.n_embd_k);
                w.i32(self.type_k.ggml_id())?;
                w.u64(row as u64)?;
                for &(a, b) in &ranges {
                    w.tensor((b - a) * row, |out| {
                        l.k.append_row_bytes(base + a, b - a, l.n_embd_k, out)
                    })?;
                }
            }
            for &il in &sect.layers {
                let l = &self.layers[il];
                if l.n_embd_v == 0 {
                    // compressed attention (MLA) keeps no V: upstream has no V tensor there;
                    // an indexer cache has one that stays zero
                    if sect.zero_v > 0 {
                        self.state_write_zero_v(w, sect, count)?;
                    }
                    continue;
                }
                w.i32(self.type_v.ggml_id())?;
                if !sect.v_trans {
                    let row = self.type_v.row_bytes(l.n_embd_v);
                    w.u64(row as u64)?;
                    for &(a, b) in &ranges {
                        w.tensor((b - a) * row, |out| {
                            l.v.append_row_bytes(base + a, b - a, l.n_embd_v, out)
                        })?;
                    }
                } else {
                    let el = self.type_v.type_size();
                    w.u32(el as u32)?;
                    w.u32(l.n_embd_v as u32)?;
                    for j in 0..l.n_embd_v {
                        for &(a, b) in &ranges {
                            w.tensor((b - a) * el, |out| {
                                l.v.append_col_bytes(j, base + a, b - a, l.n_embd_v, out)
                            })?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The V rows of a layer whose V upstream allocates and never fills
    /// ([`StateLayers::zero_v`]): zeros of the cache's V type, as rows or columns.
    fn state_write_zero_v(
        &self,
        w: &mut StateWriter,
        sect: &StateLayers,
        count: usize,
    ) -> Result<(), StateError> {
        w.i32(self.type_v.ggml_id())?;
        let len = if !sect.v_trans {
            let row = self.type_v.row_bytes(sect.zero_v);
            w.u64(row as u64)?;
            count * row
        } else {
            let el = self.type_v.type_size();
            w.u32(el as u32)?;
            w.u32(sect.zero_v as u32)?;
            count * el * sect.zero_v
        };
        // every V type's zero block is all zero bytes (a scale of 0)
        w.tensor(len, |out| out.resize(out.len() + len, 0))
    }

    /// Reads and drops what [`KvCache::state_write_zero_v`] writes, checking its header.
    fn state_parse_zero_v(
        &self,
        r: &mut StateReader,
        sect: &StateLayers,
        count: usize,
        il: usize,
    ) -> Result<(), StateError> {
        let ty = r.i32()?;
        if ty != self.type_v.ggml_id() {
            return fail(format!(
                "mismatched value type ({} != {ty}, layer {il})",
                self.type_v.ggml_id()
            ));
        }
        let len = if !sect.v_trans {
            let row = self.type_v.row_bytes(sect.zero_v);
            let row_ref = r.u64()?;
            if row_ref != row as u64 {
                return fail(format!(
                    "mismatched value row size ({row} != {row_ref}, layer {il})"
                ));
            }
            count * row
        } else {
            let el = self.type_v.type_size();
            let el_ref = r.u32()?;
            if el_ref as usize != el {
                return fail(format!(
                    "mismatched value element size ({el} != {el_ref}, layer {il})"
                ));
            }
            let n_embd_ref = r.u32()?;
            if n_embd_ref as usize != sect.zero_v {
                return fail(format!(
                    "mismatched GQA embedding size ({} != {n_embd_ref}, layer {il})",
                    sect.zero_v
                ));
            }
            count * el * sect.zero_v
        };
        r.tensor(len)?;
        Ok(())
    }

    /// Reads one section written by [`KvCache::state_write`] (either library's) into a
    /// staged restore, checking it against this cache: stream count, cell counts, sequence
    /// ids, layer count, types, row sizes, V transposition. `seq`: the destination sequence
    /// (None: the whole cache). Nothing changes here.
    pub fn state_parse(
        &self,
        r: &mut StateReader,
        seq: Option<usize>,
        sect: &StateLayers,
    ) -> Result<KvRestore, StateError> {
        let n_stream = r.u32()?;
        if n_stream as usize != self.streams.len() {
            return fail(format!(
                "n_stream mismatch ({n_stream} in the state, {} here)",
                self.streams.len()
            ));
        }
        let mut streams = Vec::new();
        for s in 0..self.streams.len() {
            let count = r.u32()? as usize;
            if count == 0 {
                continue;
            }
            let strm = match seq {
                None => s,
                Some(q) => self.seq_to_stream[q],
            };
            if seq.is_some() && !streams.is_empty() {
                return fail("a sequence's state holds cells in more than one stream");
            }
            if count > self.size as usize {
                return fail(format!(
                    "not enough cells in kv cache ({count} in the state, {} here)",
                    self.size
                ));
            }
            let mut pos = Vec::with_capacity(count);
            let mut seqs = Vec::with_capacity(count);
            let mut exts = Vec::with_capacity(count);
            for _ in 0..count {
                let p = r.i32()?;
                let n_seq_id = r.u32()?;
                if p < 0 {
                    return fail(format!("invalid position {p} of a kv cell"));
                }
                exts.push(if sect.cell_ext {
                    CellExt {
                        x: r.i32()?,
                        y: r.i32()?,
                        tok: r.i32()?,
                    }
                } else {
                    CellExt::default()
                });
                let mut set = SeqSet::default();
                match seq {
                    Some(q) => {
                        if n_seq_id != 1 {
                            return fail("invalid seq_id-agnostic kv cell");
                        }
                        // the saved sequence id is read and replaced by the destination
                        r.i32()?;
                        set.set(q);
                    }
                    None => {
                        for _ in 0..n_seq_id {
                            let id = r.i32()?;
                            if id < 0 || id as usize >= self.n_seq_max {
                                return fail(format!(
                                    "invalid seq_id, {id} is out of range [0, {})",
                                    self.n_seq_max
                                ));
                            }
                            if self.seq_to_stream[id as usize] != strm {
                                return fail(format!(
                                    "seq_id {id} is in stream {strm} of the state, but lives in stream {} here",
                                    self.seq_to_stream[id as usize]
                                ));
                            }
                            set.set(id as usize);
                        }
                    }
                }
                pos.push(p);
                seqs.push(set);
            }
            let v_trans = r.u32()?;
            let n_layer = r.u32()?;
            if n_layer as usize != sect.layers.len() {
                return fail(format!(
                    "mismatched layer count ({n_layer} instead of {})",
                    sect.layers.len()
                ));
            }
            if (v_trans != 0) != sect.v_trans {
                return fail("incompatible V transposition");
            }
            let mut k = Vec::with_capacity(sect.layers.len());
            for &il in &sect.layers {
                let l = &self.layers[il];
                let ty = r.i32()?;
                if ty != self.type_k.ggml_id() {
                    return fail(format!(
                        "mismatched key type ({} != {ty}, layer {il})",
                        self.type_k.ggml_id()
                    ));
                }
                let row = self.type_k.row_bytes(l.n_embd_k);
                let row_ref = r.u64()?;
                if row_ref != row as u64 {
                    return fail(format!(
                        "mismatched key row size ({row} != {row_ref}, layer {il})"
                    ));
                }
                k.push(r.tensor(count * row)?.to_vec());
            }
            let mut v = Vec::with_capacity(sect.layers.len());
            for &il in &sect.layers {
                let l = &self.layers[il];
                if l.n_embd_v == 0 {
                    if sect.zero_v > 0 {
                        self.state_parse_zero_v(r, sect, count, il)?;
                    }
                    v.push(Vec::new());
                    continue;
                }
                let ty = r.i32()?;
                if ty != self.type_v.ggml_id() {
                    return fail(format!(
                        "mismatched value type ({} != {ty}, layer {il})",
                        self.type_v.ggml_id()
                    ));
                }
                if !sect.v_trans {
                    let row = self.type_v.row_bytes(l.n_embd_v);
                    let row_ref = r.u64()?;
                    if row_ref != row as u64 {
                        return fail(format!(
                            "mismatched value row size ({row} != {row_ref}, layer {il})"
                        ));
                    }
                    v.push(r.tensor(count * row)?.to_vec());
                } else {
                    let el = self.type_v.type_size();
                    let el_ref = r.u32()?;
                    if el_ref as usize != el {
                        return fail(format!(
                            "mismatched value element size ({el} != {el_ref}, layer {il})"
                        ));
                    }
                    let n_embd_ref = r.u32()?;
                    if n_embd_ref as usize != l.n_embd_v {
                        return fail(format!(
                            "mismatched GQA embedding size ({} != {n_embd_ref}, layer {il})",
                            l.n_embd_v
                        ));
                    }
                    // columns in, rows out
                    let width = l.n_embd_v;
                    let mut rows = vec![0u8; count * width * el];
                    for j in 0..width {
                        let col = r.tensor(count * el)?;
                        for (i, x) in col.chunks_exact(el).enumerate() {
                            let at = (i * width + j) * el;
                            rows[at..at + el].copy_from_slice(x);
                        }
                    }
                    v.push(rows);
                }
            }
            streams.push(StreamState {
                strm,
                pos,
                seqs,
                ext: exts,
                k,
                v,
            });
        }
        Ok(KvRestore { streams })
    }

    /// Whether a restore of sequence `seq` finds its cells: the cells `seq` holds now are
    /// freed first, as upstream's.
    pub fn state_fits(&self, restore: &KvRestore, seq: usize) -> bool {
        restore.streams.iter().all(|st| {
            let cells = &self.streams[st.strm].cells;
            let held = (0..self.size)
                .filter(|&i| cells.seq_has(i, seq) && cells.seq_count(i) == 1)
                .count() as u32;
            self.size - cells.used() + held >= st.pos.len() as u32
        })
    }

    /// Installs a restore parsed by [`KvCache::state_parse`]. A whole restore (`seq` None)
    /// empties the cache (zeroing its rows) and puts the cells at the start of their
    /// streams; a sequence restore removes `seq`'s cells and places the restored ones where
    /// a decode of that many tokens would go. Fails, changing nothing, only where a sequence
    /// finds no room (see [`KvCache::state_fits`]).
    pub fn state_apply(
        &mut self,
        restore: KvRestore,
        seq: Option<usize>,
        sect: &StateLayers,
    ) -> Result<(), StateError> {
        if let Some(q) = seq {
            if !self.state_fits(&restore, q) {
                return fail(format!(
                    "failed to find {} available cells in kv cache",
                    restore.streams.iter().map(|s| s.pos.len()).sum::<usize>()
                ));
            }
        } else {
            self.clear(true);
        }
        let size = self.size as usize;
        for st in restore.streams {
            let rows: Vec<u32> = match seq {
                None => {
                    let cells = &mut self.streams[st.strm].cells;
                    for (i, (&p, set)) in st.pos.iter().zip(&st.seqs).enumerate() {
                        cells.pos_set(i as u32, p);
                        cells.ext_set(i as u32, st.ext[i]);
                        for id in set.iter() {
                            cells.seq_add(i as u32, id);
                        }
                    }
                    self.streams[st.strm].head = 0;
                    (0..st.pos.len() as u32)
                        .map(|i| st.strm as u32 * self.size + i)
                        .collect()
                }
                Some(q) => {
                    self.seq_rm(Some(q), -1, -1);
                    let mut rows = Vec::new();
                    if !self.find_slot(&[(st.strm, st.pos.len() as u32)], &mut rows) {
                        // state_fits counted the room: unreachable
                        return fail("no room for the sequence after all");
                    }
                    self.apply(&rows, &st.pos, &st.seqs, None);
                    // the cells take the saved ext back, as upstream's
                    for (&row, &ext) in rows.iter().zip(&st.ext) {
                        self.streams[st.strm].cells.ext_set(row % self.size, ext);
                    }
                    rows
                }
            };
            for (li, &il) in sect.layers.iter().enumerate() {
                let l = &mut self.layers[il];
                let rk = self.type_k.row_bytes(l.n_embd_k);
                let rv = self.type_v.row_bytes(l.n_embd_v);
                for (i, &row) in rows.iter().enumerate() {
                    let row = row as usize;
                    debug_assert!(row < size * self.streams.len());
                    l.k.set_row_bytes(row, l.n_embd_k, &st.k[li][i * rk..(i + 1) * rk]);
                    if l.n_embd_v > 0 {
                        l.v.set_row_bytes(row, l.n_embd_v, &st.v[li][i * rv..(i + 1) * rv]);
                    }
                }
            }
        }
        Ok(())
    }
}

/// The recurrent part of a state (upstream's `llama_memory_recurrent::state_write`), after
/// the KV cache's on hybrid models:
///
/// ```text
/// u32 cell_count
/// per cell: i32 pos, u32 n_seq_id (0 in a sequence state), i32 seq_id × n_seq_id
/// u32 s_trans = 0, u32 n_layer (every layer of the model)
/// per recurrent layer: i32 r_type (F32), u64 r_row_bytes, the cells' conv rows
///   [a second conv row (PLE): u64 row_bytes, the cells' rows]
/// per recurrent layer: i32 s_type (F32), u64 s_row_bytes, the cells' SSM rows
/// ```
///
/// A sequence has one cell (its state); a whole state lists the cells in index order.
#[derive(Debug)]
pub struct RsRestore {
    /// Position and sequences per cell (sequences empty in a sequence state).
    cells: Vec<(i32, SeqSet)>,
    /// Per layer: the cells' conv rows and SSM rows, row after row.
    rows: Vec<(Vec<f32>, Vec<f32>)>,
}

const GGML_TYPE_F32: i32 = 0;

fn f32_rows(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl RsMemory {
    /// Writes the states of `seq` (None: every sequence).
    pub fn state_write(&self, w: &mut StateWriter, seq: Option<usize>) -> Result<(), StateError> {
        let cells = self.state_cells(seq);
        w.u32(cells.len() as u32)?;
        for &(_, pos, seqs) in &cells {
            w.i32(pos)?;
            if seq.is_some() {
                w.u32(0)?;
            } else {
                w.u32(seqs.count())?;
                for q in seqs.iter() {
                    w.i32(q as i32)?;
                }
            }
        }
        w.u32(0)?;
        w.u32(self.layers.len() as u32)?;
        for conv in [true, false] {
            for l in &self.layers {
                if l.n_r == 0 && l.n_s == 0 {
                    continue;
                }
                let (n, data) = if conv { (l.n_r, &l.r) } else { (l.n_s, &l.s) };
                // a conv row with a second part is written as upstream's two rows
                let parts = if conv && l.n_r2 > 0 {
                    vec![0..n - l.n_r2, n - l.n_r2..n]
                } else {
                    vec![0..n]
                };
                w.i32(GGML_TYPE_F32)?;
                for part in parts {
                    let m = part.len();
                    w.u64(m as u64 * 4)?;
                    w.tensor(cells.len() * m * 4, |buf| {
                        for &(c, _, _) in &cells {
                            for v in &data[c * n + part.start..c * n + part.end] {
                                buf.extend_from_slice(&v.to_le_bytes());
                            }
                        }
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Parses and checks a recurrent state for `seq` (None: the whole memory) without
    /// changing anything (upstream's `state_read` checks, in its order and words).
    pub fn state_parse(
        &self,
        r: &mut StateReader,
        seq: Option<usize>,
    ) -> Result<RsRestore, StateError> {
        let n = r.u32()?;
        if n > self.size() {
            return fail(format!(
                "failed to restore kv cache: not enough cells in kv cache ({n} > {})",
                self.size()
            ));
        }
        if seq.is_some() && n > 1 {
            // upstream asserts here (one sequence holds one state)
            return fail(format!(
                "failed to restore kv cache: {n} recurrent cells for one sequence"
            ));
        }
        let mut cells = Vec::with_capacity(n as usize);
        let mut seen = SeqSet::default();
        for _ in 0..n {
            let pos = r.i32()?;
            let n_seq = r.u32()?;
            let mut seqs = SeqSet::default();
            if seq.is_some() {
                if n_seq != 0 {
                    return fail("failed to restore kv cache: invalid seq_id-agnostic kv cell");
                }
            } else {
                for _ in 0..n_seq {
                    let q = r.i32()?;
                    if q < 0 || q as u32 >= self.n_seq_max() {
                        return fail(format!(
                            "failed to restore kv cache: invalid seq_id, {q} is out of range [0, {})",
                            self.n_seq_max()
                        ));
                    }
                    if seen.test(q as usize) {
                        return fail(format!(
                            "failed to restore kv cache: duplicate tail for seq_id {q}"
                        ));
                    }
                    seen.set(q as usize);
                    seqs.set(q as usize);
                }
            }
            cells.push((pos, seqs));
        }
        let s_trans = r.u32()?;
        let n_layer = r.u32()?;
        if n_layer as usize != self.layers.len() {
            return fail(format!(
                "failed to restore kv cache: mismatched layer count ({n_layer} instead of {})",
                self.layers.len()
            ));
        }
        if s_trans != 0 {
            return fail("failed to restore kv cache: incompatible s transposition");
        }
        let mut rows: Vec<(Vec<f32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); self.layers.len()];
        for conv in [true, false] {
            for (il, l) in self.layers.iter().enumerate() {
                if l.n_r == 0 && l.n_s == 0 {
                    continue;
                }
                let width = if conv { l.n_r } else { l.n_s };
                let what = if conv { "r" } else { "s" };
                let ty = r.i32()?;
                if ty != GGML_TYPE_F32 {
                    return fail(format!(
                        "failed to restore kv cache: mismatched {what} type ({GGML_TYPE_F32} != {ty}, layer {il})"
                    ));
                }
                let second = if conv { l.n_r2 } else { 0 };
                let first = width - second;
                let row = r.u64()?;
                if row != first as u64 * 4 {
                    return fail(format!(
                        "failed to restore kv cache: mismatched {what} row size ({} != {row}, layer {il})",
                        first * 4
                    ));
                }
                let n = n as usize;
                let mut data = f32_rows(r.tensor(n * first * 4)?);
                if second > 0 {
                    let row = r.u64()?;
                    if row != second as u64 * 4 {
                        return fail(format!(
                            "failed to restore kv cache: mismatched ple row size ({} != {row}, layer {il})",
                            second * 4
                        ));
                    }
                    // the two rows of each cell side by side again
                    let tail = f32_rows(r.tensor(n * second * 4)?);
                    let mut joined = Vec::with_capacity(n * width);
                    for c in 0..n {
                        joined.extend_from_slice(&data[c * first..(c + 1) * first]);
                        joined.extend_from_slice(&tail[c * second..(c + 1) * second]);
                    }
                    data = joined;
                }
                if n > 0 {
                    if conv {
                        rows[il].0 = data;
                    } else {
                        rows[il].1 = data;
                    }
                }
            }
        }
        Ok(RsRestore { cells, rows })
    }

    /// Installs a parsed state for `seq` (None: the whole memory).
    pub fn state_apply(
        &mut self,
        restore: RsRestore,
        seq: Option<usize>,
    ) -> Result<(), StateError> {
        let first = match seq {
            None => {
                self.restore_all(&restore.cells);
                0
            }
            Some(q) => match self.restore_seq(q, restore.cells.first().map(|c| c.0)) {
                Some(c) => c,
                None if restore.cells.is_empty() => return Ok(()),
                None => return fail("failed to restore kv cache: failed to find available cells"),
            },
        };
        let n = restore.cells.len();
        for (l, (r, s)) in self.layers.iter_mut().zip(restore.rows) {
            if n == 0 {
                break;
            }
            if l.n_r > 0 {
                l.r[first * l.n_r..(first + n) * l.n_r].copy_from_slice(&r);
            }
            if l.n_s > 0 {
                l.s[first * l.n_s..(first + n) * l.n_s].copy_from_slice(&s);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{KvShape, KvType};
    use super::*;

    fn cache(size: u32) -> KvCache {
        KvCache::new(&KvShape {
            size,
            n_seq_max: 4,
            unified: true,
            type_k: KvType::F16,
            type_v: KvType::F32,
            layers: vec![(4, 4)],
        })
    }

    /// M-RoPE states (upstream's `has_cell_ext`): each cell record carries x, y and the
    /// token after n_seq_id, 12 bytes a cell; whole and sequence restores put them back.
    #[test]
    fn cell_ext_round_trips_through_states() {
        let mut kv = cache(8);
        let mut slots = Vec::new();
        assert!(kv.find_slot(&[(0, 3)], &mut slots));
        kv.apply(
            &slots,
            &[0, 1, 2],
            &[SeqSet::single(0); 3],
            Some(&[7, 8, 9]),
        );
        assert_eq!(kv.cells(0).ext(1), CellExt { x: 1, y: 1, tok: 8 });
        let sect = |cell_ext| StateLayers {
            layers: vec![0],
            n_swa: 0,
            v_trans: false,
            cell_ext,
            zero_v: 0,
            follows: false,
            after_rs: false,
        };
        let write = |kv: &KvCache, seq, ext| {
            let mut out = Vec::new();
            let mut w = StateWriter::new(StateOut::Bytes(&mut out));
            kv.state_write(&mut w, seq, &sect(ext)).unwrap();
            drop(w);
            out
        };
        let (plain, with_ext) = (write(&kv, None, false), write(&kv, None, true));
        assert_eq!(with_ext.len(), plain.len() + 3 * 12);
        // stream count, cell count, then cell 0: pos, n_seq_id, x, y, tok, seq id
        let word = |i: usize| i32::from_le_bytes(with_ext[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(
            (0..8).map(word).collect::<Vec<_>>(),
            [1, 3, 0, 1, 0, 0, 7, 0]
        );
        for seq in [None, Some(1)] {
            let bytes = write(&kv, seq.map(|_| 0), true);
            let mut other = cache(8);
            let mut src = SliceSource::new(&bytes);
            let mut r = StateReader::new(&mut src, None);
            let restore = other.state_parse(&mut r, seq, &sect(true)).unwrap();
            assert_eq!(r.n_bytes(), bytes.len());
            other.state_apply(restore, seq, &sect(true)).unwrap();
            let got: Vec<CellExt> = (0..3).map(|i| other.cells(0).ext(i)).collect();
            let toks: Vec<i32> = got.iter().map(|e| e.tok).collect();
            assert_eq!(toks, [7, 8, 9]);
            assert_eq!(got[2], CellExt { x: 2, y: 2, tok: 9 });
        }
        // an emptied cell forgets its ext
        kv.seq_rm(Some(0), 2, -1);
        assert_eq!(kv.cells(0).ext(2), CellExt::default());
    }

    /// A layer whose V upstream allocates and never fills (MiniMax-M3's indexer cache) is
    /// written with zero V rows (or columns) of the given width after its K rows; reading
    /// checks their header and drops them, the K rows come back.
    #[test]
    fn zero_v_rows_are_written_and_dropped() {
        let mut kv = KvCache::new(&KvShape {
            size: 8,
            n_seq_max: 1,
            unified: true,
            type_k: KvType::F16,
            type_v: KvType::F16,
            layers: vec![(4, 0)],
        });
        let mut slots = Vec::new();
        assert!(kv.find_slot(&[(0, 2)], &mut slots));
        kv.apply(&slots, &[0, 1], &[SeqSet::single(0); 2], None);
        kv.layers[0].k.set_row(1, &[1.0, 2.0, 3.0, 4.0]);
        for v_trans in [false, true] {
            let sect = |zero_v| StateLayers {
                layers: vec![0],
                n_swa: 0,
                v_trans,
                cell_ext: false,
                zero_v,
                follows: true,
                after_rs: false,
            };
            let write = |zero_v| {
                let mut out = Vec::new();
                let mut w = StateWriter::new(StateOut::Bytes(&mut out));
                kv.state_write(&mut w, None, &sect(zero_v)).unwrap();
                drop(w);
                out
            };
            let (without, with) = (write(0), write(3));
            // V type, then the row size (u64) or element size and width (two u32), then
            // 2 cells × 3 zeros of F16
            // (4 + 8 bytes either way)
            let head = 12;
            assert_eq!(with.len(), without.len() + head + 2 * 3 * 2);
            assert_eq!(&with[..without.len()], &without[..]);
            assert!(with[without.len() + head..].iter().all(|&b| b == 0));
            let mut other = KvCache::new(&KvShape {
                size: 8,
                n_seq_max: 1,
                unified: true,
                type_k: KvType::F16,
                type_v: KvType::F16,
                layers: vec![(4, 0)],
            });
            let mut src = SliceSource::new(&with);
            let mut r = StateReader::new(&mut src, None);
            let restore = other.state_parse(&mut r, None, &sect(3)).unwrap();
            assert_eq!(r.n_bytes(), with.len());
            other.state_apply(restore, None, &sect(3)).unwrap();
            let mut row = [0.0f32; 4];
            other.layers[0].k.get_row(1, &mut row);
            assert_eq!(row, [1.0, 2.0, 3.0, 4.0]);
            // another width is refused
            let mut src = SliceSource::new(&with);
            let mut r = StateReader::new(&mut src, None);
            assert!(other.state_parse(&mut r, None, &sect(4)).is_err());
        }
    }
}
