//! The recurrent memory, as upstream's `llama_memory_recurrent`: `size` cells (one per
//! sequence the context allows, `n_seq_max`), each holding one state (per recurrent layer a
//! conv row `r` and an SSM row `s`), the position of the last token folded into it and the
//! set of sequences sharing it; cell `i` also holds sequence `i`'s `tail` (the cell with its
//! state, -1 when it has none).
//!
//! Upstream moves states lazily: a cell's `src` names the row its state is read from at the
//! next graph (copy-on-write of shared cells, the re-ordering that makes a micro-batch's cells
//! contiguous, zeroed states of fresh cells). Here the rows move when [`RsMemory::find_slot`]
//! decides it, so every cell's state always lives in its own row and `src` only says
//! whether it holds one (`src < 0`: a fresh cell whose state starts at zero). The cell
//! bookkeeping (positions, sequence sets, tails, head, the order of the search) follows
//! upstream line by line, so the memory API answers as upstream's does, including its
//! refusals: a state cannot be partly erased (`seq_rm` of a range from inside the sequence
//! through its last position returns false and changes nothing; a range wholly before the
//! last position returns true and changes nothing), and positions only move the last one
//! recorded.

use super::cells::{SeqSet, MAX_SEQ};

/// Recurrent states that could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum RsAllocError {
    #[error("the recurrent state size overflows")]
    Overflow,
    #[error("failed to allocate {bytes} bytes for the recurrent states")]
    OutOfMemory { bytes: u64 },
}

/// `len` zeros, or the error when they cannot be allocated (never an abort).
fn zeroed(len: usize) -> Result<Vec<f32>, RsAllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| RsAllocError::OutOfMemory {
            bytes: (len as u64).saturating_mul(4),
        })?;
    v.resize(len, 0.0);
    Ok(v)
}

/// One cell (upstream's `mem_cell`).
#[derive(Clone, Copy, Debug)]
struct RsCell {
    pos: i32,
    /// >= 0: the cell holds a state (see the module doc); -1: a fresh one starts at zero.
    src: i32,
    /// The cell holding the state of the sequence whose id is this cell's index.
    tail: i32,
    seqs: SeqSet,
}

impl RsCell {
    fn empty() -> RsCell {
        RsCell {
            pos: -1,
            src: -1,
            tail: -1,
            seqs: SeqSet::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.seqs.none()
    }
}

/// One layer's states: `size` rows of `n_r` conv values and of `n_s` SSM values (both 0 on
/// layers that are not recurrent).
#[derive(Debug)]
pub struct RsLayer {
    pub r: Vec<f32>,
    pub s: Vec<f32>,
    pub n_r: usize,
    pub n_s: usize,
    /// The last `n_r2` values of each conv row are upstream's second conv row of the layer
    /// (Qwen4-exp's PLE conv history, its `cache_ple_r_l`), which a state holds right after
    /// the first; 0: none.
    pub n_r2: usize,
}

impl RsLayer {
    /// The conv and SSM rows of cell `cell`.
    pub fn rows_mut(&mut self, cell: usize) -> (&mut [f32], &mut [f32]) {
        (
            &mut self.r[cell * self.n_r..(cell + 1) * self.n_r],
            &mut self.s[cell * self.n_s..(cell + 1) * self.n_s],
        )
    }
}

/// The sequences of a micro-batch as the recurrent memory sees them: per group of tokens
/// sharing a first sequence, in the micro-batch's order, the group's sequence set, its first
/// sequence, the position of its last token and its token count.
#[derive(Clone, Copy, Debug)]
pub struct RsGroup {
    pub seqs: SeqSet,
    pub seq0: usize,
    pub last_pos: i32,
    pub n_tokens: u32,
}

/// Upstream's `llama_memory_recurrent` (see the module doc).
#[derive(Debug)]
pub struct RsMemory {
    cells: Vec<RsCell>,
    head: u32,
    used: u32,
    n_seq_max: u32,
    pub layers: Vec<RsLayer>,
}

impl RsMemory {
    /// A memory of `size` cells (upstream: `max(1, n_seq_max)`) with, per layer, rows of
    /// `(n_r, n_s)` values (zeros: a layer without recurrent state).
    pub fn new(
        size: u32,
        n_seq_max: u32,
        widths: &[(usize, usize)],
    ) -> Result<RsMemory, RsAllocError> {
        let rows = size as usize;
        let layers = widths
            .iter()
            .map(|&(n_r, n_s)| {
                let lr = rows.checked_mul(n_r).ok_or(RsAllocError::Overflow)?;
                let ls = rows.checked_mul(n_s).ok_or(RsAllocError::Overflow)?;
                Ok(RsLayer {
                    r: zeroed(lr)?,
                    s: zeroed(ls)?,
                    n_r,
                    n_s,
                    n_r2: 0,
                })
            })
            .collect::<Result<Vec<_>, RsAllocError>>()?;
        Ok(RsMemory {
            cells: vec![RsCell::empty(); rows],
            head: 0,
            used: 0,
            n_seq_max,
            layers,
        })
    }

