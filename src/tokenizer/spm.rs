//! SentencePiece BPE by score (upstream's `llm_tokenizer_spm_session`, src/llama-vocab.cpp).
//!
//! The text (already space-prefixed and with spaces escaped to `▁` by the caller) is split into
//! UTF-8 characters (by upstream's lead-byte table); adjacent pairs whose concatenation is a token are merged, highest token
//! score first (leftmost on ties), until no pair merges. Each final symbol becomes its token,
//! or its bytes as `<0xXX>` tokens when the symbol is not one.
//!
//! Upstream also records a `rev_merge` map to re-split symbols that are not tokens; it only ever
//! holds texts that *are* tokens and is only consulted for texts that are not, so it never
//! matches and is left out here.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{unicode, TokenizerError};
use crate::model::vocab::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    prev: i32,
    next: i32,
    start: usize,
    len: usize,
}

/// A candidate merge of two adjacent symbols; the heap pops the highest score first and the
/// leftmost among equal scores (upstream's comparator).
#[derive(Clone, Copy)]
struct Bigram {
    left: i32,
    right: i32,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// The SPM tokenizer. Upstream keeps no state for it beyond the vocabulary; the byte tokens
/// are looked up once here.
#[derive(Debug)]
pub struct SpmTokenizer {
    /// `byte_to_token` for every byte (None where upstream would throw: no such token).
    byte_tokens: [Option<i32>; 256],
}

impl SpmTokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let mut byte_tokens = [None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = byte_token(vocab, b as u8);
        }
        Ok(SpmTokenizer { byte_tokens })
    }

    /// Tokenizes one raw-text fragment that is valid UTF-8 (see [`Self::tokenize_bytes`]).
    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    /// Tokenizes one fragment as upstream's session does: `text` is what upstream hands the
    /// session (space prefix added and spaces escaped already). Bytes that are not valid UTF-8
    /// are split as upstream's lead-byte table says and fall back to byte tokens.
    pub fn tokenize_bytes(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        if text.is_empty() {
            return;
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        let mut offs = 0;
        while offs < text.len() {
            let len = unicode::len_utf8(text[offs]).min(text.len() - offs);
            let index = symbols.len() as i32;
            offs += len;
            symbols.push(Symbol {
                prev: index - 1,
                next: if offs == text.len() { -1 } else { index + 1 },
                start: offs - len,
                len,
            });
        }

        let mut queue = BinaryHeap::with_capacity(symbols.len());
        let try_add =
            |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: i32, right: i32| {
                if left == -1 || right == -1 {
                    return;
                }
                let (l, r) = (symbols[left as usize], symbols[right as usize]);
                let size = l.len + r.len;
                let Some(id) = vocab.text_to_token(&text[l.start..l.start + size]) else {
                    return;
                };
                let Some(token) = vocab.token(id) else {
                    return;
                };
                queue.push(Bigram {
                    left,
                    right,
                    score: token.score,
                    size,
                });
            };

        for i in 1..symbols.len() as i32 {
            try_add(&symbols, &mut queue, i - 1, i);
        }

        while let Some(bigram) = queue.pop() {
            let (l, r) = (bigram.left as usize, bigram.right as usize);
            let (left_len, right_len) = (symbols[l].len, symbols[r].len);
            // One of the two already merged elsewhere: a stale entry.
            if left_len == 0 || right_len == 0 || left_len + right_len != bigram.size {
                continue;
            }
            symbols[l].len += right_len;
            symbols[r].len = 0;
            let next = symbols[r].next;
            symbols[l].next = next;
            if next >= 0 {
                symbols[next as usize].prev = bigram.left;
            }
            let prev = symbols[l].prev;
            try_add(&symbols, &mut queue, prev, bigram.left);
            try_add(&symbols, &mut queue, bigram.left, next);
        }

        let mut i = 0i32;
        while i != -1 {
            let sym = symbols[i as usize];
            let piece = &text[sym.start..sym.start + sym.len];
            match vocab.text_to_token(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece {
                        self.push_byte(vocab, b, out);
                    }
                }
            }
            i = sym.next;
        }
    }

    /// A byte's token. Upstream throws (and so aborts the caller) when the vocabulary has no
    /// token for the byte; here the unknown token stands in for it (nothing when there is
    /// none either).
    fn push_byte(&self, vocab: &Vocab, b: u8, out: &mut Vec<i32>) {
        match self.byte_tokens[usize::from(b)] {
            Some(id) => out.push(id),
            None if vocab.specials.unk >= 0 => out.push(vocab.specials.unk),
            None => {}
        }
    }
}

/// `byte_to_token` for SPM and UGM: `<0xXX>` (upper-case hex), else the byte itself as text.
pub fn byte_token(vocab: &Vocab, b: u8) -> Option<i32> {
    let hex = format!("<0x{b:02X}>");
    vocab
        .text_to_token(hex.as_bytes())
        .or_else(|| vocab.text_to_token(&[b]))
}
