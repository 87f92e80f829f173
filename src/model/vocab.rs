//! The vocabulary read from the tokenizer keys: everything upstream's `llama_vocab::impl::load`
//! (src/llama-vocab.cpp) reads and derives, with its field names. [`Vocab::load`] follows
//! upstream's order: [`Vocab::load_data`] (tokenizer model and pre-tokenizer, flags, merges,
//! charsmap, tokens, scores, attributes: upstream's state when it calls `init_tokenizer`), the
//! newline token from the token texts, [`Vocab::load_specials`] (special ids, add_* flags,
//! normalizer options, suppress tokens, EOT/EOM/FIM/EOG detection, the special-token cache),
//! then [`Vocab::apply_token_attr_overrides`] (lstrip/rstrip by model name).
//!
//! The tokenizer (`crate::tokenizer::attach`, above this module in the layering) then finishes
//! what upstream derives by tokenizing: the newline id of BPE/UGM/RWKV/PLaMo2/TEST vocabs and
//! `cache_token_to_piece`.

use std::collections::BTreeSet;
use std::ffi::CString;

use super::meta::{MetaArray, Metadata};
use super::text_index::TextIndex;

pub const TOKEN_NULL: i32 = -1;

// `enum llama_vocab_type`.
pub const VOCAB_NONE: i32 = 0;
pub const VOCAB_SPM: i32 = 1;
pub const VOCAB_BPE: i32 = 2;
pub const VOCAB_WPM: i32 = 3;
pub const VOCAB_UGM: i32 = 4;
pub const VOCAB_RWKV: i32 = 5;
pub const VOCAB_PLAMO2: i32 = 6;
pub const VOCAB_TEST: i32 = 7;

// `enum llama_token_attr` bits.
pub const ATTR_UNDEFINED: i32 = 0;
pub const ATTR_UNKNOWN: i32 = 1;
pub const ATTR_UNUSED: i32 = 2;
pub const ATTR_NORMAL: i32 = 4;
pub const ATTR_CONTROL: i32 = 8;
pub const ATTR_USER_DEFINED: i32 = 16;
pub const ATTR_BYTE: i32 = 32;
pub const ATTR_NORMALIZED: i32 = 64;
pub const ATTR_LSTRIP: i32 = 128;
pub const ATTR_RSTRIP: i32 = 256;
pub const ATTR_SINGLE_WORD: i32 = 512;

/// `enum llama_vocab_pre_type` (src/llama-vocab.h), same numbers.
#[allow(missing_docs)]
pub mod pre {
    pub const DEFAULT: i32 = 0;
    pub const LLAMA3: i32 = 1;
    pub const DEEPSEEK_LLM: i32 = 2;
    pub const DEEPSEEK_CODER: i32 = 3;
    pub const FALCON: i32 = 4;
    pub const MPT: i32 = 5;
    pub const STARCODER: i32 = 6;
    pub const GPT2: i32 = 7;
    pub const REFACT: i32 = 8;
    pub const COMMAND_R: i32 = 9;
    pub const STABLELM2: i32 = 10;
    pub const QWEN2: i32 = 11;
    pub const OLMO: i32 = 12;
    pub const DBRX: i32 = 13;
    pub const SMAUG: i32 = 14;
    pub const PORO: i32 = 15;
    pub const CHATGLM3: i32 = 16;
    pub const CHATGLM4: i32 = 17;
    pub const VIKING: i32 = 18;
    pub const JAIS: i32 = 19;
    pub const TEKKEN: i32 = 20;
    pub const SMOLLM: i32 = 21;
    pub const CODESHELL: i32 = 22;
    pub const BLOOM: i32 = 23;
    pub const GPT3_FINNISH: i32 = 24;
    pub const EXAONE: i32 = 25;
    pub const CHAMELEON: i32 = 26;
    pub const MINERVA: i32 = 27;
    pub const DEEPSEEK3_LLM: i32 = 28;
    pub const GPT4O: i32 = 29;
    pub const SUPERBPE: i32 = 30;
    pub const TRILLION: i32 = 31;
    pub const BAILINGMOE: i32 = 32;
    pub const LLAMA4: i32 = 33;
    pub const PIXTRAL: i32 = 34;
    pub const SEED_CODER: i32 = 35;
    pub const HUNYUAN: i32 = 36;
    pub const KIMI_K2: i32 = 37;
    pub const HUNYUAN_DENSE: i32 = 38;
    pub const GROK_2: i32 = 39;
    pub const GRANITE_DOCLING: i32 = 40;
    pub const MINIMAX_M2: i32 = 41;
    pub const AFMOE: i32 = 42;
    pub const SOLAR_OPEN: i32 = 43;
    pub const YOUTU: i32 = 44;
    pub const EXAONE_MOE: i32 = 45;
    pub const QWEN35: i32 = 46;
    pub const TINY_AYA: i32 = 47;
    pub const JOYAI_LLM: i32 = 48;
    pub const JAIS2: i32 = 49;
    pub const GEMMA4: i32 = 50;
    pub const SARVAM_MOE: i32 = 51;
    pub const MINICPM5: i32 = 52;
    pub const WHITESPACE: i32 = 53;
    pub const GRANITE_EMB_MULTI: i32 = 54;
    pub const MELLUM2: i32 = 55;
    pub const LAGUNA: i32 = 56;
    pub const HY_V4: i32 = 57;
    pub const SPARK2_5: i32 = 58;
    pub const UFAKZEKA: i32 = 59;
}

/// One token's text (NUL-terminated for C), score and attributes (`token_data`).
#[derive(Debug)]
pub struct Token {
    pub text: CString,
    pub score: f32,
    pub attr: i32,
}

impl Token {
    /// The text's bytes (no NUL).
    pub fn bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }
}

/// The special token ids upstream tracks (`special_*_id`; `nl` is upstream's `linefeed_id`).
#[derive(Debug, Clone, Copy)]
pub struct Specials {
    pub bos: i32,
    pub eos: i32,
    pub eot: i32,
    pub eom: i32,
    pub unk: i32,
    pub sep: i32,
    pub pad: i32,
    pub mask: i32,
    pub nl: i32,
    pub fim_pre: i32,
    pub fim_suf: i32,
    pub fim_mid: i32,
    pub fim_pad: i32,
    pub fim_rep: i32,
    pub fim_sep: i32,
}

