//! PLaMo-2's tokenizer (upstream's `llm_tokenizer_plamo2`, src/llama-vocab.cpp): a Viterbi
//! search over code points, right to left, with integer scores (`round(score * 1e4)`), driven
//! by a table built at load from every token and every suffix of every token; characters no
//! token covers fall back to `<0xXX>` byte tokens.
//!
//! The table ("suffix automaton" in upstream's words): all distinct token texts and their
//! suffixes, sorted by their reversed bytes; each suffix owns a block of rows, one per prefix
//! of it that is a token text or a suffix (longest first), then a sentinel row. Scanning the
//! text backwards, the longest suffix of the text seen so far that is in the set is found by
//! extending the previous one by the new character (`to_suffix_id`), and the rows of its block
//! are the tokens that start at this character.

use std::collections::HashMap;

use super::error::TokenizerError;
use super::unicode::{cpts_from_utf8, push_utf8};
use crate::model::vocab::Vocab;

const INVALID_SCORE: i32 = -20_000_000;
const UNKNOWN_SCORE: i32 = -10_000_000;

#[derive(Clone, Copy, Debug)]
struct Row {
    piece_length: i32,
    token_id: i32,
    score: i32,
    piece_id: i32,
}

#[derive(Debug)]
pub struct Plamo2Tokenizer {
    /// The byte tokens `<0xXX>`, by byte.
    bytes: Box<[i32; 256]>,
    /// (first code point << 32 | suffix id of the rest) → suffix id of the whole.
    to_suffix_id: HashMap<i64, i32>,
    table: Vec<Row>,
}

/// The byte a PLaMo-2 BYTE token stands for: texts of the form `<0xXX>` (hex digits of
/// either case). Used for its piece too.
pub fn byte_token_value(text: &[u8]) -> Option<u8> {
    if text.len() == 6 && text.starts_with(b"<0x") && text[5] == b'>' {
        let hex = std::str::from_utf8(&text[3..5]).ok()?;
        if hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return u8::from_str_radix(hex, 16).ok();
        }
    }
    None
}

