//! Vocabulary metadata queries (`llama_vocab_*` and their deprecated `llama_token_*`
//! aliases). Tokenization lives in tokenize.rs and is not supported yet.

use std::ffi::c_char;

use super::handles::{self, llama_vocab};
use super::types::*;
use super::FfiError;
use crate::model::vocab::{Vocab, ATTR_CONTROL, TOKEN_NULL};

/// Runs a query on a checked vocab handle.
///
/// # Safety
/// `vocab` must be NULL or a live vocab handle.
unsafe fn with_vocab<T>(
    vocab: *const llama_vocab,
    f: impl FnOnce(&Vocab) -> T,
) -> Result<T, FfiError> {
    // SAFETY: per the caller's contract.
    let handle = unsafe { handles::vocab(vocab) }?;
    Ok(f(&handle.inner.vocab))
}

/// The tokenizer type (`enum llama_vocab_type`). NONE (0) for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_type(vocab: *const llama_vocab) -> LlamaVocabType {
    getter!(
        with_vocab,
        "llama_vocab_type",
        vocab,
        LlamaVocabType(0),
        |v| LlamaVocabType(v.vocab_type)
    )
}

/// Number of tokens. -1 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_n_tokens(vocab: *const llama_vocab) -> i32 {
    getter!(
        with_vocab,
        "llama_vocab_n_tokens",
        vocab,
        -1,
        |v| v.tokens.len() as i32
    )
}

/// Deprecated: `llama_vocab_n_tokens`.
#[no_mangle]
pub unsafe extern "C" fn llama_n_vocab(vocab: *const llama_vocab) -> i32 {
    // SAFETY: same contract.
    unsafe { llama_vocab_n_tokens(vocab) }
}

/// Text of `token`, owned by the model; NULL (and a log line) when out of range (upstream
/// aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_text(
    vocab: *const llama_vocab,
    token: llama_token,
) -> *const c_char {
    boundary!("llama_vocab_get_text", std::ptr::null(), {
        // SAFETY: NULL or a live vocab.
        unsafe { with_vocab(vocab, |v| v.token(token).map(|t| t.text.as_ptr())) }?
            .ok_or_else(|| FfiError::Invalid(format!("token {token} out of range")))
    })
}

/// Score of `token`; 0.0 (and a log line) when out of range (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_score(
    vocab: *const llama_vocab,
    token: llama_token,
) -> f32 {
    boundary!("llama_vocab_get_score", 0.0, {
        // SAFETY: NULL or a live vocab.
        unsafe { with_vocab(vocab, |v| v.token(token).map(|t| t.score)) }?
            .ok_or_else(|| FfiError::Invalid(format!("token {token} out of range")))
    })
}

/// Attributes of `token` (`enum llama_token_attr` bits); UNDEFINED (0) when out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_attr(
    vocab: *const llama_vocab,
    token: llama_token,
) -> LlamaTokenAttr {
    boundary!("llama_vocab_get_attr", LlamaTokenAttr(0), {
        // SAFETY: NULL or a live vocab.
        unsafe { with_vocab(vocab, |v| v.token(token).map(|t| LlamaTokenAttr(t.attr))) }?
            .ok_or_else(|| FfiError::Invalid(format!("token {token} out of range")))
    })
}

/// Whether `token` ends generation (EOS, EOT, EOM and the end-of-turn tokens upstream
/// recognises). False for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_is_eog(vocab: *const llama_vocab, token: llama_token) -> bool {
    getter!(with_vocab, "llama_vocab_is_eog", vocab, false, |v| token
        != TOKEN_NULL
        && v.eog.contains(&token))
}

/// Whether `token` is a control token. False for NULL or out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_is_control(
    vocab: *const llama_vocab,
    token: llama_token,
) -> bool {
    boundary!("llama_vocab_is_control", false, {
        // SAFETY: NULL or a live vocab.
        unsafe {
            with_vocab(vocab, |v| {
                v.token(token).is_some_and(|t| t.attr & ATTR_CONTROL != 0)
            })
        }
    })
}

/// Beginning-of-sentence token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_bos(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_bos", vocab, TOKEN_NULL, |v| v
        .specials
        .bos)
}

/// End-of-sentence token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_eos(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_eos", vocab, TOKEN_NULL, |v| v
        .specials
        .eos)
}

/// End-of-turn token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_eot(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_eot", vocab, TOKEN_NULL, |v| v
        .specials
        .eot)
}

/// Sentence separator token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_sep(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_sep", vocab, TOKEN_NULL, |v| v
        .specials
        .sep)
}

/// Newline token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_nl(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_nl", vocab, TOKEN_NULL, |v| v
        .specials
        .nl)
}

/// Padding token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_pad(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_pad", vocab, TOKEN_NULL, |v| v
        .specials
        .pad)
}

/// Mask token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_mask(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_mask", vocab, TOKEN_NULL, |v| v
        .specials
        .mask)
}

/// Fill-in-the-middle prefix token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_pre(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_pre", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_pre)
}

