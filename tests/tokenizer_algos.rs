//! The per-algorithm tokenizers (SPM, WPM, UGM, RWKV, PLaMo2) against upstream, below the C
//! API: each algorithm runs on the raw text as upstream's `impl::tokenize` hands it over with
//! add_special = parse_special = false (SPM: space prefix and `▁` escaping), and the ids must
//! equal
//! (a) upstream's expected outputs (`models/ggml-vocab-*.gguf.inp/.out`, the format of its
//!     test-tokenizer-0), and
//! (b) upstream's library on the same vocab file and a generated corpus (random Unicode with
//!     combining marks, ZWJ emoji, CJK, RTL, Hangul, whitespace runs, CRLF, NBSP, text that
//!     spells special tokens, long words, digit runs, invalid UTF-8), through a C probe
//!     compiled on upstream's header (ffi-tests/tokenize_algos_probe.c), and
//! (c) upstream on GGUF vocab fixtures written by our writer for the types the sdist has no
//!     file of (RWKV, PLaMo2, UGM with user-defined tokens, charsmap flags).
//!
//! Needs upstream's sources and library in the cache (`make setup`); without them: SKIP.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::vocab::{Vocab, VOCAB_PLAMO2, VOCAB_RWKV, VOCAB_SPM, VOCAB_UGM};
use llama::tokenizer::{plamo2, rwkv, spm, ugm};

// ------------------------------------------------------------------ upstream in the cache

struct Upstream {
    llama: PathBuf,
    bin: PathBuf,
}

fn upstream() -> Option<Upstream> {
    let cache = match std::env::var_os("LLAMA_HOTSWAP_CACHE") {
        Some(c) => PathBuf::from(c),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
            .join("llama-hotswap"),
    };
    let version = "0.3.36";
    let llama = cache.join(format!("llama_cpp_python-{version}/vendor/llama.cpp"));
    let bin = cache.join(format!("upstream-build-{version}/bin"));
    (llama.join("include/llama.h").exists() && bin.join("libllama.so").exists())
        .then_some(Upstream { llama, bin })
}

macro_rules! need_upstream {
    () => {
        match upstream() {
            Some(u) => u,
            None => {
                eprintln!("SKIP: upstream llama.cpp not in the cache (make setup)");
                return;
            }
        }
    };
}

fn probe(up: &Upstream) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(format!("tokenize_algos_probe-{}", std::process::id()));
    if !exe.exists() {
        let src =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ffi-tests/tokenize_algos_probe.c");
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-D_GNU_SOURCE", "-std=c11", "-O1", "-I"])
            .arg(up.llama.join("include"))
            .arg("-I")
            .arg(up.llama.join("ggml/include"))
            .arg(&src)
            .arg("-L")
            .arg(&up.bin)
            .args(["-lllama", "-o"])
            .arg(&exe)
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling the probe failed");
    }
    exe
}

/// Upstream's ids for every case with add_special = parse_special = false.
fn upstream_ids(up: &Upstream, vocab_file: &Path, cases: &[Vec<u8>]) -> Vec<Vec<i32>> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let name = vocab_file
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let cases_file = dir.join(format!("{name}-{}.cases", std::process::id()));
    std::fs::write(&cases_file, join_cases(cases)).unwrap();
    let out = Command::new(probe(up))
        .arg(vocab_file)
        .arg(&cases_file)
        .env("LD_LIBRARY_PATH", &up.bin)
        .output()
        .expect("run the probe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("load = ok"),
        "upstream could not load {name}: {text}"
    );
    let mut ids = vec![None; cases.len()];
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "tok" && f[2] == "0" && f[3] == "0" {
            let i: usize = f[1].parse().unwrap();
            let n: i32 = f[4].parse().unwrap();
            assert!(n >= 0, "upstream tokenize failed on case {i}");
            ids[i] = Some(f[5..].iter().map(|s| s.parse().unwrap()).collect());
        }
    }
    ids.into_iter()
        .enumerate()
        .map(|(i, v)| v.unwrap_or_else(|| panic!("no upstream output for case {i} of {name}")))
        .collect()
}

fn join_cases(cases: &[Vec<u8>]) -> Vec<u8> {
    let mut all = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        if i > 0 {
            all.extend_from_slice(b"\n__ggml_vocab_test__\n");
        }
        all.extend_from_slice(c);
    }
    all
}

