//! The grammar fuzz harness (fuzz/fuzz_targets/grammar_parser.rs), shared with the test that
//! replays the committed corpus: any input must be accepted or refused without panicking.
//!
//! Input: GBNF text, then optionally a NUL and a string to feed the grammar. Accepted
//! grammars are printed, applied to a small vocabulary (every byte, some multi-byte pieces,
//! tokens `<[id]>`), and fed the string piece by piece.

use std::sync::Arc;

use super::engine::{parse_grammar, Grammar, Triggers};
use super::utf8::decode_utf8;
use super::vocab::GrammarVocab;

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
    let pieces = self::vocab();
    for (id, ok) in allowed.iter().enumerate() {
        if !*ok {
            continue;
        }
        let mut g = grammar.clone();
        // An allowed token is accepted, with one exception inherited from upstream: a piece
        // that completes a code point of value 0 (an overlong sequence such as C0 80 across
        // two tokens) looks like the end of the token in apply's decoded form (0-terminated)
        // and passes there, while accept feeds the 0 to the grammar. Upstream then aborts;
        // we refuse the token and keep the state.
        if g.accept(id as i32).is_err() {
            let piece = pieces.piece(id as i32).unwrap_or_default();
            let (cps, _) = decode_utf8(piece, grammar.partial_utf8());
            assert!(
                cps[..cps.len() - 1].contains(&0),
                "allowed token {id} refused"
            );
            assert_eq!(
                g.stacks(),
                grammar.stacks(),
                "a refused token changed the stacks"
            );
        }
    }
}
