//! WordPiece (BERT; upstream's `llm_tokenizer_wpm`, src/llama-vocab.cpp).
//!
//! Preprocessing as upstream's `preprocess`: code points decoded upstream's lenient way, each
//! mapped through upstream's one-to-one NFD table when accents are stripped (upstream keeps
//! only the first code point of a decomposition, so this is not full NFD: Hangul syllables,
//! for one, stay whole), whitespace splits words, NUL, U+FFFD and control characters vanish,
//! accent marks vanish when stripping accents, lower-casing by upstream's table, and
//! punctuation, ASCII symbols and CJK ideographs become one-character words. Categories come
//! from upstream's Unicode tables (`super::unicode`), not the toolchain's.
//!
//! Each word gets the phantom space `▁` in front (continuation pieces are stored without `##`
//! and word starts with `▁` in GGUF vocabularies), then is cut greedily into the longest
//! tokens from the left over bytes; a word with any uncovered position becomes one unknown
//! token.

use super::unicode;
use super::TokenizerError;
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
