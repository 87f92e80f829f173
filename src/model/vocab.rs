//! Vocabulary metadata read from the tokenizer keys, with upstream's defaults per tokenizer
//! model. Tokenization itself is not implemented (those exports say so).

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;

use super::meta::{MetaArray, Metadata};

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

/// One token's text (NUL-terminated for C), score and attributes.
#[derive(Debug)]
pub struct Token {
    pub text: CString,
    pub score: f32,
    pub attr: i32,
}

/// The special token ids upstream tracks.
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
        Specials {
            bos: TOKEN_NULL,
            eos: TOKEN_NULL,
            eot: TOKEN_NULL,
            eom: TOKEN_NULL,
            unk: TOKEN_NULL,
            sep: TOKEN_NULL,
            pad: TOKEN_NULL,
            mask: TOKEN_NULL,
            nl: TOKEN_NULL,
            fim_pre: TOKEN_NULL,
            fim_suf: TOKEN_NULL,
            fim_mid: TOKEN_NULL,
            fim_pad: TOKEN_NULL,
            fim_rep: TOKEN_NULL,
            fim_sep: TOKEN_NULL,
        }
    }
}

#[derive(Debug, Default)]
pub struct Vocab {
    pub vocab_type: i32,
    pub tokens: Vec<Token>,
    pub specials: Specials,
    pub eog: BTreeSet<i32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
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

impl Vocab {
    /// Reads the vocabulary. A missing `tokenizer.ggml.model` gives an empty NONE vocab
    /// (upstream requires the key; the generic loader does not).
    pub fn load(meta: &Metadata) -> Result<Vocab, String> {
        let model = meta
            .get_str("tokenizer.ggml.model")
            .unwrap_or_else(|| "none".to_string());
        let mut v = Vocab::default();
        let s = &mut v.specials;
        match model.as_str() {
            "no_vocab" | "none" => {
                v.vocab_type = VOCAB_NONE;
                if let Some(n) = vocab_size_key(meta) {
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
                (s.bos, s.eos, s.unk) = (1, 2, 0);
                v.add_bos = true;
            }
            "bert" => {
                v.vocab_type = VOCAB_WPM;
                (s.bos, s.unk, s.sep, s.pad, s.mask) = (101, 100, 102, 0, 103);
                (v.add_bos, v.add_sep) = (true, true);
            }
            "gpt2" | "hybriddna" | "whitespace" | "gemma4" => {
                v.vocab_type = VOCAB_BPE;
                (s.bos, s.eos) = (11, 11);
            }
            "t5" => {
                v.vocab_type = VOCAB_UGM;
                (s.eos, s.unk, s.pad) = (1, 2, 0);
                v.add_eos = true;
            }
            "rwkv" => v.vocab_type = VOCAB_RWKV,
            "test" => v.vocab_type = VOCAB_TEST,
            "plamo2" => {
                v.vocab_type = VOCAB_PLAMO2;
                (s.bos, s.eos, s.unk, s.pad) = (1, 2, 0, 3);
            }
            other => return Err(format!("unknown tokenizer: '{other}'")),
        }

        let Some(MetaArray::Strs(texts)) = meta.get_array("tokenizer.ggml.tokens") else {
            return Err("cannot find tokenizer vocab in model file".to_string());
        };
        let scores = match meta.get_array("tokenizer.ggml.scores") {
            Some(MetaArray::Floats(f)) => Some(f.iter().map(|&x| x as f32).collect::<Vec<_>>()),
            Some(MetaArray::Ints(i)) => Some(i.iter().map(|&x| x as f32).collect()),
            _ => None,
        };
        let types = match meta.get_array("tokenizer.ggml.token_type") {
            Some(MetaArray::Ints(t)) => Some(t),
            _ => None,
        };
        let n = texts.len();
        if scores.as_ref().is_some_and(|s| s.len() < n) || types.is_some_and(|t| t.len() < n) {
            return Err("tokenizer arrays shorter than the token list".to_string());
        }
        let mut by_text = HashMap::with_capacity(n);
        v.tokens = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let text = if text.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    text.clone()
                };
                by_text.insert(text.clone(), i as i32);
                let attr = match types.map(|t| t[i]) {
                    None => ATTR_NORMAL,
                    Some(2) => ATTR_UNKNOWN,
                    Some(5) => ATTR_UNUSED,
                    Some(1) => ATTR_NORMAL,
                    Some(3) => ATTR_CONTROL,
                    Some(4) => ATTR_USER_DEFINED,
                    Some(6) => ATTR_BYTE,
                    Some(_) => ATTR_UNDEFINED,
                };
                Token {
                    text: CString::new(text.replace('\0', "")).unwrap_or_default(),
                    score: scores.as_ref().map_or(0.0, |s| s[i]),
                    attr,
                }
            })
            .collect();

        // Newline: SPM's byte token, WPM's pad, otherwise the token "\n" when present.
        v.specials.nl = match v.vocab_type {
            VOCAB_SPM => by_text.get("<0x0A>").copied().unwrap_or(v.specials.pad),
            VOCAB_WPM => v.specials.pad,
            _ => by_text
                .get("\n")
                .or_else(|| by_text.get("Ċ"))
                .copied()
                .unwrap_or(v.specials.pad),
        };

        let n_tokens = v.tokens.len() as i64;
        let keys: [(&str, fn(&mut Specials) -> &mut i32); 17] = [
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
            let id = field(&mut v.specials);
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
            v.add_bos = b;
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_eos_token") {
            v.add_eos = b;
        }
        if let Some(b) = meta.get_bool("tokenizer.ggml.add_sep_token") {
            v.add_sep = b;
        }

        if v.specials.eot == TOKEN_NULL {
            if let Some(&id) = EOT_TEXTS.iter().find_map(|t| by_text.get(*t)) {
                v.specials.eot = id;
                v.tokens[id as usize].attr |= ATTR_CONTROL;
            }
        }
        let s = v.specials;
        for id in [s.fim_pad, s.fim_rep, s.fim_sep] {
            if id != TOKEN_NULL {
                v.eog.insert(id);
            }
        }
        for text in EOG_TEXTS {
            if let Some(&id) = by_text.get(*text) {
                v.eog.insert(id);
                v.tokens[id as usize].attr |= ATTR_CONTROL;
            }
        }
        for id in [s.eos, s.eot, s.eom] {
            if id != TOKEN_NULL {
                v.eog.insert(id);
            }
        }
        Ok(v)
    }

    pub fn token(&self, id: i32) -> Option<&Token> {
        usize::try_from(id).ok().and_then(|i| self.tokens.get(i))
    }
}

fn vocab_size_key(meta: &Metadata) -> Option<u32> {
    let arch = meta.get_str("general.architecture")?;
    meta.get_u32(&format!("{arch}.vocab_size"))
}
