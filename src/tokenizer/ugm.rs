//! Unigram (SentencePiece "t5" models; upstream's `llm_tokenizer_ugm`, src/llama-vocab.cpp).
//!
//! 1. Normalization: at each position the longest user-defined token prefix is kept as is;
//!    otherwise the longest prefix in the precompiled charsmap (an XOR-compressed compact
//!    double array, XCDA) is replaced by its replacement string; otherwise one UTF-8 character
//!    is copied (an invalid byte becomes U+FFFD). Spaces are then escaped to `▁`, merged and
//!    prefixed/suffixed as the vocabulary's flags say.
//! 2. Viterbi over the normalized bytes: the best-scoring segmentation into tokens
//!    (user-defined tokens score 0), with the unknown token for characters no token covers,
//!    and runs of unknown tokens collapsed into one.

use super::error::TokenizerError;
use super::trie::{ByteTrie, TrieBuilder};
use super::unicode;
use crate::model::vocab::Vocab;

const ESCAPED_SPACE: &[u8] = "\u{2581}".as_bytes();
const REPLACEMENT_CHARACTER: &[u8] = "\u{FFFD}".as_bytes();
const UNKNOWN_TOKEN_SCORE_PENALTY: f32 = 10.0;

/// A read-only view of the XCDA entries (upstream's `xcda_array_view`). Each packed entry
/// holds BASE in bits 10..31 (shifted by 8 more when bit 9 is set), LCHECK in bits 0..8,
/// LEAF in bit 8; entries with bit 31 set hold an index into the replacement strings.
#[derive(Debug, Default)]
struct Xcda {
    entries: Vec<u32>,
}

impl Xcda {
    // Upstream throws from the tokenizer when an index is out of bounds; here the walk stops
    // (no match), see `longest_match`.
    fn node(&self, i: usize) -> Option<u32> {
        self.entries.get(i).copied()
    }
    fn base(packed: u32) -> u32 {
        (packed >> 10) << ((packed & (1 << 9)) >> 6)
    }
    fn lcheck(packed: u32) -> u32 {
        packed & ((1 << 31) | 0xff)
    }
    fn leaf(packed: u32) -> bool {
        (packed >> 8) & 1 != 0
    }
    fn value(packed: u32) -> u32 {
        packed & ((1 << 31) - 1)
    }

    /// The longest prefix of `input` the charsmap maps, as (prefix length, replacement
    /// offset). A NUL byte ends the walk, as upstream.
    fn longest_match(&self, input: &[u8]) -> Option<(usize, usize)> {
        if self.entries.is_empty() {
            return None;
        }
        let mut best = None;
        let mut node_index = Self::base(self.node(0)?);
        for (i, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            node_index ^= u32::from(c);
            let Some(packed) = self.node(node_index as usize) else {
                break;
            };
            if Self::lcheck(packed) != u32::from(c) {
                break;
            }
            let is_leaf = Self::leaf(packed);
            node_index ^= Self::base(packed);
            if is_leaf {
                let Some(value_node) = self.node(node_index as usize) else {
                    break;
                };
                best = Some((i + 1, Self::value(value_node) as usize));
            }
        }
        best
    }
}

#[derive(Debug)]
pub struct UgmTokenizer {
    xcda: Xcda,
    /// The NUL-terminated replacement strings after the XCDA blob.
    replacements: Vec<u8>,
    user_defined: ByteTrie,
    /// Normal, user-defined and unused tokens.
    tokens: ByteTrie,
    unknown_token_score: f32,
}

/// Viterbi state at one byte offset: the best token ending here, where it starts, and the
/// total score.
#[derive(Clone, Copy)]
struct Best {
    token: i32,
    start: usize,
    score: f64,
}

