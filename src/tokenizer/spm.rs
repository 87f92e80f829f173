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

use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::unicode;
use crate::model::vocab::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    prev: i32,
    next: i32,
    start: usize,
    len: usize,
}

/// A candidate merge of two adjacent symbols. The heap pops the highest score first and the
/// leftmost among equal scores (upstream's comparator), both packed into one `u64` key so a
/// comparison is one integer compare (the heap dominates SPM's time). Texts are below 2 GiB
/// (`llama_tokenize` takes an `int32_t` length), so indices and sizes fit in `u32`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Bigram {
    /// Score in `f32::total_cmp` order (high 32 bits), then `u32::MAX - left` (low 32).
    key: u64,
    right: u32,
    size: u32,
}

impl Bigram {
    fn new(left: u32, right: u32, score: f32, size: u32) -> Bigram {
        let bits = score.to_bits();
        let ordered = if bits >> 31 == 1 {
            !bits
        } else {
            bits | 0x8000_0000
        };
        Bigram {
            key: (u64::from(ordered) << 32) | u64::from(u32::MAX - left),
            right,
            size,
        }
    }

    fn left(&self) -> u32 {
        u32::MAX - self.key as u32
    }
}

/// The SPM tokenizer. Upstream keeps no state for it beyond the vocabulary; the byte tokens
/// are looked up once here.
#[derive(Debug)]
pub struct SpmTokenizer {
    /// `byte_to_token` for every byte (None where upstream would throw: no such token).
    byte_tokens: Box<[Option<i32>; 256]>,
    /// Whether fragments may be cut into words before merging (see `tokenize_bytes`).
    split_at_words: bool,
}

/// U+2581, SentencePiece's escaped space.
const ESCAPED_SPACE: &[u8] = "\u{2581}".as_bytes();

