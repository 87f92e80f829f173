//! The cells of a KV cache, as upstream's `llama_kv_cells`: one position and one set of
//! sequence ids per cell, the count of used cells, the pending position shifts (applied to the
//! cached keys by re-rotating them before the next decode), and per sequence a multiset of the
//! positions it holds (for `seq_pos_min`/`seq_pos_max` in O(log n)).

/// Upstream's `LLAMA_MAX_SEQ`.
pub const MAX_SEQ: usize = 256;

/// A set of sequence ids (a 256-bit bitset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqSet([u64; 4]);

impl SeqSet {
    pub fn single(seq: usize) -> SeqSet {
        let mut s = SeqSet::default();
        s.set(seq);
        s
    }
    pub fn set(&mut self, seq: usize) {
        self.0[seq / 64] |= 1 << (seq % 64);
    }
    pub fn reset(&mut self, seq: usize) {
        self.0[seq / 64] &= !(1 << (seq % 64));
    }
    pub fn test(&self, seq: usize) -> bool {
        self.0[seq / 64] & (1 << (seq % 64)) != 0
    }
    pub fn none(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    /// The lowest id in the set.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_SEQ).filter(|&s| self.test(s))
    }
    pub fn and(&self, other: &SeqSet) -> SeqSet {
        let mut out = *self;
        for (w, o) in out.0.iter_mut().zip(other.0.iter()) {
            *w &= o;
        }
        out
    }
}

/// What upstream keeps per cell beside the position (`llama_kv_cell_ext`): the 2D position
/// of M-RoPE models (`x`, `y`: a text token's position in both) and the token id (-1, upstream's
/// `LLAMA_TOKEN_NULL`, for input embeddings). States of M-RoPE models carry it per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellExt {
    pub x: i32,
    pub y: i32,
    pub tok: i32,
}

