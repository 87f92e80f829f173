//! Byte-level BPE (upstream's `llm_tokenizer_bpe` and its sessions, src/llama-vocab.cpp) with
//! every pre-tokenizer of the pinned upstream: its regexes, the hand-written splitters of
//! src/unicode.cpp, and its "collapsed" regex path, where each code point of the text becomes
//! one character standing for its Unicode category before the regex runs (with upstream's
//! quirks: `\s` is C's isspace, unknown categories are 0xD0, non-ASCII whitespace is 0x0B).
//! Regexes run on `fancy-regex` (lookaround), one fragment at a time so that lookahead stops
//! at the fragment's end as `std::regex_iterator` does.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::unicode::{self as uc, flags};
use crate::model::vocab::{pre, Vocab};

// Upstream's regexes, by name (written as upstream writes them: `\\` is one backslash).
const RE_GPT2: &str =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const RE_LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_LLAMA3_ORIG: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const RE_KIMI_K2: &str = "\\p{Han}+";
const RE_AFMOE_DIGITS: &str = "\\p{AFMoE_digits}";
const RE_NEWLINES: &str = "[^\\n]+|[\\n]+";
const RE_TINY_AYA_DIGITS: &str = "\\d{1,3}(?=(?:\\d{3})*\\b)";

/// The regexes upstream's `llm_tokenizer_bpe` constructor picks for a pre-tokenizer type, and
/// whether words are GPT-2 byte-encoded.
fn regex_exprs(pre_type: i32) -> (Vec<&'static str>, bool) {
    use pre::*;
    let v: Vec<&'static str> = match pre_type {
        LLAMA3 | DBRX | SMAUG => vec![RE_LLAMA3],
        JAIS2 => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"],
        DEEPSEEK_LLM => vec![
            "[\r\n]",
            "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
            "\\s+$",
            "[一-龥ࠀ-一가-퟿]+",
            "\\p{N}+",
        ],
        DEEPSEEK3_LLM | HUNYUAN_DENSE | JOYAI_LLM | HY_V4 => vec![
            "\\p{N}{1,3}",
            "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
        ],
        SPARK2_5 => vec![
            "\\p{N}{1,3}",
            "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
            "\\p{N}",
        ],
        YOUTU => vec![
            "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        DEEPSEEK_CODER => vec![
            "[\r\n]",
            "\\s?\\p{L}+",
            "\\s?\\p{P}+",
            "[一-龥ࠀ-一가-퟿]+",
            "\\p{N}",
        ],
        FALCON => vec![
            "[\\p{P}\\$\\+<=>\\^~\\|`]+",
            RE_GPT2,
            "[0-9][0-9][0-9]",
        ],
        STARCODER | REFACT | COMMAND_R | SMOLLM | CODESHELL | EXAONE | MINERVA | MELLUM2 => {
            vec!["\\p{N}", RE_GPT2]
        }
        GPT2 | MPT | OLMO | JAIS | TRILLION | GRANITE_DOCLING => vec![RE_GPT2],
        STABLELM2 | QWEN2 | HUNYUAN | SOLAR_OPEN => vec![RE_QWEN2],
        QWEN35 => vec![RE_QWEN35],
        PORO | BLOOM | GPT3_FINNISH => vec![" ?[^(\\s|.,!?…。，、।۔،)]+"],
        CHATGLM4 => vec![RE_LLAMA3],
        VIKING => vec![" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"],
        TEKKEN => vec!["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        CHAMELEON => vec![
            "<sentinel:[0-9]+>",
            "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )",
            "\\p{N}",
            "[\\p{P}!-/:-@\\[-`{-~]",
            RE_GPT2,
        ],
        GPT4O | MINIMAX_M2 => vec!["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        GRANITE_EMB_MULTI => vec!["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        TINY_AYA => vec![
            RE_TINY_AYA_DIGITS,
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        KIMI_K2 => vec![RE_KIMI_K2],
        SUPERBPE => vec!["\\p{N}+", "(?=(\\d{3})+(?!\\d))"],
        BAILINGMOE => vec!["'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
        SEED_CODER => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        UFAKZEKA => vec!["[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        GROK_2 => vec![RE_QWEN2],
        AFMOE => vec![
            RE_AFMOE_DIGITS,
            "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        LAGUNA => vec![RE_NEWLINES, RE_QWEN2],
        EXAONE_MOE => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
        GEMMA4 | SARVAM_MOE => return (vec![RE_NEWLINES], false),
        MINICPM5 => vec![
            "\\p{N}{1,3}",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        WHITESPACE => return (vec!["\\S+"], false),
        _ => vec![
            "[\\p{P}\\$\\+<=>\\^~\\|]+",
            RE_GPT2,
            "\\p{N}+",
            "[0-9][0-9][0-9]",
        ],
    };
    (v, true)
}

/// Upstream's `k_ucat_enum` keys: a regex naming one of these runs on the collapsed text.
const UCATS: &[(&str, u16)] = &[
    ("\\p{N}", uc::NUMBER),
    ("\\p{L}", uc::LETTER),
    ("\\p{P}", uc::PUNCTUATION),
    ("\\p{M}", uc::ACCENT_MARK),
    ("\\p{S}", uc::SYMBOL),
    ("\\p{Lu}", uc::LETTER),
    ("\\p{Ll}", uc::LETTER),
    ("\\p{Lt}", uc::LETTER),
    ("\\p{Lm}", uc::LETTER),
    ("\\p{Lo}", uc::LETTER),
];

/// The collapsed character of a category (`k_ucat_cpt`) and the ASCII members of the class
/// (`k_ucat_map`), as regex source.
fn ucat_collapsed(cat: u16) -> (char, &'static str) {
    match cat {
        uc::NUMBER => ('\u{D1}', "\\x30-\\x39"),
        uc::LETTER => ('\u{D2}', "\\x41-\\x5A\\x61-\\x7A"),
        uc::PUNCTUATION => (
            '\u{D3}',
            "\\x21-\\x23\\x25-\\x2A\\x2C-\\x2F\\x3A-\\x3B\\x3F-\\x40\\x5B-\\x5D\\x5F\\x7B\\x7D",
        ),
        uc::ACCENT_MARK => ('\u{D4}', ""),
        _ => ('\u{D5}', "\\x24\\x2B\\x3C-\\x3E\\x5E\\x60\\x7C\\x7E"),
    }
}

/// C's isspace as a regex class body, and ECMAScript's `\d`, `\w` in the C locale.
const C_SPACE: &str = "\\t\\n\\x0B\\x0C\\r ";
const C_DIGIT: &str = "0-9";
const C_WORD: &str = "0-9A-Za-z_";

/// Turns one of upstream's ECMAScript regexes into fancy-regex syntax with the same meaning
/// on the text we hand it: `\p{..}` categories become their collapsed classes (when
/// `collapsed`), and `\s \S \d \w \b` become the C-locale ASCII classes std::regex uses.
fn translate(expr: &str, collapsed: bool) -> String {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::with_capacity(expr.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '[' && (i == 0 || chars[i - 1] != '\\') && !inside {
            inside = true;
            out.push('[');
            i += 1;
            continue;
        }
        if inside && c == ']' && chars[i - 1] != '\\' {
            inside = false;
            out.push(']');
            i += 1;
            continue;
        }
        if c == '\\' && i + 1 < chars.len() {
            let e = chars[i + 1];
            if collapsed && e == 'p' && chars.get(i + 2) == Some(&'{') {
                let close = chars[i + 3..]
                    .iter()
                    .position(|&x| x == '}')
                    .map(|p| p + i + 3);
                if let Some(close) = close.filter(|&c| c <= i + 10) {
                    let pat: String = chars[i..=close].iter().collect();
                    if let Some(&(_, cat)) = UCATS.iter().find(|(name, _)| *name == pat) {
                        let (marker, ascii) = ucat_collapsed(cat);
                        if !inside {
                            out.push('[');
                        }
                        out.push_str(&format!("\\x{{{:X}}}", marker as u32));
                        out.push_str(ascii);
                        if !inside {
                            out.push(']');
                        }
                        i = close + 1;
                        continue;
                    }
                }
            }
            let class = |body: &str, negate: bool, inside: bool| {
                if inside {
                    body.to_string()
                } else {
                    format!("[{}{body}]", if negate { "^" } else { "" })
                }
            };
            let replaced = match e {
                's' => Some(class(C_SPACE, false, inside)),
                'S' if !inside => Some(class(C_SPACE, true, false)),
                'd' => Some(class(C_DIGIT, false, inside)),
                'w' => Some(class(C_WORD, false, inside)),
                'b' if !inside => Some(format!(
                    "(?:(?<=[{C_WORD}])(?![{C_WORD}])|(?<![{C_WORD}])(?=[{C_WORD}]))"
                )),
                _ => None,
            };
            if let Some(r) = replaced {
                out.push_str(&r);
            } else {
                out.push(c);
                out.push(e);
            }
            i += 2;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// One step of upstream's `unicode_regex_split`.
enum Splitter {
    Gpt2,
    /// llama3 (`digits` 3), qwen2 (1), qwen35 (1, marks join letters).
    Llama3Like {
        digits: usize,
        marks: bool,
    },
    KimiK2,
    /// AFMoE and tiny_aya digit grouping.
    Afmoe,
    Newlines,
    Regex {
        re: fancy_regex::Regex,
        collapsed: bool,
    },
}

/// A BPE vocabulary's tokenizer: its pre-tokenizer steps and encoding.
pub struct BpeTokenizer {
    splitters: Vec<Splitter>,
    need_collapse: bool,
    byte_encode: bool,
    session: Session,
}

#[derive(Clone, Copy, PartialEq)]
enum Session {
    Plain,
    HybridDna,
    Whitespace,
}

#[derive(Clone, Copy)]
struct Symbol {
    prev: i32,
    next: i32,
    start: usize,
    n: usize,
}

impl BpeTokenizer {
    pub fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let (exprs, byte_encode) = regex_exprs(vocab.pre_type);
        let mut need_collapse = false;
        let mut splitters = Vec::with_capacity(exprs.len());
        for expr in exprs {
            let uses_ucat = UCATS.iter().any(|(name, _)| expr.contains(name));
            need_collapse |= uses_ucat;
            let custom = match expr {
                RE_GPT2 => Some(Splitter::Gpt2),
                RE_LLAMA3 | RE_LLAMA3_ORIG => Some(Splitter::Llama3Like {
                    digits: 3,
                    marks: false,
                }),
                RE_QWEN2 => Some(Splitter::Llama3Like {
                    digits: 1,
                    marks: false,
                }),
                RE_QWEN35 => Some(Splitter::Llama3Like {
                    digits: 1,
                    marks: true,
                }),
                RE_KIMI_K2 => Some(Splitter::KimiK2),
                RE_AFMOE_DIGITS | RE_TINY_AYA_DIGITS => Some(Splitter::Afmoe),
                RE_NEWLINES => Some(Splitter::Newlines),
                _ => None,
            };
            let splitter = match custom {
                Some(s) => s,
                None => {
                    let source = translate(expr, uses_ucat);
                    let re = fancy_regex::RegexBuilder::new(&source)
                        .backtrack_limit(usize::MAX)
                        .build()
                        .map_err(|e| {
                            TokenizerError::Invalid(format!(
                                "pre-tokenizer regex '{expr}' does not compile: {e}"
                            ))
                        })?;
                    Splitter::Regex {
                        re,
                        collapsed: uses_ucat,
                    }
                }
            };
            splitters.push(splitter);
        }
        let session = match vocab.tokenizer_model.as_str() {
            "hybriddna" => Session::HybridDna,
            "whitespace" => Session::Whitespace,
            _ => Session::Plain,
        };
        Ok(BpeTokenizer {
            splitters,
            need_collapse,
            byte_encode,
            session,
        })
    }

    /// One raw-text fragment (`llm_tokenizer_bpe_session::tokenize`, or the hybriddna /
    /// whitespace session's).
    pub fn tokenize(
        &self,
        vocab: &Vocab,
        text: &[u8],
        out: &mut Vec<i32>,
    ) -> Result<(), TokenizerError> {
        match self.session {
            Session::Plain => self.tokenize_plain(vocab, text, out),
            Session::Whitespace => {
                let lowercase = vocab.normalizer_opts.lowercase;
                let mut segment = Vec::new();
                for cpt in uc::cpts_from_utf8(text) {
                    if uc::is_whitespace(cpt) {
                        if !segment.is_empty() {
                            self.tokenize_plain(vocab, &segment, out)?;
                            segment.clear();
                        }
                    } else {
                        let c = if lowercase { uc::tolower(cpt) } else { cpt };
                        if !uc::push_utf8(c, &mut segment) {
                            return Err(invalid_cpt(c));
                        }
                    }
                }
                if !segment.is_empty() {
                    self.tokenize_plain(vocab, &segment, out)?;
                }
                Ok(())
            }
            Session::HybridDna => self.tokenize_dna(vocab, text, out),
        }
    }

    fn tokenize_dna(
        &self,
        vocab: &Vocab,
        text: &[u8],
        out: &mut Vec<i32>,
    ) -> Result<(), TokenizerError> {
        const OPEN: &[u8] = b"<dna>";
        const CLOSE: &[u8] = b"</dna>";
        let (Some(begin_id), Some(end_id), Some(oov_id)) = (
            vocab.text_to_token(OPEN),
            vocab.text_to_token(CLOSE),
            vocab.text_to_token(b"<oov>"),
        ) else {
            return self.tokenize_plain(vocab, text, out);
        };
        let find = |hay: &[u8], needle: &[u8], from: usize| {
            memchr::memmem::find(&hay[from..], needle).map(|p| p + from)
        };
        let mut pos = 0;
        while pos < text.len() {
            let Some(start) = find(text, OPEN, pos) else {
                self.tokenize_plain(vocab, &text[pos..], out)?;
                break;
            };
            if start > pos {
                self.tokenize_plain(vocab, &text[pos..start], out)?;
            }
            out.push(begin_id);
            let content = start + OPEN.len();
            let end = find(text, CLOSE, content);
            let seq: Vec<u8> = text[content..end.unwrap_or(text.len())]
                .iter()
                .map(|b| b.to_ascii_uppercase())
                .collect();
            let kmer_token = |kmer: &[u8]| {
                let mut key = kmer.to_vec();
                key.extend_from_slice(crate::model::vocab::DNA_KMER_MARKER);
                vocab.text_to_token(&key).unwrap_or(oov_id)
            };
            const K: usize = 6;
            let mut i = 0;
            while i + K <= seq.len() {
                out.push(kmer_token(&seq[i..i + K]));
                i += K;
            }
            if i < seq.len() {
                let mut kmer = seq[i..].to_vec();
                kmer.resize(K, b'A');
                out.push(kmer_token(&kmer));
            }
            let Some(end) = end else { break };
            out.push(end_id);
            pos = end + CLOSE.len();
        }
        Ok(())
    }

    fn tokenize_plain(
        &self,
        vocab: &Vocab,
        text: &[u8],
        out: &mut Vec<i32>,
    ) -> Result<(), TokenizerError> {
        let words = self.split(text)?;
        let mut symbols: Vec<Symbol> = Vec::new();
        let mut queue: BinaryHeap<Reverse<(i32, i32, i32, usize)>> = BinaryHeap::new();
        let mut key = Vec::new();
        for word in &words {
            let word = word.as_slice();
            symbols.clear();
            queue.clear();
            let mut offset = 0;
            // Whole word as one symbol: a token under ignore_merges, or gemma4's newline runs.
            let whole = (vocab.ignore_merges
                || (vocab.pre_type == pre::GEMMA4 && word.iter().all(|&b| b == b'\n')))
                && vocab.text_to_token(word).is_some();
            if whole {
                symbols.push(Symbol {
                    prev: -1,
                    next: -1,
                    start: 0,
                    n: word.len(),
                });
                offset = word.len();
            }
            let mut index = 0i32;
            while offset < word.len() {
                let n = (word.len() - offset).min(uc::len_utf8(word[offset]));
                let start = offset;
                offset += n;
                symbols.push(Symbol {
                    prev: index - 1,
                    next: if offset == word.len() { -1 } else { index + 1 },
                    start,
                    n,
                });
                index += 1;
            }
            let text_of = |s: &Symbol| &word[s.start..s.start + s.n];
            let add_bigram = |symbols: &[Symbol],
                              queue: &mut BinaryHeap<Reverse<(i32, i32, i32, usize)>>,
                              key: &mut Vec<u8>,
                              left: i32,
                              right: i32| {
                if left == -1 || right == -1 {
                    return;
                }
                let (l, r) = (&symbols[left as usize], &symbols[right as usize]);
                let rank = vocab.find_bpe_rank(text_of(l), text_of(r), key);
                if rank >= 0 {
                    queue.push(Reverse((rank, left, right, l.n + r.n)));
                }
            };
            for i in 1..symbols.len() as i32 {
                add_bigram(&symbols, &mut queue, &mut key, i - 1, i);
            }
            while let Some(Reverse((_, left, right, size))) = queue.pop() {
                let (l, r) = (symbols[left as usize], symbols[right as usize]);
                // Stale: either side already merged away, or the pair's text changed (both
                // sides are adjacent slices of the word starting at `l.start`, so equal text
                // means equal length).
                if l.n == 0 || r.n == 0 || l.n + r.n != size {
                    continue;
                }
                symbols[left as usize].n += r.n;
                symbols[right as usize].n = 0;
                symbols[left as usize].next = r.next;
                if r.next >= 0 {
                    symbols[r.next as usize].prev = left;
                }
                let prev = symbols[left as usize].prev;
                let next = symbols[left as usize].next;
                add_bigram(&symbols, &mut queue, &mut key, prev, left);
                add_bigram(&symbols, &mut queue, &mut key, left, next);
            }
            for sym in symbols.iter().filter(|s| s.n > 0) {
                let piece = text_of(sym);
                match vocab.text_to_token(piece) {
                    Some(id) => out.push(id),
                    None => {
                        for &b in piece {
                            let id = if self.byte_encode {
                                vocab.text_to_token(&[b])
                            } else {
                                vocab.text_to_token(format!("<0x{b:02X}>").as_bytes())
                            };
                            if let Some(id) = id {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `unicode_regex_split`: the words of `text`, GPT-2 byte-encoded when the vocab is.
    fn split(&self, text: &[u8]) -> Result<Vec<Vec<u8>>, TokenizerError> {
        let cpts = uc::cpts_from_utf8(text);
        let collapsed: Vec<u8> = if self.need_collapse {
            cpts.iter().map(|&c| collapse(c)).collect()
        } else {
            Vec::new()
        };
        let mut offsets = vec![cpts.len()];
        for splitter in &self.splitters {
            offsets = match splitter {
                Splitter::Gpt2 => split_gpt2(&cpts, &offsets),
                &Splitter::Llama3Like { digits, marks } => {
                    split_llama3(&cpts, &offsets, digits, marks)
                }
                Splitter::KimiK2 => split_kimi_k2(&cpts, &offsets),
                Splitter::Afmoe => split_afmoe(&cpts, &offsets),
                Splitter::Newlines => split_newlines(&cpts, &offsets),
                Splitter::Regex { re, collapsed: c } => {
                    let hay: Vec<char> = if *c {
                        collapsed.iter().map(|&b| char::from(b)).collect()
                    } else {
                        cpts.iter().map(|&c| wide_char(c)).collect()
                    };
                    split_regex(re, &hay, &offsets)?
                }
            };
        }
        let mut words = Vec::with_capacity(offsets.len());
        let mut start = 0;
        for &len in &offsets {
            let mut word = Vec::with_capacity(len);
            for &c in &cpts[start..start + len] {
                if !uc::push_utf8(c, &mut word) {
                    return Err(invalid_cpt(c));
                }
            }
            start += len;
            if self.byte_encode {
                let mut encoded = Vec::with_capacity(word.len() * 2);
                for &b in &word {
                    let mut buf = [0u8; 4];
                    let s = crate::model::vocab::byte_to_unicode(b).encode_utf8(&mut buf);
                    encoded.extend_from_slice(s.as_bytes());
                }
                word = encoded;
            }
            words.push(word);
        }
        Ok(words)
    }
}

fn invalid_cpt(c: u32) -> TokenizerError {
    // Upstream throws std::invalid_argument out of llama_tokenize here (the host dies).
    TokenizerError::Invalid(format!(
        "text decodes to code point 0x{c:X}, above U+10FFFF (invalid UTF-8)"
    ))
}

/// A code point's collapsed byte: itself below 128, 0x0B for whitespace, its category's
/// marker, or 0xD0.
fn collapse(cpt: u32) -> u8 {
    if cpt < 128 {
        return cpt as u8;
    }
    let f = flags(cpt);
    if f & uc::WHITESPACE != 0 {
        return 0x0B;
    }
    match f & uc::MASK_CATEGORIES {
        uc::NUMBER => 0xD1,
        uc::LETTER => 0xD2,
        uc::PUNCTUATION => 0xD3,
        uc::ACCENT_MARK => 0xD4,
        uc::SYMBOL => 0xD5,
        _ => 0xD0,
    }
}

/// A code point as the wide-regex path sees it: non-ASCII whitespace becomes 0x0B; code
/// points that are no `char` (surrogates, above U+10FFFF) become U+FFFD, which no
/// upstream regex names either.
fn wide_char(cpt: u32) -> char {
    if cpt > 0x7F && uc::is_whitespace(cpt) {
        return '\u{0B}';
    }
    char::from_u32(cpt).unwrap_or('\u{FFFD}')
}

/// `unicode_regex_split_stl` over one fragment at a time.
fn split_regex(
    re: &fancy_regex::Regex,
    hay: &[char],
    offsets: &[usize],
) -> Result<Vec<usize>, TokenizerError> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    let mut s = String::new();
    let mut byte_to_idx: Vec<usize> = Vec::new();
    for &offset in offsets {
        s.clear();
        byte_to_idx.clear();
        for (i, &c) in hay[start..start + offset].iter().enumerate() {
            for _ in 0..c.len_utf8() {
                byte_to_idx.push(i);
            }
            s.push(c);
        }
        byte_to_idx.push(offset);
        let mut start_idx = 0;
        for m in re.find_iter(&s) {
            let m = m.map_err(|e| TokenizerError::Invalid(format!("pre-tokenizer regex: {e}")))?;
            let (pos, end) = (byte_to_idx[m.start()], byte_to_idx[m.end()]);
            if pos > start_idx {
                out.push(pos - start_idx);
            }
            out.push(end - pos);
            start_idx = end;
        }
        if start_idx < offset {
            out.push(offset - start_idx);
        }
        start += offset;
    }
    Ok(out)
}

/// Cursor helpers shared by the hand-written splitters: code point and flags inside the
/// fragment, OUT_OF_RANGE / 0 outside, and `_add_token`.
struct Frag<'a> {
    cpts: &'a [u32],
    ini: usize,
    end: usize,
    prev_end: usize,
    out: &'a mut Vec<usize>,
}

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

impl Frag<'_> {
    fn cpt(&self, pos: usize) -> u32 {
        if self.ini <= pos && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }
    fn flags(&self, pos: usize) -> u16 {
        if self.ini <= pos && pos < self.end {
            flags(self.cpts[pos])
        } else {
            0
        }
    }
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

fn for_each_fragment(
    cpts: &[u32],
    offsets: &[usize],
    mut f: impl FnMut(&mut Frag<'_>),
) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &offset in offsets {
        let mut frag = Frag {
            cpts,
            ini: start,
            end: start + offset,
            prev_end: start,
            out: &mut out,
        };
        f(&mut frag);
        start += offset;
    }
    out
}

const L: u16 = uc::LETTER;
const N: u16 = uc::NUMBER;
const W: u16 = uc::WHITESPACE;
const M: u16 = uc::ACCENT_MARK;

fn is_rn(c: u32) -> bool {
    c == '\r' as u32 || c == '\n' as u32
}

/// `'s|'t|'re|'ve|'m|'ll|'d` at `pos` (case-folded when `fold`): the match length.
fn contraction(f: &Frag<'_>, pos: usize, fold: bool) -> usize {
    let low = |c: u32| if fold { uc::tolower(c) } else { c };
    if f.cpt(pos) != '\'' as u32 || pos + 1 >= f.end {
        return 0;
    }
    let next = low(f.cpt(pos + 1));
    if [b's', b't', b'm', b'd']
        .iter()
        .any(|&c| next == u32::from(c))
    {
        return 2;
    }
    if pos + 2 < f.end {
        let nn = low(f.cpt(pos + 2));
        let pair = |a: u8, b: u8| next == u32::from(a) && nn == u32::from(b);
        if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
            return 3;
        }
    }
    0
}

/// Trailing whitespace handling shared by the splitters: `\s*[\r\n]+` (when `newlines`),
/// `\s+(?!\S)`, `\s+`, else one code point. Returns the new position.
fn whitespace_tail(f: &mut Frag<'_>, pos: usize, newlines: bool) -> usize {
    let mut num = 0;
    let mut last_rn = 0;
    while f.flags(pos + num) & W != 0 {
        if newlines && is_rn(f.cpt(pos + num)) {
            last_rn = pos + num + 1;
        }
        num += 1;
    }
    if last_rn > 0 {
        f.add(last_rn);
        return last_rn;
    }
    if num > 1 && f.cpt(pos + num) != OUT_OF_RANGE {
        let p = pos + num - 1;
        f.add(p);
        return p;
    }
    if num > 0 {
        f.add(pos + num);
        return pos + num;
    }
    f.add(pos + 1);
    pos + 1
}

fn split_gpt2(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    for_each_fragment(cpts, offsets, |f| {
        let mut pos = f.ini;
        while pos < f.end {
            let cpt = f.cpt(pos);
            let fl = f.flags(pos);
            let n = contraction(f, pos, false);
            if n > 0 {
                pos += f.add(pos + n);
                continue;
            }
            let sp = usize::from(cpt == ' ' as u32);
            let mut flags2 = if sp == 1 { f.flags(pos + 1) } else { fl };
            let run =
                |f: &mut Frag<'_>, mut pos: usize, mut flags2: u16, pred: &dyn Fn(u16) -> bool| {
                    pos += sp;
                    while pred(flags2) {
                        pos += 1;
                        flags2 = f.flags(pos);
                    }
                    f.add(pos);
                    pos
                };
            if flags2 & L != 0 {
                pos = run(f, pos, flags2, &|x| x & L != 0);
                continue;
            }
            if flags2 & N != 0 {
                pos = run(f, pos, flags2, &|x| x & N != 0);
                continue;
            }
            let other = |x: u16| x & (W | L | N) == 0 && x != 0;
            if other(flags2) {
                pos += sp;
                while other(flags2) {
                    pos += 1;
                    flags2 = f.flags(pos);
                }
                f.add(pos);
                continue;
            }
            pos = whitespace_tail(f, pos, false);
        }
    })
}

fn split_llama3(cpts: &[u32], offsets: &[usize], digits: usize, marks: bool) -> Vec<usize> {
    let letter = if marks { L | M } else { L };
    for_each_fragment(cpts, offsets, |f| {
        let mut pos = f.ini;
        while pos < f.end {
            let cpt = f.cpt(pos);
            let fl = f.flags(pos);
            let n = contraction(f, pos, true);
            if n > 0 {
                pos += f.add(pos + n);
                continue;
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(is_rn(cpt) || fl & N != 0) && (fl & letter != 0 || f.flags(pos + 1) & letter != 0)
            {
                pos += 1;
                while f.flags(pos) & letter != 0 {
                    pos += 1;
                }
                f.add(pos);
                continue;
            }
            // \p{N}{1,digits}
            if fl & N != 0 {
                if digits == 1 {
                    pos += 1;
                } else {
                    let mut ini = pos;
                    while f.flags(pos) & N != 0 {
                        pos += 1;
                        if pos - ini >= digits {
                            f.add(pos);
                            ini = pos;
                        }
                    }
                }
                f.add(pos);
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+[\r\n]*
            let other = if marks { W | L | M | N } else { W | L | N };
            let mut flags2 = if cpt == ' ' as u32 {
                f.flags(pos + 1)
            } else {
                fl
            };
            if flags2 & other == 0 && fl != 0 {
                pos += usize::from(cpt == ' ' as u32);
                while flags2 & other == 0 && flags2 != 0 {
                    pos += 1;
                    flags2 = f.flags(pos);
                }
                while is_rn(f.cpt(pos)) {
                    pos += 1;
                }
                f.add(pos);
                continue;
            }
            pos = whitespace_tail(f, pos, true);
        }
    })
}

fn split_kimi_k2(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    for_each_fragment(cpts, offsets, |f| {
        let mut pos = f.ini;
        let letter_not_han = |f: &Frag<'_>, p: usize| f.flags(p) & L != 0 && !uc::is_han(f.cpt(p));
        while pos < f.end {
            let cpt = f.cpt(pos);
            let fl = f.flags(pos);
            if uc::is_han(cpt) {
                while uc::is_han(f.cpt(pos)) {
                    pos += 1;
                }
                f.add(pos);
                continue;
            }
            let leading_ok = !(is_rn(cpt) || fl & L != 0 || fl & N != 0);
            let is_letter_pattern =
                (fl & L != 0 && !uc::is_han(cpt)) || (leading_ok && letter_not_han(f, pos + 1));
            if is_letter_pattern {
                let mut has_leading = false;
                if leading_ok {
                    has_leading = true;
                    pos += 1;
                }
                let mut has_letters = false;
                while letter_not_han(f, pos) {
                    has_letters = true;
                    pos += 1;
                }
                if has_letters || (!has_leading && letter_not_han(f, pos)) {
                    if !has_letters {
                        pos += 1;
                    }
                    while letter_not_han(f, pos) {
                        pos += 1;
                    }
                    if f.cpt(pos) == '\'' as u32 && pos + 1 < f.end {
                        pos += contraction(f, pos, true);
                    }
                    f.add(pos);
                    continue;
                } else if has_leading {
                    pos -= 1;
                }
            }
            if fl & N != 0 {
                let mut ini = pos;
                while f.flags(pos) & N != 0 {
                    pos += 1;
                    if pos - ini >= 3 {
                        f.add(pos);
                        ini = pos;
                    }
                }
                f.add(pos);
                continue;
            }
            let mut flags2 = if cpt == ' ' as u32 {
                f.flags(pos + 1)
            } else {
                fl
            };
            if flags2 & (W | L | N) == 0 && flags2 != 0 {
                pos += usize::from(cpt == ' ' as u32);
                while flags2 & (W | L | N) == 0 && flags2 != 0 {
                    pos += 1;
                    flags2 = f.flags(pos);
                }
                while is_rn(f.cpt(pos)) {
                    pos += 1;
                }
                f.add(pos);
                continue;
            }
            pos = whitespace_tail(f, pos, true);
        }
    })
}

fn split_afmoe(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    for_each_fragment(cpts, offsets, |f| {
        let mut pos = f.ini;
        while pos < f.end {
            if f.flags(pos) & N != 0 {
                let digit_start = pos;
                while f.flags(pos) & N != 0 && pos < f.end {
                    pos += 1;
                }
                let count = pos - digit_start;
                let mut current = digit_start;
                let rem = count % 3;
                if rem > 0 {
                    f.add(current + rem);
                    current += rem;
                }
                while current < digit_start + count {
                    f.add(current + 3);
                    current += 3;
                }
                continue;
            }
            pos += 1;
        }
        if f.prev_end < f.end {
            let end = f.end;
            f.add(end);
        }
    })
}

fn split_newlines(cpts: &[u32], offsets: &[usize]) -> Vec<usize> {
    for_each_fragment(cpts, offsets, |f| {
        let mut pos = f.ini;
        while pos < f.end {
            let nl = f.cpts[pos] == '\n' as u32;
            let run = pos;
            while pos < f.end && (f.cpts[pos] == '\n' as u32) == nl {
                pos += 1;
            }
            f.out.push(pos - run);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_regex_compiles() {
        for pre_type in 0..=59 {
            let (exprs, _) = regex_exprs(pre_type);
            for e in exprs {
                let uses = UCATS.iter().any(|(n, _)| e.contains(n));
                let custom = [
                    RE_GPT2,
                    RE_LLAMA3,
                    RE_QWEN2,
                    RE_QWEN35,
                    RE_KIMI_K2,
                    RE_AFMOE_DIGITS,
                    RE_NEWLINES,
                    RE_TINY_AYA_DIGITS,
                ]
                .contains(&e);
                if !custom {
                    let src = translate(e, uses);
                    if let Err(err) = fancy_regex::Regex::new(&src) {
                        panic!("pre {pre_type}: {e} -> {src}: {err}");
                    }
                }
            }
        }
    }

    #[test]
    fn gpt2_splitter_splits_like_the_regex() {
        let text = "Hello world's  123 !!\n";
        let cpts = uc::cpts_from_utf8(text.as_bytes());
        let offs = split_gpt2(&cpts, &[cpts.len()]);
        assert_eq!(offs, vec![5, 6, 2, 1, 4, 3, 1]);
    }
}
