//! The tokenizer fuzz harness (feature `fixtures`): small vocabularies of every type built in
//! memory, and [`check_input`], which runs one input through tokenize, detokenize and
//! token_to_piece with flags taken from the input. Used by `fuzz/fuzz_targets/tokenize.rs`
//! and replayed by `cargo test --test tokenizer_fuzz` (the committed corpus plus seeded
//! mutations).
//!
//! Input layout: byte 0 picks the vocabulary (bits 2..8) and add_special / parse_special
//! (bits 0, 1); byte 1 holds remove_special / unparse_special (bits 0, 1), token_to_piece's
//! `special` (bit 2) and `lstrip` (bits 4..8); the rest is the text.

use crate::model::meta::{MetaArray, MetaValue, Metadata};
use crate::model::vocab::Vocab;

use super::{detokenize, load_vocab, token_to_piece, Tokenizer};

/// A named vocabulary and its tokenizer.
pub struct FuzzVocab {
    pub name: String,
    pub vocab: Vocab,
    pub tokenizer: Tokenizer,
}

fn strs<S: AsRef<str>>(v: &[S]) -> MetaValue {
    MetaValue::Array(MetaArray::Strs(
        v.iter().map(|s| s.as_ref().to_string()).collect(),
    ))
}

fn ints(v: &[i32]) -> MetaValue {
    MetaValue::Array(MetaArray::Ints(v.iter().map(|&i| i128::from(i)).collect()))
}

fn floats(v: &[f32]) -> MetaValue {
    MetaValue::Array(MetaArray::Floats(v.iter().map(|&f| f64::from(f)).collect()))
}

fn build(name: &str, keys: Vec<(&str, MetaValue)>) -> FuzzVocab {
    let entries = keys.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let (vocab, tokenizer) = load_vocab(&Metadata::new(entries, Vec::new()))
        .unwrap_or_else(|e| panic!("fuzz vocab {name}: {e}"));
    FuzzVocab {
        name: name.to_string(),
        vocab,
        tokenizer,
    }
}

/// BPE with byte characters, a few merged words and two control tokens.
fn bpe(model: &str, pre: &str) -> FuzzVocab {
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| crate::model::vocab::byte_to_unicode(b).to_string())
        .collect();
    for t in ["Ġt", "he", "Ġthe", "in", "Ġa", "er", "12", "<|s|>", "<|e|>"] {
        tokens.push(t.to_string());
    }
    let mut types = vec![1; tokens.len()];
    let n = types.len();
    types[n - 1] = 3;
    types[n - 2] = 3;
    let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "1 2"];
    build(
        &format!("{model}/{pre}"),
        vec![
            ("tokenizer.ggml.model", MetaValue::Str(model.to_string())),
            ("tokenizer.ggml.pre", MetaValue::Str(pre.to_string())),
            ("tokenizer.ggml.tokens", strs(&tokens)),
            ("tokenizer.ggml.token_type", ints(&types)),
            ("tokenizer.ggml.bos_token_id", MetaValue::Int(n as i128 - 2)),
            ("tokenizer.ggml.eos_token_id", MetaValue::Int(n as i128 - 1)),
            ("tokenizer.ggml.add_eos_token", MetaValue::Bool(true)),
            ("tokenizer.ggml.merges", strs(&merges)),
        ],
    )
}

/// SPM: unk/bos/eos, the 256 byte tokens, scored pieces with `▁`, a user-defined and a
/// control token that parse_special matches.
fn spm() -> FuzzVocab {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let words = [
        "▁", "▁the", "▁hello", "hell", "o", "▁world", "ab", "abc", "a", "b", "c", "日本", "▁日",
        "本", "42", "▁4", "2", "e", "h", "l", "▁t", "he", "▁▁", "é", "\u{301}",
    ];
    for (i, w) in words.iter().enumerate() {
        tokens.push((*w).to_string());
        types.push(1);
        scores.push(-1.0 - (i % 5) as f32 * 0.5 - w.len() as f32 * 0.1);
    }
    for (t, ty) in [("<user>", 4), ("<|im_start|>", 3)] {
        tokens.push(t.to_string());
        types.push(ty);
        scores.push(0.0);
    }
    build(
        "llama (SPM)",
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("llama".into())),
            ("tokenizer.ggml.tokens", strs(&tokens)),
            ("tokenizer.ggml.scores", floats(&scores)),
            ("tokenizer.ggml.token_type", ints(&types)),
            ("tokenizer.ggml.add_eos_token", MetaValue::Bool(true)),
        ],
    )
}

