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

use llama::gguf::{Gguf, GgufWriter, MetaArray, MetaValue};
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
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT.lock().unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(format!("tokenize_algos_probe-{}", std::process::id()));
    if !*built {
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
        *built = true;
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
            llama::tokenizer::escape_whitespace(&raw, &mut escaped);
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
    "hello",
    " world",
    "abc",
    "ab",
    "xy",
    "xyq",
    "[X",
    "hell",
    "日本語",
    "\\x41",
    "ABC",
    "kmz",
    "ﬁx",
    "Ⅻ?",
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

// ------------------------------------------------------------------ fixtures

/// A vocab-only llama file with the given tokenizer keys (upstream loads it vocab-only).
fn vocab_file(dir: &Path, name: &str, keys: Vec<(&str, MetaValue)>) -> PathBuf {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("general.name", name)
        .set("llama.context_length", 128u32)
        .set("llama.embedding_length", 64u32)
        .set("llama.block_count", 1u32)
        .set("llama.feed_forward_length", 128u32)
        .set("llama.rope.dimension_count", 16u32)
        .set("llama.attention.head_count", 4u32)
        .set("llama.attention.head_count_kv", 4u32)
        .set("llama.attention.layer_norm_rms_epsilon", 1e-5f32);
    for (k, v) in keys {
        w.set(k, v);
    }
    let path = dir.join(format!("{name}-{}.gguf", std::process::id()));
    w.write_to(&path).unwrap();
    path
}

fn strs(v: &[Vec<u8>]) -> MetaValue {
    MetaValue::Array(MetaArray::Str(v.to_vec()))
}

/// RWKV: escaped texts for bytes 0x00..=0xFD (0xFE and 0xFF have no token: upstream's unknown
/// id, NULL for RWKV), plus words, escapes, and duplicates of byte tokens (the later wins).
fn rwkv_tokens() -> Vec<Vec<u8>> {
    let mut t: Vec<Vec<u8>> = (0u8..=0xFD)
        .map(|b| match b {
            b'\\' => b"\\\\".to_vec(),
            b'\n' => b"\\n".to_vec(),
            b'\t' => b"\\t".to_vec(),
            b'\r' => b"\\r".to_vec(),
            0x20..=0x7e => vec![b],
            _ => format!("\\x{b:02x}").into_bytes(),
        })
        .collect();
    for w in [
        "the",
        " the",
        "hello",
        "hell",
        " world",
        "wor",
        "ab",
        "abc",
        "abcd",
        "日本",
        "日本語",
        "\\n\\n",
        "  ",
        "   ",
        "\\x41\\x42C",
        "\\x41",
        "\\'",
        "\\\"",
        "\\xA0",
        "\\xe6\\x97\\xa5",
        "\\u",
        "ld",
        " 42",
        "999",
    ] {
        t.push(w.as_bytes().to_vec());
    }
    t
}

/// PLaMo-2: control tokens 0..=3, the 256 byte tokens, then scored pieces (some scores equal).
fn plamo2_vocab() -> (Vec<Vec<u8>>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<Vec<u8>> = [
        "<|plamo:unk|>",
        "<|plamo:bos|>",
        "<|plamo:eos|>",
        "<|plamo:pad|>",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let mut scores = vec![0.0f32; 4];
    let mut types = vec![3i32; 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>").into_bytes());
        scores.push(0.0);
        types.push(6);
    }
    let words = [
        " ",
        "  ",
        "\n",
        "the",
        " the",
        "he",
        "h",
        "e",
        "t",
        "hello",
        "hell",
        "o",
        "llo",
        " world",
        "world",
        "wor",
        "ld",
        "日本",
        "日本語",
        "語",
        "本",
        "ab",
        "b",
        "abc",
        "bc",
        "c",
        "a",
        "ä",
        "4",
        "42",
        "2",
        "9999",
        "99",
        "Привет",
        "ет",
        "🙂",
        "👍",
        "\u{feff}",
        "ﬁ",
        "é",
        "e\u{301}",
    ];
    for (i, w) in words.iter().enumerate() {
        tokens.push(w.as_bytes().to_vec());
        // A few equal scores; a few odd fractions to exercise rounding of score * 1e4.
        scores.push(-1.0 - (i % 7) as f32 * 0.5 - w.len() as f32 * 0.123_45);
        types.push(1);
    }
    (tokens, scores, types)
}

/// UGM: pad/eos/unk, scored pieces with `▁`, user-defined and unused tokens.
fn ugm_vocab() -> (Vec<Vec<u8>>, Vec<f32>, Vec<i32>) {
    let mut tokens = Vec::new();
    let mut scores = Vec::new();
    let mut types = Vec::new();
    let mut add = |t: &str, s: f32, ty: i32| {
        tokens.push(t.as_bytes().to_vec());
        scores.push(s);
        types.push(ty);
    };
    add("<pad>", 0.0, 3);
    add("</s>", 0.0, 3);
    add("<unk>", 0.0, 2);
    add("<user>", 0.0, 4);
    add("xyz", 0.0, 4);
    add("zzz", -3.0, 5);
    // A prefix of a user-defined token is kept as is by upstream's normalizer (its trie walk
    // depth, not a match), so "ﬁx" keeps "ﬁ" where the charsmap would give "fi".
    add("ﬁﬂ", 0.0, 4);
    add("Ⅻ!", 0.0, 4);
    // "kmz": [k, mz] scores -10, [km, <unk>] -1 + (min score - 10 penalty): the penalty decides.
    add("k", -5.0, 1);
    add("km", -1.0, 1);
    add("mz", -5.0, 1);
    let words = [
        "▁",
        "▁the",
        "▁hello",
        "hell",
        "o",
        "▁world",
        "▁wor",
        "ld",
        "a",
        "b",
        "c",
        "ab",
        "abc",
        "▁a",
        "日本",
        "語",
        "▁日本",
        "x",
        "y",
        "q",
        "▁x",
        "e",
        "l",
        "h",
        "▁h",
        "t",
        "he",
        "w",
        "r",
        "d",
        "1",
        "4",
        "2",
        "42",
        "▁4",
        "▁1",
        ".",
        ",",
        "!",
        "?",
        "'",
        "▁'",
        "s",
        "▁s",
        "i",
        "n",
    ];
    for (i, w) in words.iter().enumerate() {
        add(
            w,
            -2.0 - (i % 5) as f32 * 0.75 - w.chars().count() as f32 * 0.3,
            1,
        );
    }
    (tokens, scores, types)
}

fn fixtures_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tokenizer_algos");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn differential_rwkv_fixture() {
    let up = need_upstream!();
    let path = vocab_file(
        &fixtures_dir(),
        "rwkv",
        vec![
            ("tokenizer.ggml.model", "rwkv".into()),
            ("tokenizer.ggml.tokens", strs(&rwkv_tokens())),
        ],
    );
    let vocab = load_vocab(&path);
    assert_eq!(vocab.vocab_type, VOCAB_RWKV);
    let mut cases = corpus(7, 300, true);
    cases.push(vec![0xfe, 0xff, b'a', 0xff]);
    let expected = upstream_ids(&up, &path, &cases);
    assert!(check("rwkv", &vocab, &cases, &expected) > 300);
}

#[test]
fn differential_plamo2_fixture() {
    let up = need_upstream!();
    let (tokens, scores, types) = plamo2_vocab();
    let path = vocab_file(
        &fixtures_dir(),
        "plamo2",
        vec![
            ("tokenizer.ggml.model", "plamo2".into()),
            ("tokenizer.ggml.tokens", strs(&tokens)),
            ("tokenizer.ggml.scores", scores.into()),
            ("tokenizer.ggml.token_type", types.into()),
        ],
    );
    let vocab = load_vocab(&path);
    assert_eq!(vocab.vocab_type, VOCAB_PLAMO2);
    let cases = corpus(11, 300, true);
    let expected = upstream_ids(&up, &path, &cases);
    assert!(check("plamo2", &vocab, &cases, &expected) > 300);
}

/// UGM fixtures: both whitespace flags in all four combinations, with and without the
/// precompiled charsmap of the sdist's nomic-bert-moe vocab (read from the cache).
#[test]
fn differential_ugm_fixtures() {
    let up = need_upstream!();
    let nomic = std::fs::read(up.llama.join("models/ggml-vocab-nomic-bert-moe.gguf")).unwrap();
    let charsmap = {
        let g = Gguf::parse(&nomic).unwrap();
        GgufWriter::from_gguf(&g)
            .get("tokenizer.ggml.precompiled_charsmap")
            .cloned()
            .expect("nomic-bert-moe has a charsmap")
    };
    let (tokens, scores, types) = ugm_vocab();
    let cases = corpus(13, 200, true);
    for with_map in [false, true] {
        for prefix in [false, true] {
            for merge in [false, true] {
                let name = format!(
                    "ugm-map{}-prefix{}-merge{}",
                    with_map as u8, prefix as u8, merge as u8
                );
                let mut keys = vec![
                    ("tokenizer.ggml.model", "t5".into()),
                    ("tokenizer.ggml.tokens", strs(&tokens)),
                    ("tokenizer.ggml.scores", scores.clone().into()),
                    ("tokenizer.ggml.token_type", types.clone().into()),
                    ("tokenizer.ggml.add_space_prefix", prefix.into()),
                    ("tokenizer.ggml.remove_extra_whitespaces", merge.into()),
                ];
                if with_map {
                    keys.push(("tokenizer.ggml.precompiled_charsmap", charsmap.clone()));
                }
                let path = vocab_file(&fixtures_dir(), &name, keys);
                let vocab = load_vocab(&path);
                assert_eq!(vocab.vocab_type, VOCAB_UGM);
                let expected = upstream_ids(&up, &path, &cases);
                assert!(check(&name, &vocab, &cases, &expected) > 150, "{name}");
            }
        }
    }
}