    /// Bytes of the states of `size` cells with these widths (upstream's RS buffer size).
    pub fn bytes(size: u32, widths: &[(usize, usize)]) -> Option<u64> {
        widths.iter().try_fold(0u64, |t, &(r, s)| {
            let row = (r as u64).checked_add(s as u64)?.checked_mul(4)?;
            t.checked_add(row.checked_mul(size as u64)?)
        })
    }

    pub fn size(&self) -> u32 {
        self.cells.len() as u32
    }

    /// Cells holding a sequence.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// The cell holding the state of sequence `seq` (after [`RsMemory::find_slot`] placed
    /// the micro-batch: every sequence of it has one).
    pub fn cell_of(&self, seq: usize) -> Option<usize> {
        let t = self.cells.get(seq)?.tail;
        (t >= 0).then_some(t as usize)
    }

    fn size_i(&self) -> i64 {
        self.cells.len() as i64
    }

    /// `llama_memory_clear`: every cell empty; `data` also zeroes the states.
    pub fn clear(&mut self, data: bool) {
        self.cells.fill(RsCell::empty());
        self.head = 0;
        self.used = 0;
        if data {
            for l in &mut self.layers {
                l.r.fill(0.0);
                l.s.fill(0.0);
            }
        }
    }

    fn range(p0: i32, p1: i32) -> (i32, i32) {
        (p0.max(0), if p1 < 0 { i32::MAX } else { p1 })
    }

    /// `seq_rm`: false (nothing changed) for an id outside `[0, n_seq_max)` (negative ids
    /// included, as upstream's unsigned comparison) and for a range that would cut the
    /// sequence's state (a state holds every token up to its position: only ranges that
    /// keep or drop the last position whole can be honoured).
    pub fn seq_rm(&mut self, seq_id: i32, p0: i32, p1: i32) -> bool {
        let (p0, p1) = Self::range(p0, p1);
        if seq_id as u32 >= self.n_seq_max {
            crate::log_error!(
                "seq_rm: invalid seq_id ({seq_id}) - larger than n_seq_max ({})",
                self.n_seq_max
            );
            return false;
        }
        if seq_id as i64 >= self.size_i() {
            return false;
        }
        let size = self.size();
        let mut new_head = size;
        if seq_id >= 0 {
            let tail = self.cells[seq_id as usize].tail;
            if tail >= 0 {
                let pos = self.cells[tail as usize].pos;
                // a partial rollback would need per-token snapshots (upstream's n_rs_seq,
                // 0 by default): refused
                if 0 < p0 && p0 <= pos && p1 > pos {
                    return false;
                }
                if p0 <= pos && pos < p1 {
                    self.cells[seq_id as usize].tail = -1;
                }
            }
        } else if p0 != p1 && (p0 != 0 || p1 != i32::MAX) {
            return false;
        }
        for i in 0..size {
            let c = &mut self.cells[i as usize];
            if !(c.pos >= p0 && c.pos < p1) {
                continue;
            }
            if seq_id < 0 {
                c.seqs = SeqSet::default();
            } else if c.seqs.test(seq_id as usize) {
                c.seqs.reset(seq_id as usize);
            } else {
                continue;
            }
            if c.is_empty() {
                if c.pos >= 0 {
                    self.used -= 1;
                }
                c.pos = -1;
                c.src = -1;
                if new_head == size {
                    new_head = i;
                }
            }
        }
        if new_head != size && new_head < self.head {
            self.head = new_head;
        }
        true
    }