impl Default for Specials {
    fn default() -> Self {
        // Upstream's member initialisers (LLaMA's ids), overridden per tokenizer model.
        Specials {
            bos: 1,
            eos: 2,
            eot: TOKEN_NULL,
            eom: TOKEN_NULL,
            unk: 0,
            sep: TOKEN_NULL,
            pad: TOKEN_NULL,
            mask: TOKEN_NULL,
            nl: 13,
            fim_pre: TOKEN_NULL,
            fim_suf: TOKEN_NULL,
            fim_mid: TOKEN_NULL,
            fim_pad: TOKEN_NULL,
            fim_rep: TOKEN_NULL,
            fim_sep: TOKEN_NULL,
        }
    }
}

/// Accessor of one special id (tables of keys and texts map to fields through these).
type SpecialField = fn(&mut Specials) -> &mut i32;

/// BertNormalizer options (`llama_vocab::normalizer_options`).
#[derive(Debug, Clone, Copy)]
pub struct NormalizerOptions {
    pub lowercase: bool,
    pub strip_accents: bool,
}

impl Default for NormalizerOptions {
    fn default() -> Self {
        NormalizerOptions {
            lowercase: true,
            strip_accents: true,
        }
    }
}

#[derive(Debug)]
pub struct Vocab {
    /// `llama_vocab_type` (upstream's `type`).
    pub vocab_type: i32,
    /// `llama_vocab_pre_type` (see [`pre`]).
    pub pre_type: i32,
    pub tokenizer_model: String,
    /// As upstream keeps it: "gemma4" for the gemma4 model whatever the file says.
    pub tokenizer_pre: String,
    pub n_token_types: u32,
    /// Longest token text in bytes.
    pub max_token_len: usize,
    /// `id_to_token`.
    pub tokens: Vec<Token>,
    /// Token text → id; a later duplicate text wins, as in upstream.
    pub token_to_id: TextIndex,
    pub specials: Specials,
    /// `special_eog_ids`.
    pub eog: BTreeSet<i32>,
    pub add_space_prefix: bool,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
    pub ignore_merges: bool,
    /// `clean_up_tokenization_spaces`.
    pub clean_spaces: bool,
    pub remove_extra_whitespaces: bool,
    pub escape_whitespaces: bool,
    pub treat_whitespace_as_suffix: bool,
    pub normalizer_opts: NormalizerOptions,
    /// BPE merge ranks keyed by the merge line `"left right"` (first space at index ≥ 1 splits
    /// it, as upstream's pair key; the first occurrence of a line keeps its rank). Lookups
    /// go through [`Vocab::find_bpe_rank`].
    pub bpe_ranks: TextIndex,
    /// Control, user-defined and unknown tokens, longest text first: the tokens
    /// `tokenize` matches in the text (upstream's `cache_special_tokens`).
    pub cache_special_tokens: Vec<i32>,
    /// `token_to_piece(id, special = true)` for every id, filled by the tokenizer at load
    /// (empty when no tokenizer was built).
    pub cache_token_to_piece: Vec<Vec<u8>>,
    pub suppress_tokens: Vec<i32>,
    /// The pad id before the file's special ids are read: upstream's newline token when
    /// tokenizing "\n" gives nothing.
    pub linefeed_fallback: i32,
    /// UGM's precompiled normalization map (`tokenizer.ggml.precompiled_charsmap`), raw bytes
    /// (little-endian, as in the file).
    pub precompiled_charsmap: Vec<u8>,
}

impl Default for Vocab {
    fn default() -> Self {
        Vocab {
            vocab_type: VOCAB_SPM,
            pre_type: pre::DEFAULT,
            tokenizer_model: String::new(),
            tokenizer_pre: String::new(),
            n_token_types: 0,
            max_token_len: 0,
            tokens: Vec::new(),
            token_to_id: TextIndex::default(),
            specials: Specials::default(),
            eog: BTreeSet::new(),
            add_space_prefix: false,
            add_bos: false,
            add_eos: false,
            add_sep: false,
            ignore_merges: false,
            clean_spaces: false,
            remove_extra_whitespaces: false,
            escape_whitespaces: true,
            treat_whitespace_as_suffix: false,
            normalizer_opts: NormalizerOptions::default(),
            bpe_ranks: TextIndex::default(),
            cache_special_tokens: Vec::new(),
            cache_token_to_piece: Vec::new(),
            suppress_tokens: Vec::new(),
            linefeed_fallback: TOKEN_NULL,
            precompiled_charsmap: Vec::new(),
        }
    }
}

/// Texts upstream recognises as end-of-turn when no id is given.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts upstream adds to the end-of-generation set (and marks as control tokens).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// The hybriddna k-mer marker (U+E000) upstream strips from k-mer texts after building
/// `token_to_id`.
pub const DNA_KMER_MARKER: &[u8] = b"\xee\x80\x80";

/// Pre-tokenizer name → (pre type, flag edits), as upstream's chain of `tokenizer_pre ==`.
/// Flag edits: (clean_spaces, ignore_merges, add_bos, add_sep, escape_whitespaces,
/// bos_null, normalizer lowercase false).
#[derive(Default, Clone, Copy)]
struct PreEdits {
    clean_spaces: Option<bool>,
    ignore_merges: bool,
    add_bos: bool,
    add_sep: bool,
    escape_whitespaces: bool,
    bos_null: bool,
    no_lowercase: bool,
}

