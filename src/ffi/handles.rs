//! Opaque handles handed to C. Each starts with a magic tag checked on entry, so a freed or
//! foreign pointer is reported instead of silently corrupting memory (best effort: reading
//! the tag of freed memory is itself undefined, but in practice catches use-after-free, since
//! `free` overwrites the tag first).

use super::FfiError;

const MODEL_MAGIC: u64 = u64::from_le_bytes(*b"LHSmodel");
const VOCAB_MAGIC: u64 = u64::from_le_bytes(*b"LHSvocab");
#[allow(dead_code)] // contexts become real with the hot-swap work
const CONTEXT_MAGIC: u64 = u64::from_le_bytes(*b"LHSctx\0\0");
const DEAD_MAGIC: u64 = u64::from_le_bytes(*b"LHSdead\0");

/// A loaded model (`struct llama_model`). Created by the load functions, freed by
/// `llama_model_free`.
pub struct llama_model {
    magic: u64,
    pub(crate) vocab: llama_vocab,
    pub(crate) inner: std::sync::Arc<crate::model::Model>,
}

/// A model's vocabulary (`struct llama_vocab`), owned by its model.
pub struct llama_vocab {
    magic: u64,
    pub(crate) inner: std::sync::Arc<crate::model::Model>,
    /// The vocabulary's tokenizer, built when the model was loaded.
    pub(crate) tokenizer: crate::tokenizer::Tokenizer,
}

/// An inference context (`struct llama_context`).
pub struct llama_context {
    magic: u64,
    pub(crate) model: *const llama_model,
    pub(crate) inner: crate::context::Context,
}

impl llama_model {
    pub(crate) fn new_boxed(
        model: crate::model::Model,
        tokenizer: crate::tokenizer::Tokenizer,
    ) -> *mut llama_model {
        let inner = std::sync::Arc::new(model);
        Box::into_raw(Box::new(llama_model {
            magic: MODEL_MAGIC,
            vocab: llama_vocab {
                magic: VOCAB_MAGIC,
                inner: inner.clone(),
                tokenizer,
            },
            inner,
        }))
    }
}

#[allow(dead_code)]
impl llama_context {
    pub(crate) fn new_boxed(
        model: *const llama_model,
        inner: crate::context::Context,
    ) -> *mut llama_context {
        Box::into_raw(Box::new(llama_context {
            magic: CONTEXT_MAGIC,
            model,
            inner,
        }))
    }
}

/// Borrows a model handle after checking it.
///
/// # Safety
/// `ptr` must be NULL or a pointer this library returned and that has not been freed.
pub(crate) unsafe fn model<'a>(ptr: *const llama_model) -> Result<&'a llama_model, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("model"));
    }
    // SAFETY: non-NULL and, per the contract, a live allocation of ours.
    let handle = unsafe { &*ptr };
    if handle.magic != MODEL_MAGIC {
        return Err(FfiError::BadHandle("model"));
    }
    Ok(handle)
}

/// Borrows a vocab handle after checking it.
///
/// # Safety
/// As [`model`].
pub(crate) unsafe fn vocab<'a>(ptr: *const llama_vocab) -> Result<&'a llama_vocab, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("vocab"));
    }
    // SAFETY: as in `model`.
    let handle = unsafe { &*ptr };
    if handle.magic != VOCAB_MAGIC {
        return Err(FfiError::BadHandle("vocab"));
    }
    Ok(handle)
}

/// Borrows a context handle after checking it.
#[allow(dead_code)]
///
/// # Safety
/// As [`model`].
pub(crate) unsafe fn context<'a>(ptr: *const llama_context) -> Result<&'a llama_context, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("ctx"));
    }
    // SAFETY: as in `model`.
    let handle = unsafe { &*ptr };
    if handle.magic != CONTEXT_MAGIC {
        return Err(FfiError::BadHandle("ctx"));
    }
    Ok(handle)
}

/// Frees a model handle. NULL is a no-op.
///
/// # Safety
/// As [`model`]; the pointer must not be used afterwards.
pub(crate) unsafe fn free_model(ptr: *mut llama_model) -> Result<(), FfiError> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: checked below before taking ownership.
    unsafe { model(ptr)? };
    // SAFETY: a live handle created by `Box::into_raw` in `new_boxed`.
    let mut boxed = unsafe { Box::from_raw(ptr) };
    boxed.magic = DEAD_MAGIC;
    boxed.vocab.magic = DEAD_MAGIC;
    drop(boxed);
    Ok(())
}

/// Frees a context handle. NULL is a no-op.
#[allow(dead_code)]
///
/// # Safety
/// As [`context`]; the pointer must not be used afterwards.
pub(crate) unsafe fn free_context(ptr: *mut llama_context) -> Result<(), FfiError> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: checked below before taking ownership.
    unsafe { context(ptr)? };
    // SAFETY: a live handle created by `Box::into_raw` in `new_boxed`.
    let mut boxed = unsafe { Box::from_raw(ptr) };
    boxed.magic = DEAD_MAGIC;
    drop(boxed);
    Ok(())
}
