//! RWKV's greedy longest-match tokenizer (upstream's `llm_tokenizer_rwkv`, src/llama-vocab.cpp).
//!
//! RWKV token texts are escaped byte strings (`\n`, `\t`, `\r`, `\xHH`, `\\`); the trie is built
//! over the unescaped bytes, and the text is cut greedily into the longest token at each
//! position. A byte that starts no token becomes the unknown token.

use super::error::TokenizerError;
use super::trie::{ByteTrie, TrieBuilder};
use crate::model::vocab::Vocab;

/// `llama_unescape_rwkv_token`: the bytes an RWKV token text stands for; also the token's piece.
///
/// Mirrors upstream's parser: after `\x` the next two characters are read as hex digits the
/// way upstream reads them (`c >= 'a' ? c - 'a' + 10 : c - '0'`, wrapping in a byte), any other
/// escaped character stands for itself, and a trailing lone `\` is dropped.
pub fn unescape_token(escaped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut escaping = false;
    let mut hex_remaining = 0u8;
    let mut hex_acc = 0u8;
    for &c in escaped {
        if hex_remaining != 0 {
            let value = if c >= b'a' {
                c.wrapping_sub(b'a').wrapping_add(10)
            } else {
                c.wrapping_sub(b'0')
            };
            hex_acc = (hex_acc << 4).wrapping_add(value);
            hex_remaining -= 1;
            if hex_remaining == 0 {
                out.push(hex_acc);
                hex_acc = 0;
            }
            continue;
        }
        if escaping {
            match c {
                b't' => out.push(b'\t'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b'x' => hex_remaining = 2,
                _ => out.push(c),
            }
            escaping = false;
            continue;
        }
        if c == b'\\' {
            escaping = true;
            continue;
        }
        out.push(c);
    }
    out
}

#[derive(Debug)]
pub struct RwkvTokenizer {
    matcher: ByteTrie,
}

impl RwkvTokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let mut trie = TrieBuilder::new();
        for (id, token) in vocab.tokens.iter().enumerate() {
            trie.insert(&unescape_token(token.bytes()), id as i32);
        }
        Ok(RwkvTokenizer {
            matcher: trie.build(),
        })
    }

    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    /// Greedy longest match over raw bytes.
    ///
    /// Upstream, a byte that starts a trie path on which no token ends gives token 0 and
    /// restarts at position 0, looping forever; here that byte is treated like one that starts
    /// no path (the unknown token, one byte consumed).
    pub fn tokenize_bytes(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        let unk = vocab.specials.unk;
        let mut position = 0usize;
        while position < text.len() {
            let mut node = self.matcher.child(ByteTrie::ROOT, text[position]);
            let mut best: Option<(i32, usize)> = None;
            let mut end = position;
            while let Some(n) = node {
                if let Some(id) = self.matcher.value(n) {
                    best = Some((id, end + 1));
                }
                end += 1;
                if end >= text.len() {
                    break;
                }
                node = self.matcher.child(n, text[end]);
            }
            match best {
                Some((id, next)) => {
                    out.push(id);
                    position = next;
                }
                None => {
                    out.push(unk);
                    position += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_follows_upstream() {
        assert_eq!(unescape_token(br"a\nb\tc\rd"), b"a\nb\tc\rd");
        assert_eq!(unescape_token(br"\x41\x0a\xff"), [0x41, 0x0a, 0xff]);
        assert_eq!(unescape_token(br"\\\'q"), b"\\'q");
        // A trailing lone backslash is dropped; an unfinished \x is dropped.
        assert_eq!(unescape_token(br"ab\"), b"ab");
        assert_eq!(unescape_token(br"ab\x4"), b"ab");
        // Upper-case hex digits read as upstream reads them: 'A' - '0' = 17.
        assert_eq!(unescape_token(br"\xA0"), [((17u8) << 4).wrapping_add(0)]);
    }
}

#[cfg(test)]
mod greedy_tests {
    use super::*;
    use crate::model::vocab::VOCAB_RWKV;
    use crate::tokenizer::test_util::{normal, vocab};

    fn run(v: &Vocab, text: &[u8]) -> Vec<i32> {
        let mut out = Vec::new();
        RwkvTokenizer::new(v)
            .unwrap()
            .tokenize_bytes(v, text, &mut out);
        out
    }

    #[test]
    fn longest_match_over_unescaped_bytes() {
        // ids: a=0 b=1 ab=2 abc=3 \n=4 "xy"=5 \x41=6 (the byte 'A')
        let t = normal(&[
            ("a", 0.0),
            ("b", 0.0),
            ("ab", 0.0),
            ("abc", 0.0),
            ("\\n", 0.0),
            ("xy", 0.0),
            ("\\x41", 0.0),
        ]);
        let v = vocab(VOCAB_RWKV, &t, 99);
        assert_eq!(run(&v, b"abcab\nAb"), [3, 2, 4, 6, 1]);
        // 'q' starts no token: the unknown id, one byte.
        assert_eq!(run(&v, b"qa"), [99, 0]);
        // 'x' starts a path but no token ends before 'z': upstream loops forever here; ours
        // gives the unknown id for the byte and goes on.
        assert_eq!(run(&v, b"xzxy"), [99, 99, 5]);
    }
}