fn pre_type_of(name: &str) -> Option<(i32, PreEdits)> {
    let e = PreEdits::default();
    let no_clean = PreEdits {
        clean_spaces: Some(false),
        ..e
    };
    Some(match name {
        "default" => (pre::DEFAULT, e),
        "minicpm5" => (
            pre::MINICPM5,
            PreEdits {
                ignore_merges: true,
                ..e
            },
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => (
            pre::LLAMA3,
            PreEdits {
                ignore_merges: true,
                add_bos: true,
                ..e
            },
        ),
        "deepseek-llm" => (pre::DEEPSEEK_LLM, no_clean),
        "deepseek-coder" => (pre::DEEPSEEK_CODER, no_clean),
        "deepseek-v3" => (pre::DEEPSEEK3_LLM, no_clean),
        "spark2_5" => (pre::SPARK2_5, no_clean),
        "youtu" => (
            pre::YOUTU,
            PreEdits {
                ignore_merges: true,
                ..no_clean
            },
        ),
        "falcon" => (pre::FALCON, e),
        "mpt" => (pre::MPT, e),
        "starcoder" => (pre::STARCODER, e),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" => (pre::GPT2, e),
        "jais-2" => (pre::JAIS2, e),
        "gemma4" | "granite-embed-multi-311m" => (
            pre::GEMMA4,
            PreEdits {
                escape_whitespaces: true,
                ..e
            },
        ),
        "sarvam-moe" => (
            pre::SARVAM_MOE,
            PreEdits {
                escape_whitespaces: true,
                ..no_clean
            },
        ),
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
            (pre::GPT2, PreEdits { add_sep: true, ..e })
        }
        "whitespace" => (
            pre::WHITESPACE,
            PreEdits {
                no_lowercase: true,
                ..e
            },
        ),
        "refact" => (pre::REFACT, e),
        "command-r" => (pre::COMMAND_R, no_clean),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => (pre::QWEN2, no_clean),
        "qwen35" => (pre::QWEN35, no_clean),
        "stablelm2" => (pre::STABLELM2, e),
        "olmo" => (pre::OLMO, e),
        "dbrx" => (pre::DBRX, e),
        "smaug-bpe" => (pre::SMAUG, e),
        "poro-chat" => (pre::PORO, no_clean),
        "chatglm-bpe" => (
            pre::CHATGLM4,
            PreEdits {
                bos_null: true,
                ..e
            },
        ),
        "glm4" | "glm5" => (
            pre::CHATGLM4,
            PreEdits {
                bos_null: true,
                ignore_merges: true,
                ..e
            },
        ),
        "viking" => (pre::VIKING, no_clean),
        "jais" => (pre::JAIS, e),
        "tekken" => (
            pre::TEKKEN,
            PreEdits {
                ignore_merges: true,
                add_bos: true,
                ..no_clean
            },
        ),
        "smollm" => (pre::SMOLLM, no_clean),
        "codeshell" => (pre::CODESHELL, e),
        "bloom" => (pre::BLOOM, e),
        "gpt3-finnish" => (pre::GPT3_FINNISH, e),
        "exaone" => (pre::EXAONE, e),
        "exaone4" => (pre::GPT2, e),
        "exaone-moe" => (pre::EXAONE_MOE, e),
        "chameleon" => (
            pre::CHAMELEON,
            PreEdits {
                add_bos: true,
                ..no_clean
            },
        ),
        "minerva-7b" => (pre::MINERVA, e),
        "megrez" => (pre::QWEN2, e),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" => (pre::GPT4O, no_clean),
        "granite-embed-multi-97m" => (
            pre::GRANITE_EMB_MULTI,
            PreEdits {
                ignore_merges: true,
                ..no_clean
            },
        ),
        "tiny_aya" | "cohere2moe" => (pre::TINY_AYA, no_clean),
        "superbpe" => (pre::SUPERBPE, no_clean),
        "trillion" => (pre::TRILLION, no_clean),
        "granite-docling" => (pre::GRANITE_DOCLING, no_clean),
        "bailingmoe" | "bailingmoe2" | "llada-moe" => (pre::BAILINGMOE, no_clean),
        "seed-coder" => (pre::SEED_CODER, no_clean),
        "hunyuan" => (pre::HUNYUAN, no_clean),
        "hunyuan-dense" => (pre::HUNYUAN_DENSE, no_clean),
        "hy_v4" => (pre::HY_V4, no_clean),
        "joyai-llm" => (pre::JOYAI_LLM, no_clean),
        "kimi-k2" => (pre::KIMI_K2, no_clean),
        "ufakzeka" => (pre::UFAKZEKA, no_clean),
        "grok-2" => (pre::GROK_2, no_clean),
        "afmoe" => (pre::AFMOE, no_clean),
        "laguna" => (pre::LAGUNA, no_clean),
        "minimax-m2" => (pre::MINIMAX_M2, no_clean),
        "solar-open" => (pre::SOLAR_OPEN, no_clean),
        "mellum2" => (pre::MELLUM2, e),
        _ => return None,
    })
}