/// Fill-in-the-middle suffix token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_suf(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_suf", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_suf)
}

/// Fill-in-the-middle middle token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_mid(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_mid", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_mid)
}

/// Fill-in-the-middle pad token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_pad(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_pad", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_pad)
}

/// Fill-in-the-middle repository token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_rep(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_rep", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_rep)
}

/// Fill-in-the-middle file separator token, or LLAMA_TOKEN_NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_fim_sep(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_fim_sep", vocab, TOKEN_NULL, |v| v
        .specials
        .fim_sep)
}

/// Deprecated: the BOS token (upstream's classification token).
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_cls(vocab: *const llama_vocab) -> llama_token {
    getter!(with_vocab, "llama_vocab_cls", vocab, TOKEN_NULL, |v| v
        .specials
        .bos)
}

/// Whether a BOS token should be added when tokenizing. False for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_add_bos(vocab: *const llama_vocab) -> bool {
    getter!(with_vocab, "llama_vocab_get_add_bos", vocab, false, |v| v
        .add_bos)
}

/// Whether an EOS token should be added when tokenizing. False for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_add_eos(vocab: *const llama_vocab) -> bool {
    getter!(with_vocab, "llama_vocab_get_add_eos", vocab, false, |v| v
        .add_eos)
}

/// Whether a SEP token should be added when tokenizing. False for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_add_sep(vocab: *const llama_vocab) -> bool {
    getter!(with_vocab, "llama_vocab_get_add_sep", vocab, false, |v| v
        .add_sep)
}

/// Tokens to suppress during sampling. None are read from the file yet: writes 0 to
/// `n_suppress_tokens` (when non-NULL) and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_suppress_tokens(
    vocab: *const llama_vocab,
    n_suppress_tokens: *mut i32,
) -> *const llama_token {
    boundary!("llama_vocab_get_suppress_tokens", std::ptr::null(), {
        // SAFETY: NULL or a live vocab.
        unsafe { with_vocab(vocab, |_| ()) }?;
        if !n_suppress_tokens.is_null() {
            // SAFETY: non-NULL out-pointer from the caller.
            unsafe { *n_suppress_tokens = 0 };
        }
        Ok(std::ptr::null())
    })
}

/// Deprecated: `llama_vocab_get_text`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_get_text(
    vocab: *const llama_vocab,
    token: llama_token,
) -> *const c_char {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_get_text(vocab, token) }
}

/// Deprecated: `llama_vocab_get_score`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_get_score(
    vocab: *const llama_vocab,
    token: llama_token,
) -> f32 {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_get_score(vocab, token) }
}

/// Deprecated: `llama_vocab_get_attr`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_get_attr(
    vocab: *const llama_vocab,
    token: llama_token,
) -> LlamaTokenAttr {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_get_attr(vocab, token) }
}

/// Deprecated: `llama_vocab_is_eog`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_is_eog(vocab: *const llama_vocab, token: llama_token) -> bool {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_is_eog(vocab, token) }
}

/// Deprecated: `llama_vocab_is_control`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_is_control(
    vocab: *const llama_vocab,
    token: llama_token,
) -> bool {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_is_control(vocab, token) }
}

/// Deprecated: `llama_vocab_bos`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_bos(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_bos(vocab) }
}

/// Deprecated: `llama_vocab_eos`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_eos(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_eos(vocab) }
}

/// Deprecated: `llama_vocab_eot`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_eot(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_eot(vocab) }
}

/// Deprecated: `llama_vocab_cls`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_cls(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_cls(vocab) }
}

/// Deprecated: `llama_vocab_sep`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_sep(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_sep(vocab) }
}

/// Deprecated: `llama_vocab_nl`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_nl(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_nl(vocab) }
}

/// Deprecated: `llama_vocab_pad`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_pad(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_pad(vocab) }
}

/// Deprecated: `llama_vocab_get_add_bos`.
#[no_mangle]
pub unsafe extern "C" fn llama_add_bos_token(vocab: *const llama_vocab) -> bool {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_get_add_bos(vocab) }
}

/// Deprecated: `llama_vocab_get_add_eos`.
#[no_mangle]
pub unsafe extern "C" fn llama_add_eos_token(vocab: *const llama_vocab) -> bool {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_get_add_eos(vocab) }
}

/// Deprecated: `llama_vocab_fim_pre`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_pre(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_pre(vocab) }
}

/// Deprecated: `llama_vocab_fim_suf`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_suf(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_suf(vocab) }
}

/// Deprecated: `llama_vocab_fim_mid`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_mid(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_mid(vocab) }
}

/// Deprecated: `llama_vocab_fim_pad`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_pad(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_pad(vocab) }
}

/// Deprecated: `llama_vocab_fim_rep`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_rep(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_rep(vocab) }
}

/// Deprecated: `llama_vocab_fim_sep`.
#[no_mangle]
pub unsafe extern "C" fn llama_token_fim_sep(vocab: *const llama_vocab) -> llama_token {
    // SAFETY: same contract as the target.
    unsafe { llama_vocab_fim_sep(vocab) }
}