    /// `seq_cp`: `dst` shares the cell of `src` (its own cell, if any, is released first);
    /// positions are ignored, as upstream's (a state is copied whole).
    pub fn seq_cp(&mut self, src: i32, dst: i32, _p0: i32, _p1: i32) {
        if src == dst {
            return;
        }
        let size = self.size();
        if (dst as u32) < size && (src as u32) < size {
            let (src, dst) = (src as usize, dst as usize);
            let dt = self.cells[dst].tail;
            if dt >= 0 {
                let c = &mut self.cells[dt as usize];
                c.seqs.reset(dst);
                self.cells[dst].tail = -1;
                let c = &mut self.cells[dt as usize];
                if c.is_empty() {
                    c.pos = -1;
                    c.src = -1;
                    self.used -= 1;
                }
            }
            let st = self.cells[src].tail;
            if st >= 0 {
                self.cells[st as usize].seqs.set(dst);
                self.cells[dst].tail = st;
            }
        }
    }

    /// `seq_keep`: every cell not holding `seq` is emptied, the others hold `seq` only.
    pub fn seq_keep(&mut self, seq: i32) {
        let size = self.size();
        let mut new_head = size;
        for i in 0..size {
            let c = &mut self.cells[i as usize];
            if i as i32 != seq {
                c.tail = -1;
            }
            let has = seq >= 0 && (seq as usize) < MAX_SEQ && c.seqs.test(seq as usize);
            if !has {
                if c.pos >= 0 {
                    self.used -= 1;
                }
                c.pos = -1;
                c.src = -1;
                c.seqs = SeqSet::default();
                if new_head == size {
                    new_head = i;
                }
            } else {
                c.seqs = SeqSet::single(seq as usize);
            }
        }
        if new_head != size && new_head < self.head {
            self.head = new_head;
        }
    }

    /// The cell of `seq`'s state when its position is in [p0, p1), for `seq_add`/`seq_div`.
    fn tail_in(&mut self, seq: i32, p0: i32, p1: i32) -> Option<&mut RsCell> {
        if p0 == p1 || seq < 0 || seq as i64 >= self.size_i() {
            return None;
        }
        let t = self.cells[seq as usize].tail;
        if t < 0 {
            return None;
        }
        let c = &mut self.cells[t as usize];
        (c.seqs.test(seq as usize) && p0 <= c.pos && c.pos < p1).then_some(c)
    }

    /// `seq_add`: only the recorded position moves.
    pub fn seq_add(&mut self, seq: i32, p0: i32, p1: i32, shift: i32) {
        if shift == 0 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if let Some(c) = self.tail_in(seq, p0, p1) {
            c.pos += shift;
        }
    }

    /// `seq_div`: only the recorded position changes.
    pub fn seq_div(&mut self, seq: i32, p0: i32, p1: i32, d: i32) {
        if d == 1 {
            return;
        }
        let (p0, p1) = Self::range(p0, p1);
        if let Some(c) = self.tail_in(seq, p0, p1) {
            c.pos /= d;
        }
    }

    fn holds(c: &RsCell, seq: i32) -> bool {
        seq >= 0 && (seq as usize) < MAX_SEQ && c.seqs.test(seq as usize)
    }

    /// The smallest recorded position of a cell holding `seq` (-1: none).
    pub fn seq_pos_min(&self, seq: i32) -> i32 {
        let m = self
            .cells
            .iter()
            .filter(|c| Self::holds(c, seq))
            .map(|c| c.pos)
            .min()
            .unwrap_or(i32::MAX);
        if m == i32::MAX {
            -1
        } else {
            m
        }
    }

    /// The largest recorded position of a cell holding `seq` (-1: none).
    pub fn seq_pos_max(&self, seq: i32) -> i32 {
        self.cells
            .iter()
            .filter(|c| Self::holds(c, seq))
            .map(|c| c.pos)
            .fold(-1, i32::max)
    }

    fn copy_state(&mut self, from: usize, to: usize) {
        for l in &mut self.layers {
            l.r.copy_within(from * l.n_r..(from + 1) * l.n_r, to * l.n_r);
            l.s.copy_within(from * l.n_s..(from + 1) * l.n_s, to * l.n_s);
        }
    }

