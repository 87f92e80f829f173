//! WordPiece (BERT; upstream's `llm_tokenizer_wpm`, src/llama-vocab.cpp).
//!
//! Preprocessing as upstream's `preprocess`: code points decoded upstream's lenient way, each
//! mapped through upstream's one-to-one NFD table when accents are stripped (upstream keeps
//! only the first code point of a decomposition, so this is not full NFD: Hangul syllables,
//! for one, shrink to their leading jamo), whitespace splits words, NUL, U+FFFD and control characters vanish,
//! accent marks vanish when stripping accents, lower-casing by upstream's table, and
//! punctuation, ASCII symbols and CJK ideographs become one-character words. Categories come
//! from upstream's Unicode tables (`super::unicode`), not the toolchain's.
//!
//! Each word gets the phantom space `▁` in front (continuation pieces are stored without `##`
//! and word starts with `▁` in GGUF vocabularies), then is cut greedily into the longest
//! tokens from the left over bytes; a word with any uncovered position becomes one unknown
//! token.

use super::error::TokenizerError;
use super::unicode;
use crate::model::vocab::Vocab;

const PHANTOM_SPACE: &[u8] = "\u{2581}".as_bytes();

#[derive(Debug)]
pub struct WpmTokenizer {}

/// Upstream's `is_chinese_char` (WPM's own list; U+2B920 where the standard block starts at
/// U+2B820, as in HF's code).
fn is_chinese_char(cpt: u32) -> bool {
    matches!(cpt,
        0x04E00..=0x09FFF | 0x03400..=0x04DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0x0F900..=0x0FAFF | 0x2F800..=0x2FA1F)
}

impl WpmTokenizer {
    pub fn new(_vocab: &Vocab) -> Result<Self, TokenizerError> {
        Ok(WpmTokenizer {})
    }

    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    pub fn tokenize_bytes(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        let mut word = Vec::from(PHANTOM_SPACE);
        for_each_word(vocab, text, &mut word, |word1| {
            match_word(vocab, word1, out);
        });
    }
}

/// Upstream's `preprocess`, streaming: calls `f` with `▁` + each non-empty word, in order.
/// `buf` starts with `▁` and is reused.
fn for_each_word(vocab: &Vocab, text: &[u8], buf: &mut Vec<u8>, mut f: impl FnMut(&[u8])) {
    let opts = vocab.normalizer_opts;
    let base = PHANTOM_SPACE.len();
    let mut flush = |buf: &mut Vec<u8>| {
        if buf.len() > base {
            f(buf);
            buf.truncate(base);
        }
    };
    let mut offset = 0;
    while offset < text.len() {
        let mut cpt = unicode::cpt_from_utf8(text, &mut offset).unwrap_or_else(|| {
            offset += 1;
            0xFFFD
        });
        if opts.strip_accents {
            cpt = unicode::nfd(cpt);
        }
        let flags = unicode::flags(cpt);
        if flags & unicode::WHITESPACE != 0 {
            flush(buf);
            continue;
        }
        if cpt == 0 || cpt == 0xFFFD || flags & unicode::CONTROL != 0 {
            continue;
        }
        if opts.strip_accents && flags & unicode::ACCENT_MARK != 0 {
            continue;
        }
        let shown = if opts.lowercase {
            unicode::tolower(cpt)
        } else {
            cpt
        };
        let single = flags & unicode::PUNCTUATION != 0
            || (cpt < 0x7F && flags & unicode::SYMBOL != 0)
            || is_chinese_char(cpt);
        if single {
            flush(buf);
        }
        // Above U+10FFFF upstream throws out of llama_tokenize; such a code point is dropped.
        if !unicode::push_utf8(shown, buf) {
            continue;
        }
        if single {
            flush(buf);
        }
    }
    flush(buf);
}

/// Greedy longest-match of one word (`▁` + word) over bytes, as upstream: all or nothing.
fn match_word(vocab: &Vocab, word1: &[u8], out: &mut Vec<i32>) {
    let n = word1.len();
    let start = out.len();
    let mut i = 0;
    while i < n {
        let mut matched = false;
        let mut j = n.min(i + vocab.max_token_len + 1);
        while j > i {
            if let Some(id) = vocab.text_to_token(&word1[i..j]) {
                out.push(id);
                matched = true;
                i = j;
                break;
            }
            j -= 1;
        }
        if !matched {
            out.truncate(start);
            break;
        }
    }
    if out.len() == start {
        out.push(vocab.specials.unk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::vocab::{ATTR_UNKNOWN, VOCAB_WPM};
    use crate::tokenizer::test_util::{normal, vocab};

    fn bert() -> Vocab {
        // ids: [UNK]=0 ▁hello=1 ▁hell=2 o=3 ▁world=4 ▁,=5 ▁=6 ▁apfel=7 ▁日=8 ▁本=9 ▁ᄒ=10 s=11
        let mut t = vec![("[UNK]", 0.0, ATTR_UNKNOWN)];
        t.extend(normal(&[
            ("▁hello", 0.0),
            ("▁hell", 0.0),
            ("o", 0.0),
            ("▁world", 0.0),
            ("▁,", 0.0),
            ("▁", 0.0),
            ("▁apfel", 0.0),
            ("▁日", 0.0),
            ("▁本", 0.0),
            ("▁\u{1112}", 0.0),
            ("s", 0.0),
        ]));
        vocab(VOCAB_WPM, &t, 0)
    }

    fn run(v: &Vocab, text: &[u8]) -> Vec<i32> {
        let mut out = Vec::new();
        WpmTokenizer::new(v)
            .unwrap()
            .tokenize_bytes(v, text, &mut out);
        out
    }

    #[test]
    fn longest_match_lowercase_punctuation_words() {
        let v = bert();
        assert_eq!(run(&v, b"Hello, WORLD"), [1, 5, 4]);
        // "hellos": ▁hello + s; "▁hellx": ▁hell then no match at 'x': the whole word is [UNK].
        assert_eq!(run(&v, b"hellos hellx"), [1, 11, 0]);
        // '!' is its own word and has no token.
        assert_eq!(run(&v, b"world!"), [4, 0]);
        assert_eq!(run(&v, b"  \t\n "), Vec::<i32>::new());
    }

    #[test]
    fn accents_stripped_by_upstreams_table_cjk_split_hangul_cut() {
        let v = bert();
        assert_eq!(run(&v, "Äpfel".as_bytes()), [7]);
        assert_eq!(run(&v, "日本".as_bytes()), [8, 9]);
        // Upstream's NFD table maps a code point to the first code point of its decomposition
        // only: a Hangul syllable becomes its leading jamo (한 and 하 alike), where full NFD
        // keeps all jamo.
        assert_eq!(unicode::nfd(0xD55C), 0x1112);
        assert_eq!(run(&v, "한 하".as_bytes()), [10, 10]);
    }

    #[test]
    fn controls_and_invalid_bytes_vanish_code_points_above_unicode_are_dropped() {
        let v = bert();
        assert_eq!(run(&v, b"hel\x00lo\x07"), [1]);
        assert_eq!(run(&v, b"hel\xfflo"), [1]);
        // Upstream aborts on this (an exception from unicode_cpt_to_utf8).
        assert_eq!(run(&v, b"hel\xf7\xbf\xbf\xbflo"), [1]);
    }
}