impl UgmTokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let (xcda, replacements) = parse_charsmap(&vocab.precompiled_charsmap)?;
        let mut min_score = f32::MAX;
        let mut user_defined = TrieBuilder::new();
        let mut tokens = TrieBuilder::new();
        for (id, token) in vocab.tokens.iter().enumerate() {
            let id = id as i32;
            if vocab.is_normal(id) {
                min_score = min_score.min(token.score);
            }
            if vocab.is_normal(id) || vocab.is_user_defined(id) || vocab.is_unused(id) {
                tokens.insert(token.bytes(), id);
            }
            if vocab.is_user_defined(id) {
                user_defined.insert(token.bytes(), 0);
            }
        }
        Ok(UgmTokenizer {
            xcda,
            replacements,
            user_defined: user_defined.build(),
            tokens: tokens.build(),
            unknown_token_score: min_score - UNKNOWN_TOKEN_SCORE_PENALTY,
        })
    }

    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<i32>) {
        self.tokenize_bytes(vocab, text.as_bytes(), out);
    }

    pub fn tokenize_bytes(&self, vocab: &Vocab, text: &[u8], out: &mut Vec<i32>) {
        let normalized = self.normalize(vocab, text);
        let input_len = normalized.len();
        if input_len == 0 {
            return;
        }
        let unk = vocab.specials.unk;
        let mut results = vec![
            Best {
                token: unk,
                start: 0,
                score: -f64::MAX,
            };
            input_len + 1
        ];
        results[0].score = 0.0;

        let mut offset = 0;
        while offset < input_len {
            let n_units = unicode::len_utf8(normalized[offset]).min(input_len - offset);
            let current = results[offset];
            let mut single_codepoint_token = false;
            let mut node = self.tokens.child(ByteTrie::ROOT, normalized[offset]);
            let mut end = offset + 1;
            while let Some(n) = node {
                if let Some(id) = self.tokens.value(n) {
                    if end - offset == n_units {
                        single_codepoint_token = true;
                    }
                    let token_score = if vocab.is_user_defined(id) {
                        0.0
                    } else {
                        f64::from(vocab.tokens[id as usize].score)
                    };
                    let challenger = current.score + token_score;
                    if challenger > results[end].score {
                        results[end] = Best {
                            token: id,
                            start: offset,
                            score: challenger,
                        };
                    }
                }
                if end >= input_len {
                    break;
                }
                node = self.tokens.child(n, normalized[end]);
                end += 1;
            }
            if !single_codepoint_token {
                let challenger = current.score + f64::from(self.unknown_token_score);
                let end = offset + n_units;
                if challenger > results[end].score {
                    results[end] = Best {
                        token: unk,
                        start: offset,
                        score: challenger,
                    };
                }
            }
            offset += n_units;
        }

        // Backtrack from the end; consecutive unknown tokens become one.
        let first = out.len();
        let mut is_prev_unknown = false;
        let mut at = input_len;
        loop {
            let best = results[at];
            let is_unknown = best.token == unk;
            if !(is_prev_unknown && is_unknown) {
                out.push(best.token);
            }
            // `start < at` always holds for a reached offset; the check keeps a corrupt state
            // from looping.
            if best.start == 0 || best.start >= at {
                break;
            }
            is_prev_unknown = is_unknown;
            at = best.start;
        }
        out[first..].reverse();
    }

    /// Upstream's `normalize`: charsmap replacement per prefix, then whitespace handling.
    fn normalize(&self, vocab: &Vocab, input: &[u8]) -> Vec<u8> {
        let mut normalized = Vec::with_capacity(input.len() * 3);
        let space: &[u8] = if vocab.escape_whitespaces {
            ESCAPED_SPACE
        } else {
            b" "
        };
        let suffix = vocab.treat_whitespace_as_suffix;
        let shall_prepend_space = !suffix && vocab.add_space_prefix;
        let shall_append_space = suffix && vocab.add_space_prefix;
        let shall_merge_spaces = vocab.remove_extra_whitespaces;

        let mut is_space_prepended = false;
        let mut processing_non_ws = false;
        let mut offset = 0;
        while offset < input.len() {
            let (piece, consumed) = self.normalize_prefix(input, offset);
            for &c in piece {
                if c != b' ' {
                    if !processing_non_ws {
                        processing_non_ws = true;
                        if (shall_prepend_space && !is_space_prepended) || shall_merge_spaces {
                            normalized.extend_from_slice(space);
                            is_space_prepended = true;
                        }
                    }
                    normalized.push(c);
                } else {
                    processing_non_ws = false;
                    if !shall_merge_spaces {
                        normalized.extend_from_slice(space);
                    }
                }
            }
            offset += consumed;
        }
        if shall_append_space {
            normalized.extend_from_slice(space);
        }
        normalized
    }

    /// The normalized form of the prefix of `input[offset..]` and how many bytes it consumes.
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], offset: usize) -> (&'a [u8], usize) {
        let rest = &input[offset..];
        // Upstream takes the depth of the trie walk, which need not end on a user-defined
        // token (a prefix of one is enough): kept for identical output.
        let user = self.user_defined.longest_path(rest);
        if user > 0 {
            return (&rest[..user], user);
        }
        if let Some((len, repl)) = self.xcda.longest_match(rest) {
            // Offsets and termination were checked at load; an index out of range (upstream
            // throws here) falls through to copying the character.
            if let Some(r) = self.replacements.get(repl..) {
                if let Some(end) = r.iter().position(|&b| b == 0) {
                    return (&r[..end], len);
                }
            }
        }
        // One character as is when upstream's decoder accepts it, else U+FFFD for one byte.
        let mut n = 0;
        match unicode::cpt_from_utf8(rest, &mut n) {
            Some(_) => (&rest[..n], n),
            None => (REPLACEMENT_CHARACTER, 1),
        }
    }
}