/// Upstream's `gguf_get_arr_str(...)` seen through a `const char *`: the text up to its
/// first NUL.
fn c_str_bytes(s: &str) -> &[u8] {
    let b = s.as_bytes();
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// Reads the merges into `bpe_ranks` (upstream: an error when the key is not an array of
/// strings).
fn read_merges(meta: &Metadata, v: &mut Vocab) -> Result<bool, String> {
    match meta.get_array("tokenizer.ggml.merges") {
        None => Ok(false),
        Some(MetaArray::Strs(merges)) => {
            v.bpe_ranks.reserve(merges.len());
            for (i, word) in merges.iter().enumerate() {
                let word = c_str_bytes(word);
                // first/second split at the first space after index 0; no space → ("", "").
                let key = match word.iter().skip(1).position(|&c| c == b' ') {
                    Some(_) => word,
                    None => b" ",
                };
                v.bpe_ranks.insert_if_absent(key, i as i32);
            }
            Ok(true)
        }
        Some(MetaArray::Ints(a)) if a.is_empty() => Ok(true),
        Some(_) => Err("invalid gguf type for tokenizer.ggml.merges".to_string()),
    }
}

impl Vocab {
    /// All stages without a tokenizer (see the module doc).
    pub fn load(meta: &Metadata) -> Result<Vocab, String> {
        let mut v = Vocab::load_data(meta)?;
        if v.vocab_type == VOCAB_NONE {
            return Ok(v);
        }
        v.linefeed_fallback = v.specials.pad;
        v.specials.nl = v.linefeed_without_tokenizer();
        v.load_specials(meta);
        v.apply_token_attr_overrides(meta);
        Ok(v)
    }

    /// Stage 1: upstream's `load` up to `init_tokenizer`. A missing `tokenizer.ggml.model`
    /// gives an empty NONE vocab (upstream requires the key; the generic loader does not).
    pub fn load_data(meta: &Metadata) -> Result<Vocab, String> {
        let mut v = Vocab {
            tokenizer_model: meta
                .get_str("tokenizer.ggml.model")
                .unwrap_or_else(|| "none".to_string()),
            tokenizer_pre: meta.get_str("tokenizer.ggml.pre").unwrap_or_default(),
            n_token_types: meta.get_u32("tokenizer.ggml.token_type_count").unwrap_or(0),
            ..Vocab::default()
        };
        let s = &mut v.specials;
        match v.tokenizer_model.as_str() {
            "no_vocab" | "none" => {
                v.vocab_type = VOCAB_NONE;
                *s = Specials {
                    bos: TOKEN_NULL,
                    eos: TOKEN_NULL,
                    unk: TOKEN_NULL,
                    sep: TOKEN_NULL,
                    pad: TOKEN_NULL,
                    mask: TOKEN_NULL,
                    nl: TOKEN_NULL,
                    ..*s
                };
                if let Some(n) = vocab_size_key(meta) {
                    crate::log_warn!("adding {n} dummy tokens");
                    v.tokens = (0..n)
                        .map(|_| Token {
                            text: CString::default(),
                            score: 0.0,
                            attr: ATTR_UNDEFINED,
                        })
                        .collect();
                }
                return Ok(v);
            }
            "llama" => {
                v.vocab_type = VOCAB_SPM;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) =
                    (1, 2, 0, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL);
            }
            "bert" => {
                v.vocab_type = VOCAB_WPM;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) = (101, TOKEN_NULL, 100, 102, 0, 103);
                v.add_sep = true;
            }
            "gpt2" | "hybriddna" | "whitespace" => {
                v.vocab_type = VOCAB_BPE;
                let has_merges = read_merges(meta, &mut v)?;
                if !has_merges && v.tokenizer_pre != "kimi-k2" {
                    return Err("cannot find tokenizer merges in model file".to_string());
                }
                let s = &mut v.specials;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) =
                    (11, 11, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL);
            }
            "t5" => {
                v.vocab_type = VOCAB_UGM;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) =
                    (TOKEN_NULL, 1, 2, TOKEN_NULL, 0, TOKEN_NULL);
                match meta.get_array("tokenizer.ggml.precompiled_charsmap") {
                    None => {}
                    Some(MetaArray::Ints(bytes)) => {
                        v.precompiled_charsmap = bytes.iter().map(|&b| b as u8).collect();
                        let pc = &v.precompiled_charsmap;
                        if pc.len() < 4 {
                            return Err(
                                "precompiled_charsmap too small for xcda_blob_size header!".into(),
                            );
                        }
                        let blob = u32::from_le_bytes([pc[0], pc[1], pc[2], pc[3]]) as usize;
                        if blob + 4 >= pc.len() {
                            return Err(
                                "Index out of array bounds in precompiled charsmap!".to_string()
                            );
                        }
                    }
                    Some(_) => {
                        return Err(
                            "invalid gguf type for tokenizer.ggml.precompiled_charsmap".into()
                        )
                    }
                }
            }
            "rwkv" => {
                v.vocab_type = VOCAB_RWKV;
                (s.bos, s.eos, s.unk, s.sep, s.pad) =
                    (TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL);
            }
            "test" => {
                v.vocab_type = VOCAB_TEST;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) = (
                    TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL,
                );
            }
            "plamo2" => {
                v.vocab_type = VOCAB_PLAMO2;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) = (1, 2, 0, TOKEN_NULL, 3, TOKEN_NULL);
            }
            "gemma4" => {
                v.vocab_type = VOCAB_BPE;
                if !read_merges(meta, &mut v)? {
                    return Err("cannot find tokenizer merges in model file".to_string());
                }
                let s = &mut v.specials;
                (s.bos, s.eos, s.unk, s.sep, s.pad, s.mask) = (
                    TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL,
                );
                v.tokenizer_pre = "gemma4".to_string();
            }
            other => return Err(format!("unknown tokenizer: '{other}'")),
        }

        match v.vocab_type {
            VOCAB_BPE => {
                v.add_space_prefix = false;
                v.escape_whitespaces = false;
                v.clean_spaces = true;
                if v.tokenizer_pre.is_empty() {
                    crate::log_warn!(
                        "missing pre-tokenizer type, using: 'default' \
                         (GENERATION QUALITY WILL BE DEGRADED! CONSIDER REGENERATING THE MODEL)"
                    );
                    v.pre_type = pre::DEFAULT;
                } else {
                    let Some((pre_type, e)) = pre_type_of(&v.tokenizer_pre) else {
                        return Err(format!("unknown pre-tokenizer type: '{}'", v.tokenizer_pre));
                    };
                    v.pre_type = pre_type;
                    if let Some(c) = e.clean_spaces {
                        v.clean_spaces = c;
                    }
                    v.ignore_merges |= e.ignore_merges;
                    v.add_bos |= e.add_bos;
                    v.add_sep |= e.add_sep;
                    v.escape_whitespaces |= e.escape_whitespaces;
                    if e.bos_null {
                        v.specials.bos = TOKEN_NULL;
                    }
                    if e.no_lowercase {
                        v.normalizer_opts.lowercase = false;
                    }
                }
            }
            VOCAB_SPM => {
                (v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos) =
                    (true, false, true, false);
            }
            VOCAB_WPM => {
                (
                    v.add_space_prefix,
                    v.clean_spaces,
                    v.add_bos,
                    v.add_eos,
                    v.add_sep,
                ) = (false, true, true, false, true);
            }
            VOCAB_UGM => (v.add_bos, v.add_eos) = (false, true),
            VOCAB_RWKV => {
                (v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos) =
                    (false, false, false, false);
            }
            _ => {}
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_space_prefix") {
            v.add_space_prefix = b;
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.remove_extra_whitespaces") {
            v.remove_extra_whitespaces = b;
        }

        let texts = match meta.get_array("tokenizer.ggml.tokens") {
            Some(MetaArray::Strs(texts)) => texts,
            Some(_) => return Err("invalid gguf type for tokenizer.ggml.tokens".to_string()),
            None => return Err("cannot find tokenizer vocab in model file".to_string()),
        };
        let n = texts.len();
        let scores = match meta.get_array("tokenizer.ggml.scores") {
            None => None,
            Some(MetaArray::Floats(f)) => Some(f.iter().map(|&x| x as f32).collect::<Vec<_>>()),
            Some(MetaArray::Ints(i)) => Some(i.iter().map(|&x| x as i32 as f32).collect()),
            Some(_) => return Err("invalid gguf type for tokenizer.ggml.scores".to_string()),
        };
        if let Some(s) = &scores {
            if s.len() < n {
                return Err(format!(
                    "Index out of array bounds for scores ({} < {n})",
                    s.len()
                ));
            }
        }
        let types = match meta.get_array("tokenizer.ggml.token_type") {
            None => None,
            Some(MetaArray::Ints(t)) => Some(t),
            Some(_) => return Err("invalid gguf type for tokenizer.ggml.token_type".to_string()),
        };
        if let Some(t) = types {
            if t.len() < n {
                return Err(format!(
                    "Index out of array bounds for toktypes ({} < {n})",
                    t.len()
                ));
            }
        }

        v.token_to_id.reserve(n);
        v.tokens.reserve(n);
        for (i, text) in texts.iter().enumerate() {
            let mut word = c_str_bytes(text).to_vec();
            if word.is_empty() {
                crate::log_warn!("empty token at index {i}");
                word = format!("[EMPTY_{i}]").into_bytes();
            }
            v.token_to_id.insert(&word, i as i32);
            v.max_token_len = v.max_token_len.max(word.len());
            let attr = match types.map(|t| t[i] as i32) {
                None => ATTR_NORMAL,
                Some(2) => ATTR_UNKNOWN,
                Some(5) => ATTR_UNUSED,
                Some(1) => ATTR_NORMAL,
                Some(3) => ATTR_CONTROL,
                Some(4) => ATTR_USER_DEFINED,
                Some(6) => ATTR_BYTE,
                Some(_) => ATTR_UNDEFINED,
            };
            v.tokens.push(Token {
                // No NUL inside: cut at the first one above.
                text: CString::new(word).unwrap_or_default(),
                score: scores.as_ref().map_or(0.0, |s| s[i]),
                attr,
            });
        }
        if v.tokens.len() != v.token_to_id.len() {
            // Upstream asserts (aborts); a duplicate text would make ids unreachable.
            return Err(format!(
                "tokenizer has duplicate token texts ({} tokens, {} distinct)",
                v.tokens.len(),
                v.token_to_id.len()
            ));
        }

        if v.tokenizer_model == "hybriddna" {
            if let Some(oov) = v.token_to_id.get(b"<oov>") {
                for t in &mut v.tokens[oov as usize + 1..] {
                    let b = t.text.as_bytes();
                    if b.len() > DNA_KMER_MARKER.len() && b.ends_with(DNA_KMER_MARKER) {
                        let cut = b[..b.len() - DNA_KMER_MARKER.len()].to_vec();
                        t.text = CString::new(cut).unwrap_or_default();
                    }
                }
            }
        }
        Ok(v)
    }

    /// `linefeed_id` where no tokenizer is needed (SPM: the byte token, WPM: pad); for the
    /// others the token whose text is the newline (byte-encoded "Ċ" for BPE) — the tokenizer
    /// replaces this with upstream's first token of `tokenize("\n")`.
    pub fn linefeed_without_tokenizer(&self) -> i32 {
        match self.vocab_type {
            VOCAB_SPM => self.byte_to_token(b'\n').unwrap_or_else(|| {
                crate::log_warn!(
                    "SPM vocabulary, but newline token not found! Using special_pad_id instead."
                );
                self.specials.pad
            }),
            VOCAB_WPM => self.specials.pad,
            _ => self
                .text_to_token(b"\n")
                .or_else(|| self.text_to_token("Ċ".as_bytes()))
                .unwrap_or(self.specials.pad),
        }
    }

    /// Stage 3: special ids from the file, add_* flags, normalizer options, suppress tokens,
    /// EOT/EOM/FIM/EOG by text, the special-token cache.
    pub fn load_specials(&mut self, meta: &Metadata) {
        let n_tokens = self.tokens.len() as i64;
        let keys: [(&str, SpecialField); 17] = [
            ("bos_token_id", |s| &mut s.bos),
            ("eos_token_id", |s| &mut s.eos),
            ("eot_token_id", |s| &mut s.eot),
            ("eom_token_id", |s| &mut s.eom),
            ("unknown_token_id", |s| &mut s.unk),
            ("seperator_token_id", |s| &mut s.sep),
            ("padding_token_id", |s| &mut s.pad),
            ("mask_token_id", |s| &mut s.mask),
            ("fim_pre_token_id", |s| &mut s.fim_pre),
            ("fim_suf_token_id", |s| &mut s.fim_suf),
            ("fim_mid_token_id", |s| &mut s.fim_mid),
            ("fim_pad_token_id", |s| &mut s.fim_pad),
            ("fim_rep_token_id", |s| &mut s.fim_rep),
            ("fim_sep_token_id", |s| &mut s.fim_sep),
            ("prefix_token_id", |s| &mut s.fim_pre),
            ("suffix_token_id", |s| &mut s.fim_suf),
            ("middle_token_id", |s| &mut s.fim_mid),
        ];
        for (suffix, field) in keys {
            let key = format!("tokenizer.ggml.{suffix}");
            let id = field(&mut self.specials);
            if *id >= 0 && i64::from(*id) >= n_tokens {
                crate::log_warn!(
                    "default special token '{key}' = {id} out of vocab range, disabling"
                );
                *id = TOKEN_NULL;
            }
            if let Some(new_id) = meta.get_u32(&key) {
                if i64::from(new_id) >= n_tokens {
                    crate::log_warn!(
                        "bad special token: '{key}' = {new_id}, using default id {id}"
                    );
                } else {
                    *id = new_id as i32;
                }
            }
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_bos_token") {
            self.add_bos = b;
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_eos_token") {
            self.add_eos = b;
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_sep_token") {
            self.add_sep = b;
        }
        if self.pre_type == pre::GEMMA4 && !self.add_bos {
            self.add_bos = true;
            crate::log_warn!("override 'tokenizer.ggml.add_bos_token' to 'true' for Gemma4");
        }

        if let Some(b) = meta.get_bool("tokenizer.ggml.normalizer.lowercase") {
            self.normalizer_opts.lowercase = b;
        }
        self.normalizer_opts.strip_accents = self.normalizer_opts.lowercase;
        if let Some(b) = meta.get_bool("tokenizer.ggml.normalizer.strip_accents") {
            self.normalizer_opts.strip_accents = b;
        }

        if let Some(MetaArray::Ints(ids)) = meta.get_array("tokenizer.ggml.suppress_tokens") {
            self.suppress_tokens = ids
                .iter()
                .map(|&id| id as i32)
                .filter(|&id| id >= 0 && i64::from(id) < n_tokens)
                .collect();
        }

        // Auto-detect special tokens by text, walking the tokens in the order upstream's
        // `std::unordered_map` iterates them (the first match of each kind wins).
        let order = libstdcxx_iteration_order(self.tokens.iter().map(Token::bytes));
        let detect: [(&[&str], SpecialField); 8] = [
            (EOT_TEXTS, |s| &mut s.eot),
            (EOM_TEXTS, |s| &mut s.eom),
            (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
            (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
            (FIM_MID_TEXTS, |s| &mut s.fim_mid),
            (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
            (FIM_REP_TEXTS, |s| &mut s.fim_rep),
            (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
        ];
        let candidates: Vec<i32> = detect
            .iter()
            .flat_map(|(texts, _)| texts.iter())
            .filter_map(|t| self.token_to_id.get(t.as_bytes()))
            .collect();
        if !candidates.is_empty() {
            for &id in &order {
                if !candidates.contains(&id) {
                    continue;
                }
                let text = self.tokens[id as usize].text.as_bytes().to_vec();
                for (texts, field) in detect {
                    if *field(&mut self.specials) == TOKEN_NULL
                        && texts.iter().any(|t| t.as_bytes() == text)
                    {
                        *field(&mut self.specials) = id;
                        self.mark_control(id);
                    }
                }
            }
        }

        // Control tokens whose text says "unused".
        for t in &mut self.tokens {
            if t.attr & ATTR_CONTROL != 0
                && t.attr & ATTR_UNUSED == 0
                && t.text.as_bytes().windows(6).any(|w| w == b"unused")
            {
                t.attr |= ATTR_UNUSED;
            }
        }

        self.eog.clear();
        let s = self.specials;
        for id in [s.fim_pad, s.fim_rep, s.fim_sep] {
            if id != TOKEN_NULL {
                self.eog.insert(id);
            }
        }
        for text in EOG_TEXTS {
            if let Some(id) = self.token_to_id.get(text.as_bytes()) {
                self.eog.insert(id);
                self.mark_control(id);
            }
        }
        // gpt-oss: always render these.
        for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.token_to_id.get(text.as_bytes()) {
                self.tokens[id as usize].attr = ATTR_USER_DEFINED;
            }
        }
        for id in [s.eos, s.eot, s.eom] {
            if id != TOKEN_NULL && self.eog.insert(id) {
                crate::log_warn!(
                    "special token {id} is not in special_eog_ids - the tokenizer config may be \
                     incorrect"
                );
            }
        }

        // o200k_harmony / solar-open: "<|end|>" is not EOG when the return/call markers exist.
        let text_of = |v: &Vocab, id: i32| v.token(id).map(|t| t.text.as_bytes().to_vec());
        let eog_texts: Vec<(i32, Vec<u8>)> = self
            .eog
            .iter()
            .filter_map(|&id| text_of(self, id).map(|t| (id, t)))
            .collect();
        let has = |t: &[u8]| eog_texts.iter().any(|(_, x)| x == t);
        let end_id = eog_texts
            .iter()
            .find(|(_, x)| x == b"<|end|>")
            .map(|(id, _)| *id);
        let has_call = has(b"<|call|>") || has(b"<|calls|>");
        if let Some(end_id) = end_id {
            if has_call && (has(b"<|return|>") || has(b"<|flush|>")) {
                self.eog.remove(&end_id);
                self.tokens[end_id as usize].attr = ATTR_USER_DEFINED;
            }
        }
        // gemma4 and plamo have a normal </s>.
        let s_id = eog_texts
            .iter()
            .find(|(_, x)| x == b"</s>")
            .map(|(id, _)| *id);
        if let Some(s_id) = s_id {
            if has(b"<|tool_response>") || has(b"<|plamo:eos|>") {
                self.eog.remove(&s_id);
                self.tokens[s_id as usize].attr = ATTR_NORMAL;
                crate::log_warn!("'</s>' is a normal token here, removing it from EOG list");
            }
        }

        self.build_special_cache();
    }

    fn mark_control(&mut self, id: i32) {
        let t = &mut self.tokens[id as usize];
        if t.attr & ATTR_CONTROL == 0 {
            crate::log_warn!(
                "control-looking token: {id} '{}' was not control-type; this is probably a bug \
                 in the model. its type will be overridden",
                String::from_utf8_lossy(t.text.as_bytes())
            );
            t.attr |= ATTR_CONTROL;
        }
    }

    /// `cache_special_tokens`: control, user-defined and unknown ids, longest text first, in
    /// the order upstream's (unstable) libstdc++ `std::sort` leaves equal lengths: partitioning
    /// the text by two equal-length tokens that overlap depends on it.
    fn build_special_cache(&mut self) {
        let special = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN;
        let mut ids: Vec<i32> = (0..self.tokens.len() as i32)
            .filter(|&id| self.tokens[id as usize].attr & special != 0)
            .collect();
        let len = |id: i32| self.tokens[id as usize].text.as_bytes().len();
        crate::cpp::sort(&mut ids, &|a: &i32, b: &i32| len(*a) > len(*b));
        self.cache_special_tokens = ids;
    }

    /// Stage 5: per-token lstrip/rstrip by tokenizer, architecture or model name.
    pub fn apply_token_attr_overrides(&mut self, meta: &Metadata) {
        let model_name = meta
            .get_str("general.name")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let tokenizer_pre = meta.get_str("tokenizer.ggml.pre").unwrap_or_default();
        let general_arch = meta.get_str("general.architecture").unwrap_or_default();
        let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        let set = |v: &mut Vocab, text: &str, attr: i32, on: bool| {
            // Upstream's `token_to_id.at` throws for a missing text (load fails); skip it.
            match v.token_to_id.get(text.as_bytes()) {
                Some(id) => v.set_attr(id, attr, on),
                None => crate::log_warn!("token '{text}' missing from the vocab"),
            }
        };
        if contains_any(
            &tokenizer_pre,
            &["jina-v2-de", "jina-v2-es", "jina-v2-code"],
        ) || contains_any(&general_arch, &["nomic-bert-moe", "jina-bert-v3"])
        {
            if self.token_to_id.contains_key(b"<mask>") {
                set(self, "<mask>", ATTR_LSTRIP, true);
            } else {
                crate::log_warn!("Mask token is missing in vocab, please reconvert model!");
            }
        } else if contains_any(&model_name, &["phi-3", "phi3"]) {
            for id in self.cache_special_tokens.clone() {
                self.set_attr(id, ATTR_RSTRIP, true);
            }
            set(self, "</s>", ATTR_RSTRIP, true);
            for text in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, text, ATTR_RSTRIP, false);
            }
        } else if contains_any(&model_name, &["modern-bert"]) {
            if self.token_to_id.contains_key(b"[MASK]") {
                set(self, "[MASK]", ATTR_LSTRIP, true);
            } else {
                crate::log_warn!("Mask token missing in vocab!");
            }
        }
    }

    fn set_attr(&mut self, id: i32, attr: i32, on: bool) {
        let t = &mut self.tokens[id as usize];
        t.attr = if on { t.attr | attr } else { t.attr & !attr };
    }

    pub fn token(&self, id: i32) -> Option<&Token> {
        usize::try_from(id).ok().and_then(|i| self.tokens.get(i))
    }

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Attributes of `id`; UNDEFINED when out of range.
    pub fn token_get_attr(&self, id: i32) -> i32 {
        self.token(id).map_or(ATTR_UNDEFINED, |t| t.attr)
    }

    pub fn is_normal(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_NORMAL != 0
    }
    pub fn is_unknown(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_UNKNOWN != 0
    }
    pub fn is_control(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_CONTROL != 0
    }
    pub fn is_byte(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_BYTE != 0
    }
    pub fn is_user_defined(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_USER_DEFINED != 0
    }
    pub fn is_unused(&self, id: i32) -> bool {
        self.token_get_attr(id) & ATTR_UNUSED != 0
    }
    pub fn is_eog(&self, id: i32) -> bool {
        id != TOKEN_NULL && self.eog.contains(&id)
    }

    /// The id of a token text, if any (`text_to_token`; None for upstream's NULL).
    pub fn text_to_token(&self, text: &[u8]) -> Option<i32> {
        self.token_to_id.get(text)
    }

    /// Upstream's `byte_to_token`: `<0xXX>` (SPM/UGM, falling back to the raw byte),
    /// the GPT-2 byte character (BPE/WPM), `<0xXX>` (PLaMo2). None where upstream throws
    /// (no such token) or has none (TEST, NONE, RWKV).
    pub fn byte_to_token(&self, ch: u8) -> Option<i32> {
        match self.vocab_type {
            VOCAB_SPM | VOCAB_UGM => {
                let hex = format!("<0x{ch:02X}>");
                self.text_to_token(hex.as_bytes())
                    .or_else(|| self.text_to_token(&[ch]))
            }
            VOCAB_WPM | VOCAB_BPE => {
                let mut buf = [0u8; 4];
                self.text_to_token(byte_to_unicode(ch).encode_utf8(&mut buf).as_bytes())
            }
            VOCAB_PLAMO2 => self.text_to_token(format!("<0x{ch:02X}>").as_bytes()),
            _ => None,
        }
    }

    /// Upstream's `token_to_byte` for a BYTE token of SPM, UGM or BPE: the hex digits at text
    /// offsets 3..5 as `strtol` reads them (None for other types, where upstream aborts).
    pub fn token_to_byte(&self, id: i32) -> Option<u8> {
        match self.vocab_type {
            VOCAB_SPM | VOCAB_UGM | VOCAB_BPE => {
                let text = self.token(id)?.text.as_bytes();
                let digits = text.get(3..text.len().min(5)).unwrap_or(&[]);
                Some(strtol_hex(digits) as u8)
            }
            _ => None,
        }
    }

    /// Rank of the merge `left right`, or -1 (upstream's `find_bpe_rank`; upstream asserts
    /// that neither side contains a space; here such a pair has no rank).
    pub fn find_bpe_rank(&self, left: &[u8], right: &[u8], key: &mut Vec<u8>) -> i32 {
        if left.contains(&b' ') || right.contains(&b' ') {
            return -1;
        }
        key.clear();
        key.extend_from_slice(left);
        key.push(b' ');
        key.extend_from_slice(right);
        self.bpe_ranks.get(key).unwrap_or(-1)
    }
}

