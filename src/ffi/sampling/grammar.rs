//! Grammar samplers (`llama_sampler_init_grammar*`): GBNF-constrained sampling, lazy
//! variants waiting for trigger words, patterns or tokens. The core is
//! `crate::sampling::grammar`; an invalid grammar (or pattern) returns NULL with a log line
//! naming the reason, where upstream sometimes aborts.

use std::ffi::{c_char, CStr};
use std::ptr::null_mut;
use std::sync::Arc;

use super::super::handles::{self, llama_vocab};
use super::super::types::*;
use super::super::FfiError;
use super::rust_iface::sampler_into_raw;
use crate::sampling::grammar::parser::TokenResolver;
use crate::sampling::grammar::vocab::single_token_of;
use crate::sampling::grammar::{GrammarSampler, GrammarSpec, GrammarVocab};

/// Borrows `n` C strings from `ptr` as UTF-8.
///
/// # Safety
/// `ptr` must be NULL or point to `n` pointers, each NULL or a NUL-terminated string.
unsafe fn c_str_array<'a>(
    ptr: *const *const c_char,
    n: usize,
    what: &'static str,
) -> Result<Vec<&'a str>, FfiError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return Err(FfiError::Invalid(format!(
            "{what} is NULL but its count is {n}"
        )));
    }
    // SAFETY: `ptr` points to `n` pointers per the contract.
    let items = unsafe { std::slice::from_raw_parts(ptr, n) };
    items
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            if p.is_null() {
                return Err(FfiError::Invalid(format!("{what}[{i}] is NULL")));
            }
            // SAFETY: non-NULL and NUL-terminated per the contract.
            let s = unsafe { CStr::from_ptr(p) };
            s.to_str()
                .map_err(|_| FfiError::Invalid(format!("{what}[{i}] is not valid UTF-8")))
        })
        .collect()
}

/// Builds the sampler behind the three exports.
///
/// # Safety
/// Pointer arguments as in `llama_sampler_init_grammar_lazy_patterns`.
#[allow(clippy::too_many_arguments)]
unsafe fn init_grammar(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    lazy: bool,
    trigger_words: (*const *const c_char, usize),
    trigger_patterns: (*const *const c_char, usize),
    trigger_tokens: (*const llama_token, usize),
) -> Result<*mut llama_sampler, FfiError> {
    // SAFETY: NULL or NUL-terminated per the contract.
    let text = (!grammar_str.is_null()).then(|| unsafe { CStr::from_ptr(grammar_str) }.to_bytes());
    let text = text.filter(|t| !t.is_empty());
    let root = if grammar_root.is_null() {
        None
    } else {
        // SAFETY: NUL-terminated per the contract.
        let r = unsafe { CStr::from_ptr(grammar_root) };
        Some(
            r.to_str()
                .map_err(|_| FfiError::Invalid("grammar_root is not valid UTF-8".into()))?,
        )
    };
    if text.is_some() && root.is_none() {
        return Err(FfiError::Null("grammar_root"));
    }
    // Upstream ignores trigger words given as NULL with a count (it checks both).
    let words = if trigger_words.0.is_null() {
        Vec::new()
    } else {
        // SAFETY: per the contract.
        unsafe { c_str_array(trigger_words.0, trigger_words.1, "trigger_words") }?
    };
    // SAFETY: per the contract.
    let patterns =
        unsafe { c_str_array(trigger_patterns.0, trigger_patterns.1, "trigger_patterns") }?;
    let tokens: &[i32] = match trigger_tokens {
        (_, 0) => &[],
        (p, n) if p.is_null() => {
            return Err(FfiError::Invalid(format!(
                "trigger_tokens is NULL but its count is {n}"
            )))
        }
        // SAFETY: `n` tokens per the contract.
        (p, n) => unsafe { std::slice::from_raw_parts(p, n) },
    };

    // The vocabulary is only read for a non-empty grammar (upstream keeps a pointer and
    // asserts it on apply; a NULL vocab is refused here instead).
    let grammar_vocab = match text {
        Some(_) => {
            // SAFETY: NULL or a live vocab handle per the contract.
            let handle = unsafe { handles::vocab(vocab) }?;
            let resolver = Arc::new(HandleTokenizer {
                handle: vocab as usize,
            });
            Some(Arc::new(GrammarVocab::from_vocab(
                &handle.inner.vocab,
                resolver,
            )))
        }
        None => None,
    };
    let spec = GrammarSpec {
        text,
        root,
        lazy,
        trigger_words: &words,
        trigger_patterns: &patterns,
        trigger_tokens: tokens,
    };
    let sampler =
        GrammarSampler::new(grammar_vocab, &spec).map_err(|e| FfiError::Core(e.to_string()))?;
    Ok(sampler_into_raw(Box::new(sampler)))
}