/// Splits `tokenizer.ggml.precompiled_charsmap`: a little-endian u32 blob size, the XCDA
/// entries, then NUL-terminated replacement strings. Upstream rejects a blob size that leaves
/// no replacement bytes.
fn parse_charsmap(map: &[u8]) -> Result<(Xcda, Vec<u8>), TokenizerError> {
    if map.is_empty() {
        return Ok((Xcda::default(), Vec::new()));
    }
    let bad = |why: &str| TokenizerError::Invalid(format!("precompiled_charsmap: {why}"));
    let Some(head) = map.get(..4) else {
        return Err(bad("too small for the xcda_blob_size header"));
    };
    let blob_size = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    if blob_size + 4 >= map.len() {
        return Err(bad("xcda blob size out of bounds"));
    }
    let entries = map[4..4 + blob_size]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok((Xcda { entries }, map[4 + blob_size..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::vocab::{ATTR_UNKNOWN, ATTR_USER_DEFINED, VOCAB_UGM};
    use crate::tokenizer::test_util::{normal, vocab};

    /// A charsmap mapping "A" to "a": root BASE 0, so 'A' (65) is node 65 (LCHECK 'A', LEAF,
    /// BASE 37), whose value node 65 ^ 37 = 100 points at replacement offset 0.
    fn charsmap() -> Vec<u8> {
        let mut entries = vec![0u32; 101];
        entries[65] = 65 | (1 << 8) | (37 << 10);
        entries[100] = 1 << 31; // replacement offset 0
        let mut map = ((entries.len() * 4) as u32).to_le_bytes().to_vec();
        for e in entries {
            map.extend_from_slice(&e.to_le_bytes());
        }
        map.extend_from_slice(b"a\0");
        map
    }

    /// ids: <unk>=0 ▁=1 a=2 b=3 ▁a=4 ab=5 ▁ab=6 QXY=7 (user-defined)
    fn ugm(b_score: f32) -> Vocab {
        ugm_with(b_score, "QXY")
    }

    fn ugm_with(b_score: f32, user_defined: &'static str) -> Vocab {
        let mut t = vec![("<unk>", 0.0, ATTR_UNKNOWN)];
        t.extend(normal(&[
            ("▁", -2.0),
            ("a", -1.0),
            ("b", b_score),
            ("▁a", -1.5),
            ("ab", -1.5),
            ("▁ab", -2.5),
        ]));
        t.push((user_defined, 0.0, ATTR_USER_DEFINED));
        let mut v = vocab(VOCAB_UGM, &t, 0);
        v.precompiled_charsmap = charsmap();
        v.add_space_prefix = true;
        v
    }

    fn run(v: &Vocab, text: &[u8]) -> Vec<i32> {
        let mut out = Vec::new();
        UgmTokenizer::new(v)
            .unwrap()
            .tokenize_bytes(v, text, &mut out);
        out
    }

    fn normalized(v: &Vocab, text: &[u8]) -> String {
        String::from_utf8(UgmTokenizer::new(v).unwrap().normalize(v, text)).unwrap()
    }

    #[test]
    fn charsmap_maps_and_viterbi_keeps_the_first_of_equal_scores() {
        let v = ugm(-1.0);
        assert_eq!(normalized(&v, b"Ab"), "\u{2581}ab");
        // [▁ab] and [▁a, b] both score -2.5: the first found (▁ab) stays.
        assert_eq!(run(&v, b"Ab"), [6]);
        // b at -0.9: [▁a, b] = -2.4 wins.
        assert_eq!(run(&ugm(-0.9), b"Ab"), [4, 3]);
    }

    #[test]
    fn consecutive_unknowns_collapse() {
        let v = ugm(-1.0);
        assert_eq!(run(&v, b"xyz"), [1, 0]);
        assert_eq!(run(&v, b"xyzaqq"), [1, 0, 2, 0]);
    }

    #[test]
    fn whitespace_flags() {
        let mut v = ugm(-1.0);
        assert_eq!(normalized(&v, b"  A   b  "), "▁▁▁a▁▁▁b▁▁");
        v.remove_extra_whitespaces = true;
        assert_eq!(normalized(&v, b"  A   b  "), "▁a▁b");
        assert_eq!(run(&v, b"  A   b  "), [4, 1, 3]);
        v.add_space_prefix = false;
        // Merging still puts one space before every word, the first included.
        assert_eq!(normalized(&v, b"A b"), "▁a▁b");
        v.remove_extra_whitespaces = false;
        assert_eq!(normalized(&v, b"A b"), "a▁b");
        v.treat_whitespace_as_suffix = true;
        v.add_space_prefix = true;
        assert_eq!(normalized(&v, b"A b"), "a▁b▁");
        v.escape_whitespaces = false;
        assert_eq!(normalized(&v, b"A b"), "a b ");
    }

    #[test]
    fn user_defined_prefix_kept_raw_invalid_bytes_replaced() {
        let v = ugm(-1.0);
        assert_eq!(normalized(&v, b"QXYA"), "\u{2581}QXYa");
        // Upstream keeps as many bytes raw as its trie walk over the user-defined tokens
        // reaches, a whole token or not: with "AXY" user-defined, every "A" stays unmapped.
        let v = ugm_with(-1.0, "AXY");
        assert_eq!(normalized(&v, b"AXq"), "\u{2581}AXq");
        assert_eq!(normalized(&v, b"Aq"), "\u{2581}Aq");
        assert_eq!(normalized(&v, b"a\xffb"), "\u{2581}a\u{fffd}b");
    }

    #[test]
    fn bad_charsmaps_fail_the_load_or_stop_the_walk() {
        let mut v = ugm(-1.0);
        v.precompiled_charsmap = vec![1, 0];
        assert!(UgmTokenizer::new(&v).is_err());
        v.precompiled_charsmap = 8u32.to_le_bytes().to_vec();
        v.precompiled_charsmap.extend_from_slice(&[0; 8]);
        assert!(UgmTokenizer::new(&v).is_err());
        // A BASE pointing outside the array: upstream throws while tokenizing; here the walk
        // stops and the character is copied.
        let mut map = 4u32.to_le_bytes().to_vec();
        map.extend_from_slice(&(1000u32 << 10).to_le_bytes());
        map.extend_from_slice(b"x\0");
        v.precompiled_charsmap = map;
        assert_eq!(normalized(&v, b"Ab"), "\u{2581}Ab");
    }
}
