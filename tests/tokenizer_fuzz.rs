//! The tokenizer fuzz harness (`llama::tokenizer::harness`, run by cargo-fuzz in
//! fuzz/fuzz_targets/tokenize.rs) as a smoke test: the committed corpus (fuzz/corpus/tokenize)
//! and seeded random inputs through every in-memory vocabulary (BPE ×4, TEST, SPM, WPM,
//! UGM ×4, RWKV ×2, PLaMo2) and, when upstream's sources are in the cache, the sdist's
//! llama-spm, bert-bge and nomic-bert-moe (UGM with a precompiled charsmap) vocab files (SKIP
//! line otherwise). No input may panic or break the harness's invariants (ids in range,
//! detokenize and token_to_piece buffer conventions). `cargo test --test tokenizer_fuzz --
//! --ignored` rewrites the seed files (one per in-memory vocabulary).

use std::path::PathBuf;

use llama::loader::{load, LoadOptions, ModelSource};
use llama::tokenizer::attach;
use llama::tokenizer::harness::{builtin_vocabs, check_input, FuzzVocab};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/tokenize")
}

fn upstream_models() -> Option<PathBuf> {
    let cache = match std::env::var_os("LLAMA_HOTSWAP_CACHE") {
        Some(c) => PathBuf::from(c),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
            .join("llama-hotswap"),
    };
    let dir = cache.join("llama_cpp_python-0.3.36/vendor/llama.cpp/models");
    dir.join("ggml-vocab-llama-spm.gguf")
        .exists()
        .then_some(dir)
}

/// The in-memory vocabularies, then the sdist's SPM/WPM/UGM files when the cache has them.
fn vocabs() -> Vec<FuzzVocab> {
    let mut v = builtin_vocabs();
    let Some(dir) = upstream_models() else {
        eprintln!("SKIP (sdist vocab files): upstream llama.cpp not in the cache (make setup)");
        return v;
    };
    for name in ["llama-spm", "bert-bge", "nomic-bert-moe"] {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let opts = LoadOptions {
            vocab_only: true,
            hotswap: false,
            ..LoadOptions::default()
        };
        let mut model = load(ModelSource::Path(path.clone()), opts)
            .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
        let tokenizer = attach(&mut model.vocab).unwrap();
        v.push(FuzzVocab {
            name: name.to_string(),
            vocab: model.vocab,
            tokenizer,
        });
    }
    v
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Text pieces that reach the algorithms' corners: specials of every fixture, byte tokens,
/// escapes, whitespace runs, combining marks, CJK, emoji, invalid UTF-8, code points above
/// U+10FFFF as lax UTF-8.
const PIECES: &[&[u8]] = &[
    b"the",
    b" the",
    b"hello",
    b" world",
    b"abc",
    b"42",
    b"9999",
    b"  ",
    b"   ",
    b"\n",
    b"\r\n",
    b"\t",
    "\u{a0}".as_bytes(),
    "\u{3000}".as_bytes(),
    "日本語".as_bytes(),
    "é".as_bytes(),
    "e\u{301}".as_bytes(),
    "ﬁﬂ".as_bytes(),
    "Ⅻ!".as_bytes(),
    "straße".as_bytes(),
    "Привет".as_bytes(),
    "👍🏽".as_bytes(),
    "👨‍👩‍👧".as_bytes(),
    "\u{feff}".as_bytes(),
    "▁".as_bytes(),
    b"<|s|>",
    b"<|e|>",
    b"<s>",
    b"</s>",
    b"<unk>",
    b"<user>",
    b"<|im_start|>",
    b"[CLS]",
    b"[SEP]",
    b"[MASK]",
    b"<pad>",
    b"<|plamo:bos|>",
    b"<0x41>",
    b"\\x41",
    b"\\n",
    b"\\",
    b"xyz",
    b"kmz",
    b"##b",
    b"\xff",
    b"\xfe",
    b"\xc3",
    b"\xe6\x97",
    b"\xed\xa0\x80",
    b"\xf7\xbf\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\x00",
    b"'s",
    b"'LL",
    b"!?",
    b"...",
];

fn random_input(rng: &mut Rng, n_vocabs: usize) -> Vec<u8> {
    let mut data = vec![
        ((rng.below(n_vocabs) as u8) << 2) | (rng.next() as u8 & 3),
        rng.next() as u8,
    ];
    let len = rng.below(24);
    for _ in 0..len {
        if rng.below(4) == 0 {
            data.push(rng.next() as u8);
        } else {
            data.extend_from_slice(PIECES[rng.below(PIECES.len())]);
        }
    }
    data
}

#[test]
fn committed_corpus_never_panics() {
    let vocabs = vocabs();
    let mut entries: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/tokenize exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    assert!(
        entries.len() >= builtin_vocabs().len(),
        "seed corpus incomplete: {}",
        entries.len()
    );
    for path in entries {
        let bytes = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check_input(&vocabs, &bytes));
        assert!(outcome.is_ok(), "panic on corpus file {}", path.display());
    }
}

/// Seeded random inputs, each vocabulary and flag combination many times.
#[test]
fn random_inputs_never_panic() {
    let vocabs = vocabs();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let data = random_input(&mut rng, vocabs.len());
        let outcome = std::panic::catch_unwind(|| check_input(&vocabs, &data));
        assert!(outcome.is_ok(), "panic on input {data:?}");
    }
}

/// One seed per in-memory vocabulary (all flags set in both bytes but lstrip 1).
#[test]
#[ignore = "rewrites fuzz/corpus/tokenize; run by hand when the vocabularies change"]
fn write_seeds() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (i, v) in builtin_vocabs().iter().enumerate() {
        let mut data = vec![(i as u8) << 2 | 3, 0x17];
        data.extend_from_slice(
            "Hello world 42 the 日本語 e\u{301} ﬁ <|s|> <s> [CLS] <user> \\x41\n\n  !".as_bytes(),
        );
        let name = v.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        std::fs::write(dir.join(format!("seed_{i:02}_{name}")), data).unwrap();
    }
}
