//! Tokenization and chat templates: `llama_tokenize`, `llama_token_to_piece`,
//! `llama_detokenize` (src/tokenizer/), `llama_chat_apply_template`,
//! `llama_chat_builtin_templates`.
//!
//! The three conversions follow upstream's return conventions: the count written, or minus
//! the count needed when the buffer is too small (nothing useful written then), and
//! `llama_tokenize` returns INT32_MIN when the result would not fit an `int32_t`. Where
//! upstream aborts or crashes (NULL or unknown vocab, NULL buffers with a non-zero size,
//! negative `text_len`, token ids out of range, a vocab type whose tokenizer cannot run),
//! they log one line naming what and why and return -1: never a success, and a caller that
//! retries with a buffer of 1 gets -1 again. (INT32_MIN is not used for these: llama-cpp-python
//! takes `abs()` of a negative result and would allocate an 8 GiB token array before failing.)

#![allow(unused_variables)] // chat stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;

use super::handles::{self, llama_vocab};
use super::types::*;
use super::FfiError;
use crate::model::vocab::Vocab;
use crate::tokenizer::Tokenizer;

/// The vocabulary and tokenizer behind a checked vocab handle.
///
/// # Safety
/// `vocab` must be NULL or a live vocab handle.
unsafe fn vocab_of<'a>(vocab: *const llama_vocab) -> Result<(&'a Vocab, &'a Tokenizer), FfiError> {
    // SAFETY: per the caller's contract.
    let handle = unsafe { handles::vocab(vocab) }?;
    Ok((&handle.inner.vocab, &handle.tokenizer))
}

/// Borrows `len` bytes at `ptr` (NULL allowed only when `len` is 0).
///
/// # Safety
/// A non-NULL `ptr` must be valid for `len` bytes of reads.
unsafe fn bytes_in<'a, T>(
    ptr: *const T,
    len: usize,
    what: &'static str,
) -> Result<&'a [T], FfiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: non-NULL and valid for `len` elements per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Borrows an output buffer of `len` elements (NULL allowed only when `len` is 0; a negative
/// length is an empty buffer, as upstream's comparisons treat it).
///
/// # Safety
/// A non-NULL `ptr` must be valid for `len` elements of writes.
unsafe fn buf_out<'a, T>(
    ptr: *mut T,
    len: i32,
    what: &'static str,
) -> Result<&'a mut [T], FfiError> {
    let len = usize::try_from(len).unwrap_or(0);
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: non-NULL and valid for `len` elements per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

fn core(e: crate::tokenizer::TokenizerError) -> FfiError {
    FfiError::Core(e.to_string())
}

/// Tokenizes `text_len` bytes of `text` into `tokens` (at most `n_tokens_max`), adding
/// BOS/EOS/SEP as the vocab asks when `add_special`, and matching control tokens in the text
/// when `parse_special`. Returns the number of tokens, minus the number needed when
/// `n_tokens_max` is too small, or INT32_MIN when that number does not fit an `int32_t`.
/// Invalid arguments (NULL vocab, NULL `text` with `text_len > 0`, negative `text_len`, NULL
/// `tokens` with `n_tokens_max > 0`) and vocabularies whose tokenizer cannot run: a log line
/// and -1. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn llama_tokenize(
    vocab: *const llama_vocab,
    text: *const c_char,
    text_len: i32,
    tokens: *mut llama_token,
    n_tokens_max: i32,
    add_special: bool,
    parse_special: bool,
) -> i32 {
    boundary!("llama_tokenize", -1, {
        // SAFETY: NULL or a live vocab.
        let (vocab, tokenizer) = unsafe { vocab_of(vocab) }?;
        let len = usize::try_from(text_len)
            .map_err(|_| FfiError::Invalid(format!("text_len {text_len} is negative")))?;
        // SAFETY: `text` is valid for `text_len` bytes per the API contract.
        let text = unsafe { bytes_in(text.cast::<u8>(), len, "text") }?;
        let ids = tokenizer
            .tokenize(vocab, text, add_special, parse_special)
            .map_err(core)?;
        let Ok(n) = i32::try_from(ids.len()) else {
            crate::log_error!(
                "llama_tokenize: tokenization result size {} exceeds int32_t limit",
                ids.len()
            );
            return Ok(i32::MIN);
        };
        if n_tokens_max < n {
            return Ok(-n);
        }
        // SAFETY: `tokens` is valid for `n_tokens_max` tokens per the API contract.
        let out = unsafe { buf_out(tokens, n, "tokens") }?;
        out.copy_from_slice(&ids);
        Ok(n)
    })
}

/// Writes the text of `token` into `buf` (no NUL), skipping up to `lstrip` leading spaces;
/// control and unknown tokens give "" unless `special`. Returns its length, or minus its
/// length when `length` is too small. NULL vocab, an id out of range, or NULL `buf` with
/// `length > 0`: a log line and -1. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn llama_token_to_piece(
    vocab: *const llama_vocab,
    token: llama_token,
    buf: *mut c_char,
    length: i32,
    lstrip: i32,
    special: bool,
) -> i32 {
    boundary!("llama_token_to_piece", -1, {
        // SAFETY: NULL or a live vocab.
        let (vocab, _) = unsafe { vocab_of(vocab) }?;
        // SAFETY: `buf` is valid for `length` bytes per the API contract.
        let buf = unsafe { buf_out(buf.cast::<u8>(), length, "buf") }?;
        crate::tokenizer::token_to_piece(vocab, token, buf, lstrip, special).map_err(core)
    })
}

/// Converts `n_tokens` tokens back into text in `text` (at most `text_len_max` bytes, no
/// NUL): BOS/EOS dropped when `remove_special` and the vocab adds them, control tokens
/// rendered when `unparse_special`. Returns the length, or minus the length needed when
/// `text_len_max` is too small (`text` then holds the pieces that fit). NULL vocab, NULL
/// `tokens` with `n_tokens > 0`, NULL `text` with `text_len_max > 0`, a negative
/// `text_len_max` with tokens, or an id out of range: a log line and -1. Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn llama_detokenize(
    vocab: *const llama_vocab,
    tokens: *const llama_token,
    n_tokens: i32,
    text: *mut c_char,
    text_len_max: i32,
    remove_special: bool,
    unparse_special: bool,
) -> i32 {
    boundary!("llama_detokenize", -1, {
        // SAFETY: NULL or a live vocab.
        let (vocab, _) = unsafe { vocab_of(vocab) }?;
        let n = usize::try_from(n_tokens).unwrap_or(0);
        // SAFETY: `tokens` is valid for `n_tokens` tokens per the API contract.
        let tokens = unsafe { bytes_in(tokens, n, "tokens") }?;
        if text_len_max < 0 && !tokens.is_empty() {
            return Err(FfiError::Invalid(format!(
                "text_len_max {text_len_max} is negative"
            )));
        }
        // SAFETY: `text` is valid for `text_len_max` bytes per the API contract.
        let out = unsafe { buf_out(text.cast::<u8>(), text_len_max, "text") }?;
        crate::tokenizer::detokenize(vocab, tokens, out, remove_special, unparse_special)
            .map_err(core)
    })
}
