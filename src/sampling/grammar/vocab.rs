//! What the grammar needs from a vocabulary: each token's piece (upstream's cached
//! `token_to_piece(id)`, special tokens rendered), the end-of-generation set, and resolution
//! of `<text>` token references.
//!
//! The pieces come from [`token_piece`], a stand-in for the tokenizer's `token_to_piece`
//! (src/tokenizer/, not merged yet): one function to redirect once it lands. It covers the
//! GPT-2 byte-level BPE and SentencePiece cases the grammar meets in practice; BPE vocabs
//! whose pre-tokenizer escapes whitespace as `▁` (upstream's `escape_whitespaces`) and RWKV
//! vocabs wait for the tokenizer.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::parser::TokenResolver;
use crate::model::vocab::{
    Vocab, ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED, VOCAB_BPE,
    VOCAB_SPM, VOCAB_TEST, VOCAB_UGM, VOCAB_WPM,
};

/// The grammar's view of a vocabulary.
#[derive(Clone, Debug, Default)]
pub struct GrammarVocab {
    pieces: Vec<Vec<u8>>,
    eog: HashSet<i32>,
    /// Text of unknown, control and user-defined tokens (upstream's special tokens) → id, for
    /// `<text>` references.
    special: HashMap<Vec<u8>, i32>,
}

impl GrammarVocab {
    /// A vocabulary given piece by piece (tests, and callers without a model).
    pub fn new(pieces: Vec<Vec<u8>>, eog: impl IntoIterator<Item = i32>) -> GrammarVocab {
        GrammarVocab {
            pieces,
            eog: eog.into_iter().collect(),
            special: HashMap::new(),
        }
    }

    /// Declares `text` a special token `id` that `<text>` in a grammar resolves to.
    pub fn with_special(mut self, text: &[u8], id: i32) -> GrammarVocab {
        self.special.insert(text.to_vec(), id);
        self
    }

    /// The grammar's view of a model's vocabulary.
    pub fn from_vocab(vocab: &Vocab) -> GrammarVocab {
        let pieces = (0..vocab.tokens.len() as i32)
            .map(|id| token_piece(vocab, id))
            .collect();
        let special = vocab
            .tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| t.attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0)
            .map(|(i, t)| (t.text.as_bytes().to_vec(), i as i32))
            .collect();
        GrammarVocab {
            pieces,
            eog: vocab.eog.iter().copied().collect(),
            special,
        }
    }

    pub fn n_tokens(&self) -> usize {
        self.pieces.len()
    }

    /// The piece of `id`; `None` outside the vocabulary.
    pub fn piece(&self, id: i32) -> Option<&[u8]> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.pieces.get(i))
            .map(Vec::as_slice)
    }

    pub fn is_eog(&self, id: i32) -> bool {
        self.eog.contains(&id)
    }
}

impl TokenResolver for GrammarVocab {
    /// Upstream tokenizes `<text>` (angle brackets included) with special tokens parsed and
    /// wants exactly one token; until the tokenizer lands, the special tokens' texts.
    fn single_token(&self, text: &[u8]) -> Option<i32> {
        self.special.get(text).copied()
    }
}

/// Upstream's `token_to_piece(id, special = true)` for one token (see the module doc).
pub fn token_piece(vocab: &Vocab, id: i32) -> Vec<u8> {
    let Some(token) = vocab.token(id) else {
        return Vec::new();
    };
    let text = token.text.as_bytes();
    let attr = token.attr;
    match vocab.vocab_type {
        VOCAB_SPM | VOCAB_UGM | VOCAB_WPM | VOCAB_BPE => {
            if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
                text.to_vec()
            } else if attr & ATTR_NORMAL != 0 {
                if vocab.vocab_type == VOCAB_BPE {
                    gpt2_decode(text)
                } else {
                    String::from_utf8_lossy(text)
                        .replace('\u{2581}', " ")
                        .into_bytes()
                }
            } else if attr & ATTR_BYTE != 0 {
                vec![byte_token_value(vocab.vocab_type, text)]
            } else {
                Vec::new()
            }
        }
        VOCAB_TEST => format!("{id:x}").into_bytes(),
        _ => Vec::new(),
    }
}

/// `<0xXX>` (SPM/UGM) or the GPT-2 mapped char (BPE) → the byte.
fn byte_token_value(vocab_type: i32, text: &[u8]) -> u8 {
    if vocab_type == VOCAB_BPE {
        return gpt2_decode(text).first().copied().unwrap_or(0);
    }
    let hex = text
        .strip_prefix(b"<0x")
        .and_then(|t| t.strip_suffix(b">"))
        .unwrap_or(b"");
    std::str::from_utf8(hex)
        .ok()
        .and_then(|h| u8::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// GPT-2's byte ↔ code point table: printable bytes map to themselves, the rest to U+0100+.
fn gpt2_char_to_byte() -> &'static HashMap<char, u8> {
    static MAP: OnceLock<HashMap<char, u8>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = HashMap::with_capacity(256);
        let mut n = 0u32;
        for b in 0..=255u8 {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            let c = if printable {
                char::from(b)
            } else {
                let c = char::from_u32(256 + n).unwrap_or('\u{FFFD}');
                n += 1;
                c
            };
            map.insert(c, b);
        }
        map
    })
}

/// Upstream `llama_decode_text`: each code point back to its byte; unknown ones become
/// `[UNK_BYTE_0x..<text>]` as upstream writes them.
fn gpt2_decode(text: &[u8]) -> Vec<u8> {
    let map = gpt2_char_to_byte();
    let s = String::from_utf8_lossy(text);
    let mut out = Vec::with_capacity(text.len());
    for c in s.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_bytes() {
        assert_eq!(gpt2_decode("Ġhello".as_bytes()), b" hello");
        assert_eq!(gpt2_decode("Ċ".as_bytes()), b"\n");
        // U+00E9 is printable in the table: the byte 0xE9 (half of a UTF-8 sequence)
        assert_eq!(gpt2_decode("Ã©".as_bytes()), "é".as_bytes());
    }
}