    fn swap_state(&mut self, a: usize, b: usize) {
        let (a, b) = (a.min(b), a.max(b));
        for l in &mut self.layers {
            for (buf, n) in [(&mut l.r, l.n_r), (&mut l.s, l.n_s)] {
                let (lo, hi) = buf.split_at_mut(b * n);
                lo[a * n..(a + 1) * n].swap_with_slice(&mut hi[..n]);
            }
        }
    }

    /// The cells a state of `seq` (None: every sequence) holds, in index order (upstream's
    /// `state_write`: the non-empty cells, or those holding `seq`), each with its position
    /// and sequences.
    pub fn state_cells(&self, seq: Option<usize>) -> Vec<(usize, i32, SeqSet)> {
        self.cells
            .iter()
            .enumerate()
            .filter(|(_, c)| match seq {
                None => !c.is_empty(),
                Some(q) => c.seqs.test(q),
            })
            .map(|(i, c)| (i, c.pos, c.seqs))
            .collect()
    }

    /// The sequence ids this memory holds (`n_seq_max`).
    pub fn n_seq_max(&self) -> u32 {
        self.n_seq_max
    }

    /// A whole restore's bookkeeping (upstream's `state_read_meta` for seq_id -1): the
    /// memory emptied and zeroed, then `cells` (position, sequences; checked by the caller:
    /// ids below `n_seq_max`, each in one cell, at most `size` cells) become cells 0.., each
    /// the tail of its sequences, holding the state the caller copies into its rows.
    pub fn restore_all(&mut self, cells: &[(i32, SeqSet)]) {
        self.clear(true);
        for (i, &(pos, seqs)) in cells.iter().enumerate() {
            self.cells[i].pos = pos;
            self.cells[i].seqs = seqs;
            self.cells[i].src = i as i32;
            for q in seqs.iter() {
                self.cells[q].tail = i as i32;
            }
        }
        self.head = 0;
        self.used = cells.len() as u32;
    }

    /// A sequence restore's bookkeeping (upstream's `state_read_meta` for one sequence):
    /// the sequence removed, then (`pos` Some: a state to restore) a cell found for it as
    /// for a micro-batch ending at `pos`; returns that cell, whose rows the caller fills.
    pub fn restore_seq(&mut self, seq: usize, pos: Option<i32>) -> Option<usize> {
        self.seq_rm(seq as i32, -1, -1);
        let pos = pos?;
        let group = RsGroup {
            seqs: SeqSet::single(seq),
            seq0: seq,
            last_pos: pos,
            n_tokens: 1,
        };
        if !self.find_slot(&[group]) {
            return None;
        }
        self.cell_of(seq)
    }

    fn zero_state(&mut self, c: usize) {
        for l in &mut self.layers {
            l.r[c * l.n_r..(c + 1) * l.n_r].fill(0.0);
            l.s[c * l.n_s..(c + 1) * l.n_s].fill(0.0);
        }
    }