/// `<text>` references resolved by the tokenizer behind a vocab handle (the tokenizer lives
/// in the handle; the handle is checked on every use, and upstream's grammar also keeps the
/// vocab pointer for the sampler's life).
struct HandleTokenizer {
    handle: usize,
}

impl TokenResolver for HandleTokenizer {
    fn single_token(&self, text: &[u8]) -> Option<i32> {
        // SAFETY: the address of a vocab handle, checked by `handles::vocab`; the model
        // outlives its samplers per the API contract.
        let handle = unsafe { handles::vocab(self.handle as *const llama_vocab) }.ok()?;
        single_token_of(&handle.tokenizer, &handle.inner.vocab, text)
    }
}

/// Constrains sampling to a GBNF grammar (see upstream's grammars/README.md): tokens the
/// grammar does not allow next get logit -inf. An empty or NULL `grammar_str` gives a sampler
/// that does nothing. NULL (and a log line saying why) when the grammar does not parse, has
/// no `grammar_root` symbol, is left-recursive, is not UTF-8, or `vocab` is NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_grammar", null_mut(), {
        // SAFETY: the caller's pointers, per the header's contract.
        unsafe {
            init_grammar(
                vocab,
                grammar_str,
                grammar_root,
                false,
                (std::ptr::null(), 0),
                (std::ptr::null(), 0),
                (std::ptr::null(), 0),
            )
        }
    })
}

/// Deprecated upstream (use `llama_sampler_init_grammar_lazy_patterns`): a grammar sampler
/// that constrains nothing until one of `trigger_words` appears in the generated text or one
/// of `trigger_tokens` is accepted. NULL and a log line on the errors of
/// `llama_sampler_init_grammar`, and for NULL array entries.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_words: *mut *const c_char,
    num_trigger_words: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_grammar_lazy", null_mut(), {
        // SAFETY: the caller's pointers, per the header's contract.
        unsafe {
            init_grammar(
                vocab,
                grammar_str,
                grammar_root,
                true,
                (trigger_words.cast_const(), num_trigger_words),
                (std::ptr::null(), 0),
                (trigger_tokens, num_trigger_tokens),
            )
        }
    })
}

/// A grammar sampler that constrains nothing until a trigger: one of `trigger_tokens` is
/// accepted, or one of `trigger_patterns` (regexes) matches the generated text; the grammar
/// is then fed the text from the pattern's first non-empty capture group on. NULL and a log
/// line on the errors of `llama_sampler_init_grammar`, for an invalid pattern (upstream
/// aborts) and for NULL array entries.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy_patterns(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_patterns: *mut *const c_char,
    num_trigger_patterns: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    boundary!("llama_sampler_init_grammar_lazy_patterns", null_mut(), {
        // SAFETY: the caller's pointers, per the header's contract.
        unsafe {
            init_grammar(
                vocab,
                grammar_str,
                grammar_root,
                true,
                (std::ptr::null(), 0),
                (trigger_patterns.cast_const(), num_trigger_patterns),
                (trigger_tokens, num_trigger_tokens),
            )
        }
    })
}