impl SpmTokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let mut byte_tokens = Box::new([None; 256]);
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = byte_token(vocab, b as u8);
        }
        // A token with `▁` after another character than `▁` could span a word cut.
        let split_at_words = !vocab.tokens.iter().any(|t| {
            let text = t.bytes();
            (1..text.len()).any(|k| {
                text[k..].starts_with(ESCAPED_SPACE) && !text[..k].ends_with(ESCAPED_SPACE)
            })
        });
        Ok(SpmTokenizer {
            byte_tokens,
            split_at_words,
        })
    }

    /// Tokenizes one raw-text fragment that is valid UTF-8 (see [`Self::tokenize_bytes`]).
    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    /// Tokenizes one fragment as upstream's session does: `text` is what upstream hands the
    /// session (space prefix added and spaces escaped already). Bytes that are not valid UTF-8
    /// are split as upstream's lead-byte table says and fall back to byte tokens.
    pub fn tokenize_bytes(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        let mut symbols = Vec::new();
        let mut queue = BinaryHeap::new();
        if !self.split_at_words {
            self.merge(vocab, text, &mut symbols, &mut queue, out);
            return;
        }
        // Cut before every `▁` that follows another character than `▁`, at upstream's symbol
        // boundaries: no token spans such a cut (checked at load), so no merge crosses it and
        // the pieces merge independently, in the same order, into the same symbols as the
        // whole text would. A small heap per word instead of one heap for the whole text.
        let (mut start, mut offs, mut prev) = (0, 0, 0);
        while offs < text.len() {
            if offs > start
                && text[offs..].starts_with(ESCAPED_SPACE)
                && &text[prev..offs] != ESCAPED_SPACE
            {
                self.merge(vocab, &text[start..offs], &mut symbols, &mut queue, out);
                start = offs;
            }
            prev = offs;
            offs += unicode::len_utf8(text[offs]).min(text.len() - offs);
        }
        self.merge(vocab, &text[start..], &mut symbols, &mut queue, out);
    }

    /// Upstream's session on `text`: split into characters, merge by score, emit.
    fn merge(
        &self,
        vocab: &Vocab,
        text: &[u8],
        symbols: &mut Vec<Symbol>,
        queue: &mut BinaryHeap<Bigram>,
        out: &mut Vec<i32>,
    ) {
        if text.is_empty() {
            return;
        }
        symbols.clear();
        queue.clear();
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
                queue.push(Bigram::new(
                    left as u32,
                    right as u32,
                    token.score,
                    size as u32,
                ));
            };

        for i in 1..symbols.len() as i32 {
            try_add(symbols, queue, i - 1, i);
        }

        while let Some(bigram) = queue.pop() {
            let left = bigram.left() as i32;
            let (l, r) = (left as usize, bigram.right as usize);
            let (left_len, right_len) = (symbols[l].len, symbols[r].len);
            // One of the two already merged elsewhere: a stale entry.
            if left_len == 0 || right_len == 0 || left_len + right_len != bigram.size as usize {
                continue;
            }
            symbols[l].len += right_len;
            symbols[r].len = 0;
            let next = symbols[r].next;
            symbols[l].next = next;
            if next >= 0 {
                symbols[next as usize].prev = left;
            }
            let prev = symbols[l].prev;
            try_add(symbols, queue, prev, left);
            try_add(symbols, queue, left, next);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::vocab::{ATTR_BYTE, ATTR_UNKNOWN, VOCAB_SPM};
    use crate::tokenizer::test_util::{normal, vocab};

    fn spm(tokens: &[(&'static str, f32)], bytes: &[u8]) -> Vocab {
        let mut t = vec![("<unk>", 0.0, ATTR_UNKNOWN)];
        t.extend(normal(tokens));
        let hex: Vec<String> = bytes.iter().map(|b| format!("<0x{b:02X}>")).collect();
        let hex: Vec<&'static str> = hex
            .into_iter()
            .map(|s| &*Box::leak(s.into_boxed_str()))
            .collect();
        t.extend(hex.iter().map(|&h| (h, 0.0, ATTR_BYTE)));
        vocab(VOCAB_SPM, &t, 0)
    }

    fn run(v: &Vocab, text: &[u8]) -> Vec<i32> {
        let mut out = Vec::new();
        SpmTokenizer::new(v)
            .unwrap()
            .tokenize_bytes(v, text, &mut out);
        out
    }

    #[test]
    fn highest_score_merges_first() {
        // ids: a=1 b=2 c=3 ab=4 bc=5 abc=6
        let t = [
            ("a", -5.0),
            ("b", -5.0),
            ("c", -5.0),
            ("ab", -1.0),
            ("bc", -0.5),
            ("abc", -2.0),
        ];
        let v = spm(&t, &[]);
        // bc (-0.5) merges before ab (-1); then a+bc = abc.
        assert_eq!(run(&v, b"abc"), [6]);
        let v = spm(&t[..5], &[]);
        assert_eq!(run(&v, b"abc"), [1, 5]);
    }

    #[test]
    fn equal_scores_merge_leftmost_first() {
        let v = spm(
            &[
                ("a", -5.0),
                ("b", -5.0),
                ("c", -5.0),
                ("ab", -1.0),
                ("bc", -1.0),
            ],
            &[],
        );
        assert_eq!(run(&v, b"abc"), [4, 3]);
    }

    #[test]
    fn unknown_pieces_fall_back_to_bytes_then_unk() {
        // 'x' has no token but a byte token; 'y' has neither: the unknown token stands in
        // (upstream throws there).
        let v = spm(&[("a", -1.0)], b"x");
        assert_eq!(run(&v, b"axy"), [1, 2, 0]);
    }

    #[test]
    fn a_truncated_sequence_is_one_symbol_of_bytes() {
        // 0xE6 announces three bytes; with two left, upstream's symbol is [E6 'a'] and both
        // bytes fall back to byte tokens, even though "a" is a token.
        let v = spm(&[("a", -1.0)], &[0xE6, b'a']);
        assert_eq!(run(&v, &[0xE6, b'a']), [2, 3]);
        // A lone continuation byte is a symbol of its own.
        let v = spm(&[("a", -1.0)], &[0x80]);
        assert_eq!(run(&v, &[0x80, b'a']), [2, 1]);
    }

    #[test]
    fn cutting_at_words_changes_nothing() {
        let t = [
            ("a", -3.0),
            ("b", -3.0),
            ("▁", -2.0),
            ("▁a", -1.0),
            ("ab", -1.5),
            ("▁ab", -1.2),
            ("▁▁", -0.5),
            ("▁▁a", -0.7),
            ("ba", -2.5),
            ("▁b", -1.1),
            ("é", -1.0),
            ("▁é", -0.2),
        ];
        let v = spm(&t, &[0xC3, 0xA9, 0xE2, 0x96, 0x81, 0xFF, b'c']);
        let cut = SpmTokenizer::new(&v).unwrap();
        assert!(cut.split_at_words);
        let whole = SpmTokenizer {
            split_at_words: false,
            ..SpmTokenizer::new(&v).unwrap()
        };
        let alphabet: [&[u8]; 8] = [
            b"a",
            b"b",
            "▁".as_bytes(),
            "é".as_bytes(),
            b"\xff",
            b"\xe2",
            b"\xe2\x96",
            b"c",
        ];
        let mut seed = 0x2545F4914F6CDD1Du64;
        for _ in 0..3000 {
            let mut text = Vec::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            for k in 0..(seed % 24) {
                text.extend_from_slice(alphabet[((seed >> (k * 2 + 5)) % 8) as usize]);
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            cut.tokenize_bytes(&v, &text, &mut a);
            whole.tokenize_bytes(&v, &text, &mut b);
            assert_eq!(a, b, "{text:?}");
        }
        // A token with `▁` inside turns cutting off.
        let mut t2 = t.to_vec();
        t2.push(("a▁b", -0.1));
        assert!(!SpmTokenizer::new(&spm(&t2, &[])).unwrap().split_at_words);
    }
}