/// WPM: [PAD] [UNK] [CLS] [SEP] [MASK], words and `##` continuations.
fn wpm() -> FuzzVocab {
    let mut tokens: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![3, 2, 3, 3, 3];
    for w in [
        "the", "hello", "hel", "##lo", "world", "##s", "a", "b", "##b", "##c", "ab", "日", "本",
        ",", ".", "!", "1", "##2", "42", "e", "é", "##é", "straße", "ﬁ",
    ] {
        tokens.push(w.to_string());
        types.push(1);
    }
    build(
        "bert (WPM)",
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("bert".into())),
            ("tokenizer.ggml.tokens", strs(&tokens)),
            ("tokenizer.ggml.token_type", ints(&types)),
            ("tokenizer.ggml.padding_token_id", MetaValue::Int(0)),
            ("tokenizer.ggml.unknown_token_id", MetaValue::Int(1)),
            ("tokenizer.ggml.bos_token_id", MetaValue::Int(2)),
            ("tokenizer.ggml.seperator_token_id", MetaValue::Int(3)),
            ("tokenizer.ggml.mask_token_id", MetaValue::Int(4)),
        ],
    )
}

fn utf8(tokens: Vec<Vec<u8>>) -> Vec<String> {
    tokens
        .into_iter()
        .map(|t| String::from_utf8(t).expect("fixture tokens are UTF-8"))
        .collect()
}

/// UGM (the fixture of `gguf::fixtures::vocab_algos`, no charsmap), one per whitespace flag
/// pair.
fn ugm(prefix: bool, merge: bool) -> FuzzVocab {
    let (tokens, scores, types) = crate::gguf::fixtures::vocab_algos::ugm_vocab();
    build(
        &format!("t5 (UGM) prefix {prefix} merge {merge}"),
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("t5".into())),
            ("tokenizer.ggml.tokens", strs(&utf8(tokens))),
            ("tokenizer.ggml.scores", floats(&scores)),
            ("tokenizer.ggml.token_type", ints(&types)),
            ("tokenizer.ggml.add_space_prefix", MetaValue::Bool(prefix)),
            (
                "tokenizer.ggml.remove_extra_whitespaces",
                MetaValue::Bool(merge),
            ),
        ],
    )
}

/// RWKV with every byte, or without 0xFE/0xFF (whose unknown id is NULL, as upstream).
fn rwkv(all_bytes: bool) -> FuzzVocab {
    let tokens = utf8(crate::gguf::fixtures::vocab_algos::rwkv_tokens(all_bytes));
    build(
        &format!("rwkv all bytes {all_bytes}"),
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("rwkv".into())),
            ("tokenizer.ggml.tokens", strs(&tokens)),
        ],
    )
}

fn plamo2() -> FuzzVocab {
    let (tokens, scores, types) = crate::gguf::fixtures::vocab_algos::plamo2_vocab();
    build(
        "plamo2",
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("plamo2".into())),
            ("tokenizer.ggml.tokens", strs(&utf8(tokens))),
            ("tokenizer.ggml.scores", floats(&scores)),
            ("tokenizer.ggml.token_type", ints(&types)),
        ],
    )
}

/// Every in-memory vocabulary: BPE through the hand-written splitter (llama3), the collapsed
/// regex with lookahead (gpt-4o), wide-character regexes (deepseek-llm), an empty-match
/// lookahead (superbpe), then TEST, SPM, WPM, UGM ×4, RWKV ×2 and PLaMo2. The order is the
/// selector's: new vocabularies go at the end so the committed seeds keep theirs.
pub fn builtin_vocabs() -> Vec<FuzzVocab> {
    vec![
        bpe("gpt2", "llama-bpe"),
        bpe("gpt2", "gpt-4o"),
        bpe("gpt2", "deepseek-llm"),
        bpe("gpt2", "superbpe"),
        bpe("test", ""),
        spm(),
        wpm(),
        ugm(false, false),
        ugm(true, false),
        ugm(false, true),
        ugm(true, true),
        rwkv(true),
        rwkv(false),
        plamo2(),
    ]
}