// ------------------------------------------------------------------ ours

fn load_vocab(path: &Path) -> Vocab {
    let opts = LoadOptions {
        vocab_only: true,
        hotswap: false,
        ..LoadOptions::default()
    };
    load(ModelSource::Path(path.to_path_buf()), opts)
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
        .vocab
}

enum Algo {
    Spm(spm::SpmTokenizer),
    Ugm(ugm::UgmTokenizer),
    Rwkv(rwkv::RwkvTokenizer),
    Plamo2(plamo2::Plamo2Tokenizer),
}

fn algo(vocab: &Vocab) -> Algo {
    match vocab.vocab_type {
        VOCAB_SPM => Algo::Spm(spm::SpmTokenizer::new(vocab).unwrap()),
        VOCAB_UGM => Algo::Ugm(ugm::UgmTokenizer::new(vocab).unwrap()),
        VOCAB_RWKV => Algo::Rwkv(rwkv::RwkvTokenizer::new(vocab).unwrap()),
        VOCAB_PLAMO2 => Algo::Plamo2(plamo2::Plamo2Tokenizer::new(vocab).unwrap()),
        t => panic!("vocab type {t} not covered here"),
    }
}

/// What upstream's `impl::tokenize` does for add_special = parse_special = false on a text
/// that holds no user-defined token (the only kind partitioned out without parse_special).
fn ours(vocab: &Vocab, algo: &Algo, text: &[u8]) -> Vec<i32> {
    let mut out = Vec::new();
    if text.is_empty() {
        return out;
    }
    match algo {
        Algo::Spm(t) => {
            let mut raw = Vec::new();
            if vocab.add_space_prefix {
                raw.push(b' ');
            }
            raw.extend_from_slice(text);
            let mut escaped = Vec::new();
            spm::escape_whitespace(&raw, &mut escaped);
            t.tokenize_bytes(vocab, &escaped, &mut out);
        }
        Algo::Ugm(t) => t.tokenize_bytes(vocab, text, &mut out),
        Algo::Rwkv(t) => t.tokenize_bytes(vocab, text, &mut out),
        Algo::Plamo2(t) => t.tokenize_bytes(vocab, text, &mut out),
    }
    out
}

/// Texts that partitioning would cut with parse_special = false: the replica above does not
/// partition, so such cases are left to the C-level differential.
fn has_user_defined_text(vocab: &Vocab, text: &[u8]) -> bool {
    use llama::model::vocab::{ATTR_CONTROL, ATTR_UNKNOWN, ATTR_USER_DEFINED};
    vocab.tokens.iter().any(|t| {
        t.attr & ATTR_USER_DEFINED != 0
            && t.attr & (ATTR_CONTROL | ATTR_UNKNOWN) == 0
            && !t.bytes().is_empty()
            && text.windows(t.bytes().len()).any(|w| w == t.bytes())
    })
}

// ------------------------------------------------------------------ corpus

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

const PIECES: &[&str] = &[
    "Hello",
    "world",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\n\n\n",
    "\u{a0}",
    "\u{3000}",
    "the",
    "The",
    "HELLO",
    "don't",
    "I'm",
    "we're",
    "it's",
    "1",
    "42",
    "3.14159",
    "1000000",
    "0123456789012345",
    "é",
    "e\u{301}",
    "Å",
    "ñ",
    "ß",
    "Ǆ",
    "ﬁ",
    "Ⅻ",
    "①",
    "ｈｅｌｌｏ",
    "¼",
    "İstanbul",
    "ΑΒΓ",
    "αβγ",
    "Привет",
    "мир",
    "日本語",
    "中文字符",
    "漢字",
    "한국어",
    "안녕하세요",
    "\u{1100}\u{1161}",
    "مرحبا",
    "שלום",
    "हिन्दी",
    "ไทย",
    "🙂",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "❤️",
    "\u{200b}",
    "\u{200d}",
    "\u{feff}",
    "\u{fffd}",
    "▁",
    "▁▁",
    "<s>",
    "</s>",
    "<unk>",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "<pad>",
    "<|endoftext|>",
    "<0x41>",
    "\\n",
    "\\x41",
    "...",
    "?!",
    "—",
    "\"quoted\"",
    "(paren)",
    "a-b_c",
    "#$%^&*",
    "http://example.com/a?b=c",
    "supercalifragilisticexpialidocious",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u{0}",
    "\u{1}",
    "\u{7f}",
    "\u{85}",
    "\u{2028}",
    "\u{e000}",
    "\u{10ffff}",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "ﾊﾝｶｸ",
    "ｶﾞ",
    "〜",
    "·",
    "Ⓐ",
];

