//! Fuzzes tokenization on every vocabulary type: BPE (the llama3 hand-written splitter, gpt-4o's
//! lookahead regex on the collapsed text, deepseek-llm's wide-character regexes, superbpe's
//! empty-match lookahead), TEST, SPM, WPM, UGM (each whitespace flag pair), RWKV (with and
//! without every byte) and PLaMo2, all built in memory by
//! `llama::tokenizer::harness::builtin_vocabs`; plus, when upstream's sources are in the cache
//! (`$UPSTREAM_LLAMA/models`, `. scripts/env.sh`), the sdist's SPM, WPM and UGM vocab files
//! (llama-spm, bert-bge, nomic-bert-moe with its precompiled charsmap) loaded at start (a
//! line says which were skipped). Byte 0 picks the vocab and add_special/parse_special, byte 1
//! the detokenize and token_to_piece flags, the rest is the text; see
//! `llama::tokenizer::harness::check_input` for what must hold. Run with
//! `cargo +nightly fuzz run tokenize`.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::tokenizer::attach;
use llama::tokenizer::harness::{builtin_vocabs, check_input, FuzzVocab};

/// The sdist's vocab files of the types without a BPE regex, when the cache has them.
fn sdist_vocabs() -> Vec<FuzzVocab> {
    let Some(dir) = std::env::var_os("UPSTREAM_LLAMA").map(|d| PathBuf::from(d).join("models"))
    else {
        eprintln!("tokenize fuzz: UPSTREAM_LLAMA unset, skipping the sdist vocab files");
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in ["llama-spm", "bert-bge", "nomic-bert-moe"] {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let opts = LoadOptions {
            vocab_only: true,
            hotswap: false,
            ..LoadOptions::default()
        };
        match load(ModelSource::Path(path.clone()), opts) {
            Ok(mut model) => match attach(&mut model.vocab) {
                Ok(tokenizer) => out.push(FuzzVocab {
                    name: name.to_string(),
                    vocab: model.vocab,
                    tokenizer,
                }),
                Err(e) => panic!("{}: tokenizer: {e}", path.display()),
            },
            Err(e) => eprintln!("tokenize fuzz: skipping {}: {e}", path.display()),
        }
    }
    out
}

fn vocabs() -> &'static [FuzzVocab] {
    static V: OnceLock<Vec<FuzzVocab>> = OnceLock::new();
    V.get_or_init(|| {
        let mut v = builtin_vocabs();
        v.extend(sdist_vocabs());
        v
    })
}

fuzz_target!(|data: &[u8]| {
    check_input(vocabs(), data);
});
