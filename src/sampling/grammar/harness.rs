//! The grammar fuzz harness (fuzz/fuzz_targets/grammar_parser.rs), shared with the test that
//! replays the committed corpus: any input must be accepted or refused without panicking.
//!
//! Input: GBNF text, then optionally a NUL and a string to feed the grammar. Accepted
//! grammars are printed, applied to a small vocabulary (every byte, some multi-byte pieces,
//! tokens `<[id]>`), and fed the string piece by piece.

use std::sync::Arc;

use super::{parse_grammar, Grammar, GrammarVocab, Triggers};

/// Pieces of the harness vocabulary: token 0 is end-of-generation, 1..=256 single bytes,
/// then a few multi-byte and partial pieces.
fn vocab() -> Arc<GrammarVocab> {
    let mut pieces: Vec<Vec<u8>> = vec![b"</s>".to_vec()];
    pieces.extend((0..=255u8).map(|b| vec![b]));
    for p in ["ab", "{\"", "é", "\u{20AC}x", "😀", " the"] {
        pieces.push(p.as_bytes().to_vec());
    }
    pieces.push(b"\xF0\x9F".to_vec());
    pieces.push(b"\x98\x80".to_vec());
    Arc::new(GrammarVocab::new(pieces, [0]))
}

pub fn check_input(data: &[u8]) {
    let (text, feed) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(parsed) = parse_grammar(text, None) {
        // every parse prints (upstream's printer would throw on malformed rules)
        parsed.print().expect("a parsed grammar prints");
    }
    let vocab = vocab();
    let n = vocab.n_tokens();
    let Ok(mut grammar) = Grammar::new(Some(vocab), text, "root", Triggers::default()) else {
        return;
    };
    let mut rejected = Vec::new();
    grammar
        .apply(n, |i| i as i32, |i| rejected.push(i))
        .expect("a grammar with a vocab applies");
    assert!(rejected.len() <= n);
    // feed the string in pieces of up to 3 bytes (code points split across tokens), then
    // try every allowed token once from the final state
    for chunk in feed.chunks(3).take(64) {
        if grammar.accept_token(-1, chunk).is_err() {
            break;
        }
    }
    let mut allowed = vec![true; n];
    grammar
        .apply(n, |i| i as i32, |i| allowed[i] = false)
        .expect("applies");
    for (id, ok) in allowed.iter().enumerate() {
        if *ok {
            let mut g = grammar.clone();
            // an allowed token is accepted (end-of-generation only when the grammar can end)
            assert!(g.accept(id as i32).is_ok(), "allowed token {id} refused");
        }
    }
}