impl Default for CellExt {
    fn default() -> CellExt {
        CellExt {
            x: 0,
            y: 0,
            tok: -1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct KvCells {
    pos: Vec<i32>,
    ext: Vec<CellExt>,
    seq: Vec<SeqSet>,
    shift: Vec<i32>,
    has_shift: bool,
    used: u32,
    /// Highest used index + 1 (cells at or after it are empty).
    used_max_p1: u32,
    seq_pos: Vec<Vec<(i32, u32)>>,
}

impl KvCells {
    /// Cells for sequence ids below `n_seq_max` (at most [`MAX_SEQ`]).
    pub fn new(size: u32, n_seq_max: usize) -> KvCells {
        Self::for_seqs(size, 0..n_seq_max)
    }

    /// Cells whose position sets are pre-sized for the sequence ids in `seqs` (others may
    /// still be added; their sets grow on demand).
    pub fn for_seqs(size: u32, seqs: std::ops::Range<usize>) -> KvCells {
        let seq_pos = (0..MAX_SEQ)
            .map(|s| {
                if seqs.contains(&s) {
                    Vec::with_capacity(size as usize)
                } else {
                    Vec::new()
                }
            })
            .collect();
        KvCells {
            pos: vec![-1; size as usize],
            ext: vec![CellExt::default(); size as usize],
            seq: vec![SeqSet::default(); size as usize],
            shift: vec![0; size as usize],
            has_shift: false,
            used: 0,
            used_max_p1: 0,
            seq_pos,
        }
    }

    pub fn size(&self) -> u32 {
        self.pos.len() as u32
    }

    pub fn used(&self) -> u32 {
        self.used
    }

    /// One past the highest non-empty cell (cells from here on are empty).
    pub fn used_max_p1(&self) -> u32 {
        self.used_max_p1
    }

    pub fn reset(&mut self) {
        self.pos.fill(-1);
        self.ext.fill(CellExt::default());
        self.seq.fill(SeqSet::default());
        self.shift.fill(0);
        self.has_shift = false;
        self.used = 0;
        self.used_max_p1 = 0;
        for m in &mut self.seq_pos {
            m.clear();
        }
    }

    pub fn is_empty(&self, i: u32) -> bool {
        self.pos[i as usize] == -1
    }

    pub fn pos(&self, i: u32) -> i32 {
        self.pos[i as usize]
    }

    pub fn ext(&self, i: u32) -> CellExt {
        self.ext[i as usize]
    }

    pub fn ext_set(&mut self, i: u32, ext: CellExt) {
        self.ext[i as usize] = ext;
    }

    pub fn seqs(&self, i: u32) -> &SeqSet {
        &self.seq[i as usize]
    }

    pub fn seq_has(&self, i: u32, seq: usize) -> bool {
        self.seq[i as usize].test(seq)
    }

    pub fn seq_count(&self, i: u32) -> u32 {
        self.seq[i as usize].count()
    }

    pub fn pos_in(&self, i: u32, p0: i32, p1: i32) -> bool {
        let p = self.pos[i as usize];
        p >= p0 && p < p1
    }

    pub fn shift(&self, i: u32) -> i32 {
        self.shift[i as usize]
    }

    pub fn has_shift(&self) -> bool {
        self.has_shift
    }

    pub fn reset_shift(&mut self) {
        self.has_shift = false;
        self.shift.fill(0);
    }

    fn seq_pos_inc(&mut self, seq: usize, p: i32) {
        let v = &mut self.seq_pos[seq];
        match v.last_mut() {
            Some(last) if last.0 == p => last.1 += 1,
            Some(last) if last.0 < p => v.push((p, 1)),
            None => v.push((p, 1)),
            _ => match v.binary_search_by_key(&p, |e| e.0) {
                Ok(i) => v[i].1 += 1,
                Err(i) => v.insert(i, (p, 1)),
            },
        }
    }

    fn seq_pos_dec(&mut self, seq: usize, p: i32) {
        let v = &mut self.seq_pos[seq];
        if let Ok(i) = v.binary_search_by_key(&p, |e| e.0) {
            v[i].1 -= 1;
            if v[i].1 == 0 {
                v.remove(i);
            }
        }
    }

    fn seq_pos_rm(&mut self, i: u32) {
        let p = self.pos[i as usize];
        let seqs = self.seq[i as usize];
        for s in seqs.iter() {
            self.seq_pos_dec(s, p);
        }
    }

    fn seq_pos_add(&mut self, i: u32) {
        let p = self.pos[i as usize];
        let seqs = self.seq[i as usize];
        for s in seqs.iter() {
            self.seq_pos_inc(s, p);
        }
    }

    fn mark_empty(&mut self, i: u32) {
        let iu = i as usize;
        self.pos[iu] = -1;
        self.ext[iu] = CellExt::default();
        self.seq[iu] = SeqSet::default();
        self.shift[iu] = 0;
        self.used -= 1;
        if i + 1 == self.used_max_p1 {
            while self.used_max_p1 > 0 && self.pos[self.used_max_p1 as usize - 1] == -1 {
                self.used_max_p1 -= 1;
            }
        }
    }

    /// Empties a used cell.
    pub fn rm(&mut self, i: u32) {
        debug_assert!(!self.is_empty(i));
        self.seq_pos_rm(i);
        self.mark_empty(i);
    }

    /// Sets the position of an empty cell (it becomes used, with no sequence yet).
    pub fn pos_set(&mut self, i: u32, p: i32) {
        debug_assert!(self.is_empty(i));
        self.pos[i as usize] = p;
        self.used += 1;
        self.used_max_p1 = self.used_max_p1.max(i + 1);
    }

    /// Adds `seq` to a used cell.
    pub fn seq_add(&mut self, i: u32, seq: usize) {
        debug_assert!(!self.is_empty(i));
        if !self.seq[i as usize].test(seq) {
            self.seq[i as usize].set(seq);
            self.seq_pos_inc(seq, self.pos[i as usize]);
        }
    }

    /// Removes `seq` from a cell holding it; true when the cell became empty.
    pub fn seq_rm(&mut self, i: u32, seq: usize) -> bool {
        self.seq[i as usize].reset(seq);
        self.seq_pos_dec(seq, self.pos[i as usize]);
        if self.seq[i as usize].none() {
            self.mark_empty(i);
            return true;
        }
        false
    }

    /// Keeps only `seq` in the cell; true when the cell became empty.
    pub fn seq_keep(&mut self, i: u32, seq: usize) -> bool {
        if self.is_empty(i) {
            return false;
        }
        if self.seq[i as usize].test(seq) {
            self.seq_pos_rm(i);
            self.seq[i as usize] = SeqSet::single(seq);
            self.seq_pos_inc(seq, self.pos[i as usize]);
            return false;
        }
        self.rm(i);
        true
    }

    /// Adds `d` to the position; true when the cell became empty (position below zero).
    pub fn pos_add(&mut self, i: u32, d: i32) -> bool {
        self.seq_pos_rm(i);
        let iu = i as usize;
        self.pos[iu] += d;
        self.shift[iu] += d;
        self.has_shift = true;
        if self.pos[iu] < 0 {
            // the multiset entries are already gone: only the cell itself is cleared
            self.pos[iu] = 0; // so mark_empty's scan sees it as used until cleared
            self.mark_empty(i);
            return true;
        }
        self.seq_pos_add(i);
        false
    }

    /// Divides the position by `d`. The pending shift records the change of position
    /// (new - old), so the cached key is re-rotated to its new position. Upstream records
    /// old - new here, which rotates the key the wrong way (and breaks `pos - shift` as the
    /// original position); we do not copy that.
    pub fn pos_div(&mut self, i: u32, d: i32) {
        self.seq_pos_rm(i);
        let iu = i as usize;
        let old = self.pos[iu];
        self.pos[iu] = old / d;
        self.shift[iu] += self.pos[iu] - old;
        self.seq_pos_add(i);
        self.has_shift = true;
    }

    /// Smallest position of `seq`, -1 when it has none.
    pub fn seq_pos_min(&self, seq: usize) -> i32 {
        self.seq_pos[seq].first().map_or(-1, |e| e.0)
    }

    /// Largest position of `seq`, -1 when it has none.
    pub fn seq_pos_max(&self, seq: usize) -> i32 {
        self.seq_pos[seq].last().map_or(-1, |e| e.0)
    }
}