/// libstdc++'s `std::hash<std::string>` (`std::_Hash_bytes`, seed 0xc70f6907).
fn libstdcxx_hash(bytes: &[u8]) -> u64 {
    const MUL: u64 = 0xc6a4_a793_5bd1_e995;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let mut hash = 0xc70f_6907u64 ^ (bytes.len() as u64).wrapping_mul(MUL);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let data = u64::from_le_bytes(c.try_into().unwrap_or_default());
        hash ^= shift_mix(data.wrapping_mul(MUL)).wrapping_mul(MUL);
        hash = hash.wrapping_mul(MUL);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let data = rest
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    shift_mix(shift_mix(hash).wrapping_mul(MUL))
}

/// The order in which upstream's `token_to_id` (a libstdc++ `std::unordered_map` filled with
/// ids 0, 1, 2, ... in turn) iterates its entries: upstream picks EOT/EOM/FIM tokens by the
/// first match in that order, so reproducing it reproduces its choice. This replays
/// libstdc++'s node insertion (new nodes go first in their bucket, or first in the list when
/// the bucket is empty) and its rehashes (prime bucket counts, load factor 1).
pub fn libstdcxx_iteration_order<'a>(texts: impl Iterator<Item = &'a [u8]>) -> Vec<i32> {
    // Bucket counts libstdc++'s prime rehash policy goes through when elements are inserted
    // one at a time (measured: it rehashes when the count would exceed the bucket count).
    const BUCKETS: [usize; 19] = [
        13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061,
        712697, 1447153, 2938679, 5967347,
    ];
    const NIL: usize = usize::MAX;
    const BEFORE_BEGIN: usize = usize::MAX - 1;
    let mut hashes: Vec<u64> = Vec::new();
    let mut next: Vec<usize> = Vec::new();
    let mut head = NIL;
    let mut buckets: Vec<usize> = vec![NIL];
    let mut next_resize = 0usize;
    let mut level = 0;
    for text in texts {
        let h = libstdcxx_hash(text);
        let count = hashes.len();
        if count + 1 > next_resize && level < BUCKETS.len() {
            let n = BUCKETS[level];
            level += 1;
            next_resize = n;
            let mut nb = vec![NIL; n];
            let mut p = head;
            head = NIL;
            let mut bbegin = 0usize;
            while p != NIL {
                let after = next[p];
                let b = (hashes[p] % n as u64) as usize;
                if nb[b] == NIL {
                    next[p] = head;
                    head = p;
                    nb[b] = BEFORE_BEGIN;
                    if next[p] != NIL {
                        nb[bbegin] = p;
                    }
                    bbegin = b;
                } else {
                    let before = nb[b];
                    let slot = if before == BEFORE_BEGIN {
                        &mut head
                    } else {
                        &mut next[before]
                    };
                    let old = *slot;
                    *slot = p;
                    next[p] = old;
                }
                p = after;
            }
            buckets = nb;
        }
        let node = count;
        hashes.push(h);
        next.push(NIL);
        let n = buckets.len() as u64;
        let b = (h % n) as usize;
        if buckets[b] != NIL {
            let before = buckets[b];
            let after = if before == BEFORE_BEGIN {
                head
            } else {
                next[before]
            };
            next[node] = after;
            if before == BEFORE_BEGIN {
                head = node;
            } else {
                next[before] = node;
            }
        } else {
            next[node] = head;
            head = node;
            if next[node] != NIL {
                let nb = (hashes[next[node]] % n) as usize;
                buckets[nb] = node;
            }
            buckets[b] = BEFORE_BEGIN;
        }
    }
    let mut order = Vec::with_capacity(hashes.len());
    let mut p = head;
    while p != NIL {
        order.push(p as i32);
        p = next[p];
    }
    order
}