impl Plamo2Tokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let bad = |why: String| TokenizerError::Invalid(format!("plamo2: {why}"));
        let mut bytes = [None::<i32>; 256];
        // Token text → score (NaN for texts that are only suffixes), and text → id.
        let mut suffix_to_score: HashMap<Vec<u8>, f32> = HashMap::new();
        let mut token_to_id: HashMap<&[u8], i32> = HashMap::with_capacity(vocab.tokens.len());
        for (id, token) in vocab.tokens.iter().enumerate() {
            let text = token.bytes();
            token_to_id.insert(text, id as i32);
            if vocab.is_byte(id as i32) {
                if let Some(b) = byte_token_value(text) {
                    bytes[usize::from(b)] = Some(id as i32);
                }
                continue;
            }
            suffix_to_score.insert(text.to_vec(), token.score);
            let cpts = cpts_from_utf8(text);
            for i in 1..cpts.len() {
                let mut suffix = Vec::new();
                for &c in &cpts[i..] {
                    if !push_utf8(c, &mut suffix) {
                        // Upstream throws here, failing the load.
                        return Err(bad(format!("token {id} has a code point above U+10FFFF")));
                    }
                }
                suffix_to_score.entry(suffix).or_insert(f32::NAN);
            }
        }
        // Upstream also rejects a byte token at id 0 (it tests `bytes_[i] == 0`); an id 0 is a
        // valid token here.
        let mut byte_ids = Box::new([0i32; 256]);
        for (b, slot) in bytes.iter().enumerate() {
            byte_ids[b] =
                slot.ok_or_else(|| bad(format!("byte token for <0x{b:02X}> is not set")))?;
        }

        let mut suffixes: Vec<Vec<u8>> = suffix_to_score.keys().cloned().collect();
        suffixes.push(Vec::new());
        suffixes.sort_by(|a, b| a.iter().rev().cmp(b.iter().rev()));

        // Every suffix's block: the prefixes of it that are in the set, longest first.
        let prefixes_in_set = |cpts: &[u32]| -> Vec<(usize, Vec<u8>)> {
            let mut rows = Vec::new();
            for len in (1..=cpts.len()).rev() {
                let mut piece = Vec::new();
                for &c in &cpts[..len] {
                    // Every code point here came from an encodable suffix.
                    push_utf8(c, &mut piece);
                }
                if suffix_to_score.contains_key(&piece) {
                    rows.push((len, piece));
                }
            }
            rows
        };

        let mut suffix_to_id: HashMap<Vec<u8>, i32> = HashMap::with_capacity(suffixes.len());
        let mut to_suffix_id = HashMap::with_capacity(suffixes.len());
        let mut blocks = Vec::with_capacity(suffixes.len());
        let mut num_pieces = 0i32;
        for suffix in &suffixes {
            suffix_to_id.insert(suffix.clone(), num_pieces);
            if suffix.is_empty() {
                blocks.push(Vec::new());
                num_pieces += 1;
                continue;
            }
            let cpts = cpts_from_utf8(suffix);
            let mut remaining = Vec::new();
            for &c in &cpts[1..] {
                push_utf8(c, &mut remaining);
            }
            // Sorted by reversed bytes, a suffix's own suffix comes earlier: it has an id.
            let rest_id = suffix_to_id.get(&remaining).copied().unwrap_or(0);
            to_suffix_id.insert((i64::from(cpts[0]) << 32) | i64::from(rest_id), num_pieces);
            let rows = prefixes_in_set(&cpts);
            num_pieces += rows.len() as i32 + 1;
            blocks.push(rows);
        }

        let mut table = Vec::with_capacity(num_pieces as usize);
        for rows in blocks {
            for (len, piece) in rows {
                let score = suffix_to_score[&piece];
                table.push(Row {
                    piece_length: len as i32,
                    token_id: token_to_id.get(piece.as_slice()).copied().unwrap_or(-1),
                    score: if score.is_finite() {
                        (f64::from(score) * 1e4).round() as i32
                    } else {
                        INVALID_SCORE
                    },
                    piece_id: suffix_to_id[&piece],
                });
            }
            table.push(Row {
                piece_length: 1,
                token_id: -1,
                score: UNKNOWN_SCORE,
                piece_id: 0,
            });
        }

        Ok(Plamo2Tokenizer {
            bytes: byte_ids,
            to_suffix_id,
            table,
        })
    }

    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    /// Upstream's `encode`.
    pub fn tokenize_bytes(&self, _vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        let mut data = cpts_from_utf8(text);
        if data.first() == Some(&0xFEFF) {
            data.remove(0);
        }
        if data.is_empty() {
            return;
        }
        let n = data.len();
        let mut scores = vec![1i64 << 60; n + 1];
        scores[n] = 0;
        // Per position: (token length, token id) of the best path from here.
        let mut path = vec![(0i32, 0i32); n + 1];

        let mut suffix_id = 0usize;
        for i in (0..n).rev() {
            let c = i64::from(data[i]);
            for row in &self.table[suffix_id..] {
                let code = (c << 32) | i64::from(row.piece_id);
                suffix_id = self.to_suffix_id.get(&code).map_or(0, |&s| s as usize);
                if suffix_id > 0 || row.score == UNKNOWN_SCORE {
                    break;
                }
            }
            for row in &self.table[suffix_id..] {
                let score = row.score;
                if score > INVALID_SCORE {
                    let len = row.piece_length as usize;
                    let s = scores[i + len] - i64::from(score);
                    if s < scores[i] {
                        scores[i] = s;
                        path[i] = (row.piece_length, row.token_id);
                    }
                }
                if score == UNKNOWN_SCORE {
                    break;
                }
            }
        }

        let mut pos = 0;
        while pos < n {
            let (len, id) = path[pos];
            if id >= 0 {
                out.push(id);
            } else {
                // Byte fallback: the code point's UTF-8 bytes as upstream computes them.
                let c = data[pos];
                let s = 1
                    + usize::from(c >= 0x80)
                    + usize::from(c >= 0x800)
                    + usize::from(c >= 0x10000);
                for i in 0..s {
                    let lead = if s == 1 {
                        c as u8
                    } else if i == 0 {
                        ((0xF00u32 >> s) & 0xFF) as u8
                    } else {
                        0x80
                    };
                    let b = lead | ((c >> ((s - i - 1) * 6)) & 0x3F) as u8;
                    out.push(self.bytes[usize::from(b)]);
                }
            }
            // A reached position always has a path of length ≥ 1 (the sentinel row).
            pos += (len as usize).max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::vocab::{ATTR_BYTE, VOCAB_PLAMO2};
    use crate::tokenizer::test_util::{normal, vocab};

    fn plamo(tokens: &[(&'static str, f32)]) -> Vocab {
        let hex: Vec<&'static str> = (0..=255u8)
            .map(|b| &*Box::leak(format!("<0x{b:02X}>").into_boxed_str()))
            .collect();
        // Byte tokens at ids 0..=255 (upstream refuses a byte token at id 0; see `new`).
        let mut t: Vec<_> = hex.iter().map(|&h| (h, 0.0, ATTR_BYTE)).collect();
        t.extend(normal(tokens));
        vocab(VOCAB_PLAMO2, &t, -1)
    }

    fn run(v: &Vocab, text: &str) -> Vec<i32> {
        let mut out = Vec::new();
        Plamo2Tokenizer::new(v).unwrap().tokenize(v, text, &mut out);
        out
    }

    #[test]
    fn best_total_score_with_byte_fallback() {
        // ids: a=256 b=257 ab=258 abc=259 c=260
        let v = plamo(&[
            ("a", -1.0),
            ("b", -1.0),
            ("ab", -1.5),
            ("abc", -4.0),
            ("c", -2.0),
        ]);
        // [ab, c] = -3.5 beats [abc] = -4 and [a, b, c] = -4.
        assert_eq!(run(&v, "abc"), [258, 260]);
        // 'x' has no token: its byte token.
        assert_eq!(run(&v, "abx"), [258, 0x78]);
        // 'é' falls back to its two UTF-8 bytes.
        assert_eq!(run(&v, "é"), [0xC3, 0xA9]);
        // A leading BOM is skipped.
        assert_eq!(run(&v, "\u{feff}a"), [256]);
        assert_eq!(run(&v, ""), Vec::<i32>::new());
    }

    #[test]
    fn missing_byte_token_fails_the_load() {
        let mut v = plamo(&[("a", -1.0)]);
        v.tokens[0x41].attr = crate::model::vocab::ATTR_NORMAL;
        assert!(Plamo2Tokenizer::new(&v).is_err());
    }

    #[test]
    fn byte_token_texts() {
        assert_eq!(byte_token_value(b"<0x0A>"), Some(10));
        assert_eq!(byte_token_value(b"<0xfe>"), Some(0xFE));
        assert_eq!(byte_token_value(b"<0xG0>"), None);
        assert_eq!(byte_token_value(b"<0x0A"), None);
    }
}
