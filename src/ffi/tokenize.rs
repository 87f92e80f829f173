//! Tokenization and chat templates: `llama_tokenize`, `llama_token_to_piece`,
//! `llama_detokenize`, `llama_chat_apply_template`, `llama_chat_builtin_templates`. Not
//! supported by llama-hotswap yet. No stub writes to its output buffer.
//!
//! The three conversions return -1. Upstream's negative results mean "buffer too small,
//! -n needed", so a caller retries with a buffer of 1 and gets -1 again: any caller that
//! checks its retry sees the failure. INT32_MIN (upstream's overflow failure of
//! `llama_tokenize`) was not chosen: llama-cpp-python takes `abs()` of a negative result and
//! would allocate an 8 GiB token array before failing.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;

use super::handles::llama_vocab;
use super::types::*;

/// Upstream: tokenizes `text_len` bytes of `text` into `tokens` (at most `n_tokens_max`);
/// returns the count, or minus the count needed when `tokens` is too small.
/// Not supported by llama-hotswap yet: logs once and returns -1 (never a success: a retry
/// with a larger buffer returns -1 again). `tokens` is left untouched.
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
    unsupported!("llama_tokenize", -1)
}

/// Upstream: writes the text of `token` into `buf` (no NUL, skipping up to `lstrip` leading
/// spaces); returns its length, or minus the length needed when `buf` is too small.
/// Not supported by llama-hotswap yet: logs once and returns -1 (never a success: a retry
/// with a larger buffer returns -1 again). `buf` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_token_to_piece(
    vocab: *const llama_vocab,
    token: llama_token,
    buf: *mut c_char,
    length: i32,
    lstrip: i32,
    special: bool,
) -> i32 {
    unsupported!("llama_token_to_piece", -1)
}

/// Upstream: converts `n_tokens` tokens back into text in `text` (at most `text_len_max`
/// bytes); returns its length, or minus the length needed when `text` is too small.
/// Not supported by llama-hotswap yet: logs once and returns -1 (never a success: a retry
/// with a larger buffer returns -1 again). `text` is left untouched.
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
    unsupported!("llama_detokenize", -1)
}
