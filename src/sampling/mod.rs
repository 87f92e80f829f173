//! Samplers: safe Rust behind the `llama_sampler_*` C API (src/ffi/sampling.rs).
//!
//! A sampler transforms a [`Candidates`] view over the caller's `llama_token_data_array`
//! in place, exactly as upstream's (src/llama-sampler.cpp): it may reorder the caller's array,
//! shrink its `size`, set `selected` and `sorted`. The arithmetic (sort order and tie-breaking,
//! softmax in `f32`, cumulative cut-offs, `min_keep`) and the random stream (`std::mt19937`
//! with libstdc++'s distributions) follow upstream bit for bit, so the same seed picks the same
//! tokens with either library.
//!
//! One file per sampler family; [`Sampler`] is the contract the C wrapper (and the grammar
//! sampler) implement.

#![forbid(unsafe_code)]

pub mod array;
pub mod backend;
pub mod basic;
pub mod dry;
pub mod grammar;
pub mod infill;
pub mod mirostat;
pub mod penalties;

/// One candidate token: id, logit and probability (layout of upstream's `llama_token_data`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenData {
    pub id: i32,
    pub logit: f32,
    pub p: f32,
}

/// A shrinkable view over the caller's candidate array (`llama_token_data_array`).
///
/// `buf` is the caller's memory, `len` the current `size`: samplers may reorder the elements
/// in `buf[..len]` and shrink `len`, as upstream's do. Elements past `len` stay in the
/// caller's memory (upstream's partial sorts leave them reordered there, and so do ours).
pub struct Candidates<'a> {
    buf: &'a mut [TokenData],
    len: usize,
    offset: usize,
    /// Index into the current data (not a token id), -1 when nothing is selected.
    pub selected: i64,
    /// Whether the data is sorted by descending logit.
    pub sorted: bool,
}

impl<'a> Candidates<'a> {
    /// A view of all of `buf` (`size == buf.len()`).
    pub fn new(buf: &'a mut [TokenData], selected: i64, sorted: bool) -> Self {
        let len = buf.len();
        Candidates {
            buf,
            len,
            offset: 0,
            selected,
            sorted,
        }
    }

    /// The current `size`.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The current candidates, `data[..size]`.
    pub fn data(&self) -> &[TokenData] {
        &self.buf[..self.len]
    }

    /// The current candidates, mutable.
    pub fn data_mut(&mut self) -> &mut [TokenData] {
        &mut self.buf[..self.len]
    }

    /// The whole caller array, including elements past `size` (for partial sorts that work
    /// over the caller's memory).
    pub fn buffer_mut(&mut self) -> &mut [TokenData] {
        self.buf
    }

    /// Shrinks `size` to `n` (no-op when `n >= size`).
    pub fn truncate(&mut self, n: usize) {
        self.len = n.min(self.len);
    }

    /// Moves the start of the array `n` elements forward (`cur_p->data += n`, as upstream's
    /// XTC does) and shrinks `size` by `n`.
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        let buf = std::mem::take(&mut self.buf);
        self.buf = &mut buf[n..];
        self.len -= n;
        self.offset += n;
    }

    /// How far [`Candidates::advance`] moved the start, for writing `data` back.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Sets `size` to `n`, which may grow it back up to the caller's original array length
    /// (upstream samplers only grow back to a size they had before).
    pub fn set_len(&mut self, n: usize) {
        self.len = n.min(self.buf.len());
    }
}

/// A sampler: upstream's `llama_sampler_i` as a safe trait. The C wrapper
/// (`sampler_into_raw` in `crate::ffi::sampling`) turns a `Box<dyn Sampler>` into a
/// `struct llama_sampler *` with a C interface table.
pub trait Sampler: Send {
    /// The name `llama_sampler_name` returns (upstream's, e.g. "top-k").
    fn name(&self) -> &str;
    /// Tells the sampler that `token` was chosen.
    fn accept(&mut self, _token: i32) {}
    /// Transforms the candidates in place.
    fn apply(&mut self, cur: &mut Candidates);
    /// Resets the sampler's state (upstream's `reset`).
    fn reset(&mut self) {}
    /// A copy with the same configuration and state; `None` when it cannot be cloned.
    fn clone_sampler(&self) -> Option<Box<dyn Sampler>>;
    /// The seed in use (upstream's `seed_cur`) for samplers with a random stream.
    fn seed(&self) -> Option<u32> {
        None
    }
    /// Upstream's `backend_init` when a chain is attached to a context: `None` for a sampler
    /// without a backend form (it ends the chain's backend prefix), else whether it runs inside
    /// the decode for up to `n_outputs_max_per_seq` outputs per sequence.
    fn backend_init(&mut self, _n_outputs_max_per_seq: u32) -> Option<bool> {
        None
    }
    /// Upstream's `backend_apply` on one output row (see [`backend`]).
    fn backend_apply(&mut self, _row: &mut backend::Row) {}
    /// The start of a decode's sampling (upstream's `llama_sampler_backend_begin`).
    fn backend_begin(&mut self) {}
    /// Whether `llama_sampler_name` marks the sampler "+name" / "-name" after `backend_init`
    /// (upstream's samplers with a backend form do; the empty sampler does not).
    fn backend_marks_name(&self) -> bool {
        true
    }
}

/// What the vocabulary-dependent samplers (DRY's sequence breakers, infill) need from a
/// model's vocabulary; the C layer implements it over a `llama_vocab`.
pub trait VocabAccess: Send + Sync {
    fn n_tokens(&self) -> i32;
    fn is_eog(&self, id: i32) -> bool;
    /// The end-of-turn token, or -1.
    fn eot(&self) -> i32;
    /// The end-of-sequence token, or -1.
    fn eos(&self) -> i32;
    /// `token_to_piece(id, lstrip = 0, special = false)`.
    fn piece(&self, id: i32) -> Vec<u8>;
    /// `detokenize({id}, special = true)`; `None` when detokenization is unavailable.
    fn detokenize_one(&self, id: i32) -> Option<Vec<u8>>;
    /// `tokenize(text, add_special = false, parse_special = false)`; `None` when
    /// tokenization is unavailable.
    fn tokenize(&self, text: &[u8]) -> Option<Vec<i32>>;
}