    /// Upstream's `find_slot` for one micro-batch: each group's first sequence gets a cell
    /// of its own (a shared one is copied, copy-on-write), the cells are re-ordered to be
    /// contiguous in the groups' order, and record the last positions; fresh cells start
    /// from a zero state. False (logged) for a sequence id the memory cannot hold.
    pub fn find_slot(&mut self, groups: &[RsGroup]) -> bool {
        let size = self.size();
        let n_seqs = groups.len() as u32;
        if n_seqs == 0 {
            return true;
        }
        if self.head > self.used + 2 * n_seqs {
            self.head = 0;
        }
        for g in groups {
            for seq in g.seqs.iter().filter(|&s| s != g.seq0).chain([g.seq0]) {
                if seq as u32 >= size {
                    crate::log_error!(
                        "find_slot: seq_id={seq} >= n_seq_max={} Try using a bigger --parallel value",
                        self.n_seq_max
                    );
                    return false;
                }
            }
            // the other sequences of the group give up their own cells
            for seq in g.seqs.iter().filter(|&s| s != g.seq0) {
                let t = self.cells[seq].tail;
                if t >= 0 {
                    let c = &mut self.cells[t as usize];
                    c.seqs.reset(seq);
                    let emptied = c.is_empty();
                    if emptied {
                        c.pos = -1;
                        c.src = -1;
                    }
                    self.cells[seq].tail = -1;
                    if emptied {
                        self.used -= 1;
                    }
                }
            }
        }
        let mut next_empty = self.head;
        for _ in 0..size {
            if next_empty >= size {
                next_empty -= size;
            }
            if self.cells[next_empty as usize].is_empty() {
                break;
            }
            next_empty += 1;
        }
        let (mut min, mut max) = (size as i32 - 1, 0i32);
        for (s, g) in groups.iter().enumerate() {
            let seq = g.seq0;
            let tail = self.cells[seq].tail;
            let owns = tail >= 0 && self.cells[tail as usize].seqs.count() == 1;
            if !owns {
                let e = next_empty as usize;
                if e >= self.cells.len() || !self.cells[e].is_empty() {
                    crate::log_error!("find_slot: no empty cell for sequence {seq}");
                    return false;
                }
                if tail >= 0 {
                    let orig = self.cells[tail as usize];
                    self.cells[e].pos = orig.pos;
                    self.cells[e].src = orig.src;
                    self.cells[tail as usize].seqs.reset(seq);
                    self.cells[e].seqs.set(seq);
                    self.copy_state(tail as usize, e);
                }
                self.cells[seq].tail = e as i32;
                if (s as u32) + 1 < n_seqs {
                    for _ in 0..size {
                        next_empty += 1;
                        if next_empty >= size {
                            next_empty -= size;
                        }
                        if self.cells[next_empty as usize].is_empty() {
                            break;
                        }
                    }
                }
            }
            let t = self.cells[seq].tail;
            min = min.min(t);
            max = max.max(t);
        }
        // gather: the groups' cells become min, min + 1, ...
        for (s, g) in groups.iter().enumerate() {
            let dst = s as i32 + min;
            let src = self.cells[g.seq0].tail;
            if dst != src {
                let (d, sr) = (dst as usize, src as usize);
                let (a, b) = (self.cells[d], self.cells[sr]);
                (self.cells[d].pos, self.cells[sr].pos) = (b.pos, a.pos);
                (self.cells[d].src, self.cells[sr].src) = (b.src, a.src);
                (self.cells[d].seqs, self.cells[sr].seqs) = (b.seqs, a.seqs);
                self.swap_state(d, sr);
                for c in &mut self.cells {
                    if c.tail == src {
                        c.tail = dst;
                    } else if c.tail == dst {
                        c.tail = src;
                    }
                }
            }
        }
        for (s, g) in groups.iter().enumerate() {
            let id = (s as i32 + min) as usize;
            let c = &mut self.cells[id];
            if c.pos >= 0 && g.last_pos != c.pos + g.n_tokens as i32 {
                crate::log_warn!(
                    "find_slot: non-consecutive token position {} after {} for sequence {} with {} new tokens",
                    g.last_pos,
                    c.pos,
                    g.seq0,
                    g.n_tokens
                );
            }
            c.pos = g.last_pos;
            c.seqs = g.seqs;
            for seq in g.seqs.iter() {
                self.cells[seq].tail = id as i32;
            }
        }
        // fresh cells of the range start from a zero state
        for i in min..=max {
            let i = i as usize;
            if self.cells[i].src < 0 {
                self.zero_state(i);
            }
            self.cells[i].src = i as i32;
        }
        self.head = min as u32;
        self.used = self.cells.iter().filter(|c| !c.is_empty()).count() as u32;
        max - min + 1 >= n_seqs as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(n: u32) -> RsMemory {
        RsMemory::new(n, n, &[(2, 3)]).unwrap()
    }

    fn step(m: &mut RsMemory, seq: usize, last_pos: i32, n: u32) -> usize {
        let g = RsGroup {
            seqs: SeqSet::single(seq),
            seq0: seq,
            last_pos,
            n_tokens: n,
        };
        assert!(m.find_slot(&[g]));
        m.cell_of(seq).unwrap()
    }

    fn mark(m: &mut RsMemory, cell: usize, v: f32) {
        let (r, s) = m.layers[0].rows_mut(cell);
        r.fill(v);
        s.fill(v);
    }

    fn state(m: &mut RsMemory, seq: usize) -> f32 {
        let c = m.cell_of(seq).unwrap();
        m.layers[0].rows_mut(c).1[0]
    }

    /// seq_rm of a range that cuts the state (from inside the sequence through its last
    /// position) is refused and changes nothing; a middle range before the last position
    /// succeeds and changes nothing either (upstream's answers, checked against its library
    /// by ffi-tests/engine/probe_recurrent.c).
    #[test]
    fn seq_rm_refuses_partial_ranges_and_keeps_the_state() {
        let mut m = mem(2);
        let c = step(&mut m, 0, 9, 10);
        mark(&mut m, c, 7.0);
        assert!(m.seq_rm(0, 3, 6), "a middle range: true, nothing removed");
        assert!(!m.seq_rm(0, 5, -1), "tail range cutting the state");
        assert!(
            !m.seq_rm(0, 5, 12),
            "a bounded range through the last position"
        );
        assert_eq!((m.seq_pos_min(0), m.seq_pos_max(0)), (9, 9));
        assert_eq!(state(&mut m, 0), 7.0);
        assert!(m.seq_rm(0, 10, -1), "a range after the last position");
        assert!(m.seq_rm(0, 0, 5), "a prefix before it: nothing to remove");
        assert_eq!(m.seq_pos_max(0), 9);
        assert!(
            !m.seq_rm(-1, -1, -1),
            "negative ids fail the n_seq_max check"
        );
        assert!(!m.seq_rm(2, -1, -1), "id >= n_seq_max");
        assert!(m.seq_rm(0, -1, -1));
        assert_eq!(m.seq_pos_max(0), -1);
        assert_eq!(m.used(), 0);
    }

    /// seq_cp shares the state; the next step of the copy gets its own copy (the source's
    /// state untouched); a fresh sequence starts from zero.
    #[test]
    fn seq_cp_copies_on_write_and_fresh_cells_start_at_zero() {
        let mut m = mem(3);
        let c0 = step(&mut m, 0, 4, 5);
        mark(&mut m, c0, 3.0);
        m.seq_cp(0, 1, -1, -1);
        assert_eq!(m.seq_pos_max(1), 4);
        assert_eq!(m.cell_of(1), m.cell_of(0));
        let c1 = step(&mut m, 1, 5, 1);
        assert_ne!(Some(c1), m.cell_of(0));
        assert_eq!(state(&mut m, 1), 3.0);
        mark(&mut m, c1, 5.0);
        assert_eq!(state(&mut m, 0), 3.0);
        assert_eq!((m.seq_pos_max(0), m.seq_pos_max(1)), (4, 5));
        let c2 = step(&mut m, 2, 0, 1);
        assert_eq!(state(&mut m, 2), 0.0, "cell {c2} starts from zero");
        m.seq_keep(1);
        assert_eq!(
            (m.seq_pos_max(0), m.seq_pos_max(1), m.seq_pos_max(2)),
            (-1, 5, -1)
        );
        assert_eq!(state(&mut m, 1), 5.0);
        assert_eq!(m.used(), 1);
    }

    /// Two sequences in one micro-batch get contiguous cells in the groups' order, their
    /// states following them through the re-ordering.
    #[test]
    fn find_slot_gathers_the_groups_cells_with_their_states() {
        let mut m = mem(4);
        let a = step(&mut m, 3, 0, 1);
        mark(&mut m, a, 30.0);
        let b = step(&mut m, 1, 0, 1);
        mark(&mut m, b, 10.0);
        let g = |s: usize| RsGroup {
            seqs: SeqSet::single(s),
            seq0: s,
            last_pos: 1,
            n_tokens: 1,
        };
        assert!(m.find_slot(&[g(1), g(3)]));
        let (c1, c3) = (m.cell_of(1).unwrap(), m.cell_of(3).unwrap());
        assert_eq!(c3, c1 + 1);
        assert_eq!((state(&mut m, 1), state(&mut m, 3)), (10.0, 30.0));
        m.seq_add(1, 0, -1, 5);
        m.seq_div(3, 0, -1, 2);
        assert_eq!((m.seq_pos_max(1), m.seq_pos_max(3)), (6, 0));
    }
}
