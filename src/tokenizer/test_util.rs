//! Small hand-made vocabularies for the algorithms' unit tests.

use std::ffi::CString;

use crate::model::vocab::{Token, Vocab, ATTR_NORMAL};

/// A vocabulary of `vocab_type` with the given (text, score, attr) tokens, `token_to_id` and
/// `max_token_len` filled as upstream's load does, and the unknown token `unk`.
pub fn vocab(vocab_type: i32, tokens: &[(&str, f32, i32)], unk: i32) -> Vocab {
    let mut v = Vocab {
        vocab_type,
        ..Vocab::default()
    };
    for (i, &(text, score, attr)) in tokens.iter().enumerate() {
        v.token_to_id.insert(text.as_bytes(), i as i32);
        v.max_token_len = v.max_token_len.max(text.len());
        v.tokens.push(Token {
            text: CString::new(text).unwrap(),
            score,
            attr,
        });
    }
    v.specials.unk = unk;
    v
}

/// Normal tokens with scores.
pub fn normal(tokens: &[(&'static str, f32)]) -> Vec<(&'static str, f32, i32)> {
    tokens.iter().map(|&(t, s)| (t, s, ATTR_NORMAL)).collect()
}
