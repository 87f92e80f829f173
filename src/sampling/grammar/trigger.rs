//! Lazy-grammar trigger patterns (upstream `llama_grammar_trigger_pattern`): a regex over
//! the text generated so far; the grammar starts at the first non-empty capture group (or at
//! the match when no group captured anything).
//!
//! Upstream compiles the patterns with `std::regex` (ECMAScript). We use `fancy-regex`, which
//! also has look-around and backreferences, the ECMAScript features trigger patterns use
//! (e.g. `(?=...)`); Rust's `regex` crate lacks them. Remaining differences are ECMAScript
//! details (`\d`/`\w` are Unicode-aware here, ASCII there).

use super::error::GrammarError;

#[derive(Clone, Debug)]
pub struct TriggerPattern {
    pub pattern: String,
    regex: fancy_regex::Regex,
}

/// Largest compiled pattern accepted (fancy-regex's size limit, bytes): a hostile pattern
/// is refused instead of exhausting memory.
const REGEX_SIZE_LIMIT: usize = 16 << 20;

impl TriggerPattern {
    pub fn new(pattern: &str) -> Result<TriggerPattern, GrammarError> {
        let regex = fancy_regex::RegexBuilder::new(pattern)
            .delegate_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| GrammarError::BadPattern {
                pattern: pattern.to_string(),
                reason: e.to_string(),
            })?;
        Ok(TriggerPattern {
            pattern: pattern.to_string(),
            regex,
        })
    }

    /// Upstream `llama_grammar_trigger_pattern::find`: the byte offset in `input` where the
    /// constrained text starts, or `None` when the pattern does not match.
    ///
    /// `input` is the raw bytes of the generated pieces and may hold invalid UTF-8 (a token
    /// can end inside a code point); the regex runs on a lossy copy and offsets are mapped
    /// back to the raw bytes.
    pub fn find(&self, input: &[u8]) -> Option<usize> {
        let (text, to_raw) = lossy_with_offsets(input);
        // `^...$` patterns: upstream tries a full match first, then a search; with both
        // anchors a search finds the same match, so one search serves both.
        let caps = match self.regex.captures(&text) {
            Ok(Some(caps)) => caps,
            Ok(None) => return None,
            Err(e) => {
                crate::log_warn!(
                    "grammar trigger pattern '{}' failed on the buffered text: {e}",
                    self.pattern
                );
                return None;
            }
        };
        let start = (1..caps.len())
            .filter_map(|i| caps.get(i))
            .find(|m| !m.as_str().is_empty())
            .map(|m| m.start())
            .or_else(|| caps.get(0).map(|m| m.start()))?;
        Some(to_raw(start))
    }
}

/// Upstream builds one pattern out of trigger words:
/// `[\s\S]*?(word1|word2|...)[\s\S]*`, with `.^$|()*+?[]{}\` escaped in each word.
pub fn pattern_from_words(words: &[&str]) -> String {
    let mut pattern = String::from("[\\s\\S]*?(");
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            pattern.push('|');
        }
        for c in word.chars() {
            if ".^$|()*+?[]{}\\".contains(c) {
                pattern.push('\\');
            }
            pattern.push(c);
        }
    }
    pattern.push_str(")[\\s\\S]*");
    pattern
}

/// `input` as a string (invalid sequences as U+FFFD) and a map from that string's byte
/// offsets back to `input`'s.
fn lossy_with_offsets(input: &[u8]) -> (String, impl Fn(usize) -> usize) {
    if let Ok(s) = std::str::from_utf8(input) {
        let owned = s.to_string();
        return (owned, OffsetMap::Identity.into_fn());
    }
    let mut text = String::with_capacity(input.len() + 8);
    // (offset in text, offset in input) at the start of each piece
    let mut marks: Vec<(usize, usize)> = Vec::new();
    let mut raw = 0usize;
    for chunk in input.utf8_chunks() {
        let valid = chunk.valid();
        marks.push((text.len(), raw));
        text.push_str(valid);
        raw += valid.len();
        let invalid = chunk.invalid();
        if !invalid.is_empty() {
            marks.push((text.len(), raw));
            text.push('\u{FFFD}');
            raw += invalid.len();
        }
    }
    marks.push((text.len(), raw));
    (text, OffsetMap::Marks(marks).into_fn())
}

enum OffsetMap {
    Identity,
    Marks(Vec<(usize, usize)>),
}

impl OffsetMap {
    fn into_fn(self) -> impl Fn(usize) -> usize {
        move |offset| match &self {
            OffsetMap::Identity => offset,
            OffsetMap::Marks(marks) => {
                // the last mark at or before `offset`; inside a valid run offsets are linear,
                // inside a replacement char they map to its first raw byte
                let k = marks
                    .partition_point(|&(t, _)| t <= offset)
                    .saturating_sub(1);
                let (t, r) = marks[k];
                let next_raw = marks.get(k + 1).map_or(usize::MAX, |m| m.1);
                (r + (offset - t)).min(next_raw)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_nonempty_group_or_match() {
        let p = TriggerPattern::new(&pattern_from_words(&["<tool_call>"])).unwrap();
        assert_eq!(p.find(b"hello <tool_call>{"), Some(6));
        assert_eq!(p.find(b"hello <tool_"), None);
        let p = TriggerPattern::new("^(a)?b").unwrap();
        assert_eq!(p.find(b"b"), Some(0));
        let p = TriggerPattern::new("x(?=y)").unwrap();
        assert_eq!(p.find(b"axy"), Some(1));
    }

    #[test]
    fn words_are_escaped() {
        assert_eq!(
            pattern_from_words(&["a.b", "[x]"]),
            "[\\s\\S]*?(a\\.b|\\[x\\])[\\s\\S]*"
        );
    }

    #[test]
    fn invalid_utf8_offsets_map_back() {
        let p = TriggerPattern::new("(go)").unwrap();
        // 0xE2 alone is replaced by U+FFFD (3 bytes) in the searched text
        assert_eq!(p.find(b"a\xE2go"), Some(2));
        assert!(TriggerPattern::new("(unclosed").is_err());
    }
}