/// Runs one input (layout in the module doc) on `vocabs`: tokenize gives ids in range (or
/// RWKV's NULL unknown id, which detokenize then refuses with an error) or a typed error;
/// detokenize sizes and fills its buffer consistently and reports a too-small buffer; every
/// token's piece (and of the ids around the range's ends) follows the buffer convention and
/// matches the size query. Panics on any violation.
pub fn check_input(vocabs: &[FuzzVocab], data: &[u8]) {
    let (Some(&sel), Some(&flags)) = (data.first(), data.get(1)) else {
        return;
    };
    if vocabs.is_empty() {
        return;
    }
    let text = &data[2..];
    let v = &vocabs[usize::from(sel >> 2) % vocabs.len()];
    let (add, parse) = (sel & 1 != 0, sel & 2 != 0);
    let (remove_special, unparse_special) = (flags & 1 != 0, flags & 2 != 0);
    let special = flags & 4 != 0;
    let lstrip = i32::from(flags >> 4);
    let name = &v.name;
    let vocab = &v.vocab;
    let n_tokens = vocab.tokens.len() as i32;
    let Ok(ids) = v.tokenizer.tokenize(vocab, text, add, parse) else {
        return; // e.g. a code point above U+10FFFF: refused, like upstream's throw
    };
    assert!(
        ids.iter().all(|&id| (-1..n_tokens).contains(&id)),
        "{name}: id out of range in {ids:?}"
    );
    if ids.contains(&-1) {
        assert!(
            detokenize(vocab, &ids, &mut [0u8; 64], remove_special, unparse_special).is_err(),
            "{name}: detokenize accepted id -1"
        );
        return;
    }
    let need = detokenize(vocab, &ids, &mut [], remove_special, unparse_special)
        .unwrap_or_else(|e| panic!("{name}: detokenize size query: {e}"));
    assert!(need <= 0, "{name}: an empty buffer took {need} bytes");
    let mut buf = vec![0u8; need.unsigned_abs() as usize];
    let n = detokenize(vocab, &ids, &mut buf, remove_special, unparse_special)
        .unwrap_or_else(|e| panic!("{name}: detokenize: {e}"));
    // The size query counts the pieces; clean_spaces may then drop a few bytes.
    assert!(
        n >= 0 && n.unsigned_abs() <= need.unsigned_abs(),
        "{name}: detokenize wrote {n} after asking for {need}"
    );
    if n > 0 {
        let mut short = vec![0u8; n as usize - 1];
        let m = detokenize(vocab, &ids, &mut short, remove_special, unparse_special)
            .unwrap_or_else(|e| panic!("{name}: detokenize into a short buffer: {e}"));
        assert!(m < 0, "{name}: a buffer one byte short gave {m}");
    }
    let mut piece = [0u8; 256];
    let edges = [0, n_tokens - 1, n_tokens, -1, i32::MAX, i32::MIN];
    for &id in ids.iter().chain(&edges) {
        let in_range = (0..n_tokens).contains(&id);
        match token_to_piece(vocab, id, &mut piece, lstrip, special) {
            Ok(len) => {
                assert!(in_range, "{name}: a piece for id {id}");
                assert!(len >= 0 || len.unsigned_abs() as usize > piece.len());
                let size = token_to_piece(vocab, id, &mut [], lstrip, special).unwrap();
                let expected = if len > 0 { -len } else { len };
                assert_eq!(
                    size, expected,
                    "{name}: piece of {id}: {len} bytes, size query {size}"
                );
            }
            Err(_) => assert!(!in_range, "{name}: no piece for id {id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_vocab_takes_a_few_inputs() {
        let vocabs = builtin_vocabs();
        for i in 0..vocabs.len() as u8 {
            for flags in [0u8, 0x37, 0xF4] {
                for text in [
                    &b"the hello world 42 \xe6\x97\xa5 <|s|> <user> [CLS]"[..],
                    b"\xff\xfe a",
                ] {
                    let mut data = vec![i << 2 | 3, flags];
                    data.extend_from_slice(text);
                    check_input(&vocabs, &data);
                }
            }
        }
    }
}
