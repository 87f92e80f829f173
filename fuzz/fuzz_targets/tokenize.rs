//! Fuzzes tokenization: any bytes, with any add_special/parse_special, through BPE vocabs
//! that take the hand-written splitter path (llama3), the collapsed-regex path (gpt-4o, with
//! lookahead), the wide-regex path (deepseek-llm) and the TEST vocab. Tokenize must return
//! ids in range or a typed error, never panic; detokenize of those ids must succeed, with
//! the too-small-buffer convention. Run with `cargo +nightly fuzz run tokenize`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use llama::model::meta::{MetaArray, MetaValue, Metadata};
use llama::model::vocab::Vocab;
use llama::tokenizer::{detokenize, load_vocab, Tokenizer};

fn vocab(model: &str, pre: &str) -> (Vocab, Tokenizer) {
    // Byte characters, a few merged words and specials, merges between them.
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| llama::model::vocab::byte_to_unicode(b).to_string())
        .collect();
    for t in ["Ġt", "he", "Ġthe", "in", "Ġa", "er", "12", "<|s|>", "<|e|>"] {
        tokens.push(t.to_string());
    }
    let mut types = vec![1i128; tokens.len()];
    let n = types.len();
    types[n - 1] = 3;
    types[n - 2] = 3;
    let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "1 2"];
    let mut entries = vec![
        ("tokenizer.ggml.model".to_string(), MetaValue::Str(model.to_string())),
        ("tokenizer.ggml.pre".to_string(), MetaValue::Str(pre.to_string())),
        ("tokenizer.ggml.tokens".to_string(), MetaValue::Array(MetaArray::Strs(tokens))),
        ("tokenizer.ggml.token_type".to_string(), MetaValue::Array(MetaArray::Ints(types))),
        ("tokenizer.ggml.bos_token_id".to_string(), MetaValue::Int(n as i128 - 2)),
        ("tokenizer.ggml.eos_token_id".to_string(), MetaValue::Int(n as i128 - 1)),
        ("tokenizer.ggml.add_eos_token".to_string(), MetaValue::Bool(true)),
    ];
    entries.push((
        "tokenizer.ggml.merges".to_string(),
        MetaValue::Array(MetaArray::Strs(merges.iter().map(|s| s.to_string()).collect())),
    ));
    load_vocab(&Metadata::new(entries, Vec::new())).expect("fuzz vocab loads")
}

fn vocabs() -> &'static Vec<(Vocab, Tokenizer)> {
    static V: OnceLock<Vec<(Vocab, Tokenizer)>> = OnceLock::new();
    V.get_or_init(|| {
        vec![
            vocab("gpt2", "llama-bpe"),
            vocab("gpt2", "gpt-4o"),
            vocab("gpt2", "deepseek-llm"),
            vocab("gpt2", "superbpe"),
            vocab("test", ""),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, text)) = data.split_first() else { return };
    let (vocab, tokenizer) = &vocabs()[usize::from(sel >> 2) % vocabs().len()];
    let (add, parse) = (sel & 1 != 0, sel & 2 != 0);
    let ids = match tokenizer.tokenize(vocab, text, add, parse) {
        Ok(ids) => ids,
        Err(_) => return, // e.g. a code point above U+10FFFF: refused, like upstream's throw
    };
    assert!(ids.iter().all(|&id| id >= 0 && (id as usize) < vocab.tokens.len()));
    for (rs, up) in [(false, false), (true, true)] {
        let need = detokenize(vocab, &ids, &mut [], rs, up).expect("detokenize");
        let mut buf = vec![0u8; need.unsigned_abs() as usize];
        let n = detokenize(vocab, &ids, &mut buf, rs, up).expect("detokenize");
        // The size query counts the pieces; clean_spaces may then drop a few bytes.
        assert!(n >= 0 && n.unsigned_abs() <= need.unsigned_abs());
    }
});