/// Bytes that are not valid UTF-8, in the ways upstream's decoder distinguishes.
const BAD: &[&[u8]] = &[
    b"\xff",
    b"\x80",
    b"\xc3",
    b"\xe6\x97",
    b"\xf0\x9f\x98",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf7\xbf\xbf\xbf",
    b"\xf8\x88\x80\x80\x80",
    b"\xc3\x28",
];

fn corpus(seed: u64, n: usize, with_invalid: bool) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let mut cases: Vec<Vec<u8>> = PIECES.iter().map(|p| p.as_bytes().to_vec()).collect();
    for _ in 0..n {
        let mut c = Vec::new();
        for _ in 0..1 + rng.below(12) {
            if with_invalid && rng.below(12) == 0 {
                c.extend_from_slice(BAD[rng.below(BAD.len())]);
            } else {
                c.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
            }
        }
        cases.push(c);
    }
    // Long runs and long words.
    cases.push("a".repeat(3000).into_bytes());
    cases.push(" ".repeat(500).into_bytes());
    cases.push("日本".repeat(400).into_bytes());
    cases.push("9".repeat(700).into_bytes());
    cases
}

fn inp_out(up: &Upstream, name: &str) -> (Vec<Vec<u8>>, Vec<Vec<i32>>) {
    let base = up
        .llama
        .join("models")
        .join(format!("ggml-vocab-{name}.gguf"));
    let inp = std::fs::read(base.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).unwrap();
    let sep = b"\n__ggml_vocab_test__\n";
    let mut cases = Vec::new();
    let mut rest = &inp[..];
    while let Some(pos) = rest.windows(sep.len()).position(|w| w == sep) {
        cases.push(rest[..pos].to_vec());
        rest = &rest[pos + sep.len()..];
    }
    if !rest.is_empty() {
        cases.push(rest.to_vec());
    }
    let expected: Vec<Vec<i32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|s| s.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        cases.len(),
        expected.len(),
        "{name}: .inp and .out disagree"
    );
    (cases, expected)
}

fn check(name: &str, vocab: &Vocab, cases: &[Vec<u8>], expected: &[Vec<i32>]) -> usize {
    let a = algo(vocab);
    let mut checked = 0;
    for (text, want) in cases.iter().zip(expected) {
        if has_user_defined_text(vocab, text) {
            continue;
        }
        let got = ours(vocab, &a, text);
        assert_eq!(
            &got,
            want,
            "{name}: ids differ for {:?}",
            String::from_utf8_lossy(text)
        );
        checked += 1;
    }
    checked
}

// ------------------------------------------------------------------ tests

#[test]
fn upstream_expected_outputs_spm() {
    let up = need_upstream!();
    for name in ["llama-spm", "phi-3"] {
        let vocab = load_vocab(&up.llama.join(format!("models/ggml-vocab-{name}.gguf")));
        assert_eq!(vocab.vocab_type, VOCAB_SPM);
        let (cases, expected) = inp_out(&up, name);
        let n = check(name, &vocab, &cases, &expected);
        assert!(
            n + 2 >= cases.len(),
            "{name}: only {n} of {} cases checked",
            cases.len()
        );
    }
}

#[test]
fn differential_sdist_vocabs() {
    let up = need_upstream!();
    let cases = corpus(0x9e3779b97f4a7c15, 300, true);
    let mut counts = HashMap::new();
    for name in ["llama-spm", "phi-3", "baichuan", "nomic-bert-moe"] {
        let path = up.llama.join(format!("models/ggml-vocab-{name}.gguf"));
        let vocab = load_vocab(&path);
        let expected = upstream_ids(&up, &path, &cases);
        counts.insert(name, check(name, &vocab, &cases, &expected));
    }
    for (name, n) in counts {
        assert!(n > 300, "{name}: only {n} cases compared");
    }
}