/// `strtol(buf, NULL, 16)` on at most two characters: leading hex digits, stopping at the
/// first other character (an optional sign and whitespace are ignored here: token texts of
/// BYTE tokens are `<0xXX>`).
fn strtol_hex(digits: &[u8]) -> u32 {
    let mut v = 0u32;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => break,
        };
        v = v * 16 + u32::from(d);
    }
    v
}

/// GPT-2's byte-to-character map (`unicode_byte_to_utf8`): printable Latin-1 bytes map to
/// themselves, the others to U+0100 upward in byte order.
pub fn byte_to_unicode(byte: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(byte) {
        return char::from(byte);
    }
    let n = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(256 + n).unwrap_or('\u{FFFD}')
}

/// The inverse of [`byte_to_unicode`] (`unicode_utf8_to_byte`); None for other characters.
pub fn unicode_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        let b = cp as u8;
        return matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF).then_some(b);
    }
    let n = cp.checked_sub(256)? as usize;
    (0..=255u8)
        .filter(|&b| !matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
        .nth(n)
}

fn vocab_size_key(meta: &Metadata) -> Option<u32> {
    let arch = meta.get_str("general.architecture")?;
    meta.get_u32(&format!("{arch}.vocab_size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_byte_map_round_trips() {
        assert_eq!(byte_to_unicode(b'!'), '!');
        assert_eq!(byte_to_unicode(b' '), 'Ġ');
        assert_eq!(byte_to_unicode(b'\n'), 'Ċ');
        for b in 0..=255u8 {
            assert_eq!(unicode_to_byte(byte_to_unicode(b)), Some(b));
        }
        assert_eq!(unicode_to_byte('€'), None);
    }

    #[test]
    fn libstdcxx_hash_matches_std_hash() {
        // Values printed by g++'s std::hash<std::string> on this platform.
        assert_eq!(libstdcxx_hash(b"abc"), 0x32d8_2bf8_ed3d_ba39);
        assert_eq!(libstdcxx_hash(b""), 0x553e_9390_1e46_2a6e);
        assert_eq!(libstdcxx_hash(b"hello world!!"), 0x893e_b79c_acce_78e4);
    }

    #[test]
    fn iteration_order_matches_libstdcxx_unordered_map() {
        // g++: insert to_string(i) + "x" for i in 0..50000 into an
        // unordered_map<string, int>, walk it: first ids and a hash of all ids
        // (h = (h ^ id) * 1099511628211 from h = 1469598103934665603).
        let keys: Vec<Vec<u8>> = (0..50000).map(|i| format!("{i}x").into_bytes()).collect();
        let order = libstdcxx_iteration_order(keys.iter().map(Vec::as_slice));
        assert_eq!(
            &order[..8],
            &[49998, 49997, 49996, 49994, 49993, 49992, 49991, 49990]
        );
        let fnv = order.iter().fold(1_469_598_103_934_665_603u64, |h, &id| {
            (h ^ u64::from(id as u32)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(fnv, 0x00b7_9e8c_8985_c9f3);
    }

    #[test]
    fn sort_matches_libstdcxx_std_sort() {
        // g++: ids 0..n sorted by std::sort with `lens[a] > lens[b]`, lens[i] =
        // (i * 7919 + 13) % 11 (many ties); hash as in the iteration-order test, and ids.
        let expected: [(usize, u64, [i32; 3]); 5] = [
            (5, 0xce46_a066_a685_2c87, [3, 4, 2]),
            (17, 0x118a_1309_0d15_b7df, [3, 14, 2]),
            (100, 0xe98b_805b_5a8e_c139, [91, 80, 2]),
            (1000, 0x1c72_a083_48c3_2e27, [630, 707, 706]),
            (5000, 0x4715_8258_352d_ecd9, [3776, 2291, 651]),
        ];
        for (n, hash, ends) in expected {
            let lens: Vec<u32> = (0..n as u32)
                .map(|i| (i.wrapping_mul(7919) + 13) % 11)
                .collect();
            let mut ids: Vec<i32> = (0..n as i32).collect();
            crate::cpp::sort(&mut ids, &|a: &i32, b: &i32| {
                lens[*a as usize] > lens[*b as usize]
            });
            let h = ids.iter().fold(1_469_598_103_934_665_603u64, |h, &id| {
                (h ^ u64::from(id as u32)).wrapping_mul(0x0100_0000_01b3)
            });
            assert_eq!((h, [ids[0], ids[1], ids[n - 1]]), (hash, ends), "n = {n}");
        }
    }

    #[test]
    fn strtol_reads_leading_hex() {
        assert_eq!(strtol_hex(b"0A"), 10);
        assert_eq!(strtol_hex(b"f>"), 15);
        assert_eq!(strtol_hex(b"zz"), 0);
    }
}
