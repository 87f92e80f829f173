//! State and sessions: saving and restoring a context's state (its memory), whole or per
//! sequence, in buffers or in files (`llama_state_*`, and upstream's deprecated aliases), in
//! upstream's byte layout (see `context::state`): a state saved by either library loads in
//! the other. A failed restore logs why and leaves the context unchanged.

use std::ffi::c_char;

use super::handles::{self, llama_context};
use super::types::*;
use super::{c_str, FfiError};
use crate::kv_cache::state::{StateError, StateOut, StateSource};

impl From<StateError> for FfiError {
    fn from(e: StateError) -> FfiError {
        FfiError::Core(e.0)
    }
}

/// Caller memory a state is read from: `len` bytes at `ptr` (`usize::MAX` for the
/// deprecated functions without a size: the state's own length then bounds the reads).
struct RawSource {
    ptr: *const u8,
    len: usize,
    at: usize,
}

impl StateSource for RawSource {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.len)?;
        if n > isize::MAX as usize {
            return None;
        }
        // SAFETY: the caller's contract: `ptr` is valid for `len` bytes of reads (for the
        // deprecated forms: as far as the state it holds reaches); `at + n <= len`.
        let s = unsafe { std::slice::from_raw_parts(self.ptr.add(self.at), n) };
        self.at = end;
        Some(s)
    }
}

/// Writes the state made by `write` into `dst` (`size` bytes; `usize::MAX`: unbounded), after
/// counting it with `count`: a state larger than `size` writes nothing.
///
/// # Safety
/// `dst` must be valid for writes of `size` bytes, or of the state's size when unbounded.
unsafe fn write_into(
    dst: *mut u8,
    size: usize,
    count: impl FnOnce() -> Result<usize, StateError>,
    write: impl FnOnce(&mut dyn std::io::Write) -> Result<usize, StateError>,
) -> Result<usize, FfiError> {
    if dst.is_null() {
        return Err(FfiError::Null("dst"));
    }
    let needed = count()?;
    if needed > size {
        return Err(FfiError::Core(format!(
            "error saving state: unexpectedly reached end of buffer (the state is {needed} bytes, the buffer {size})"
        )));
    }
    // SAFETY: `dst` is valid for `needed <= size` bytes per the contract.
    let mut buf: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(dst, needed) };
    Ok(write(&mut buf)?)
}

/// A file path argument.
///
/// # Safety
/// As [`c_str`].
unsafe fn path<'a>(p: *const c_char) -> Result<std::borrow::Cow<'a, str>, FfiError> {
    // SAFETY: the caller's contract.
    unsafe { c_str(p, "path") }
}

/// Tokens from the caller (`n` at `tokens`; NULL only with `n` = 0).
///
/// # Safety
/// `tokens` must be valid for `n` reads.
unsafe fn tokens_in<'a>(tokens: *const llama_token, n: usize) -> Result<&'a [i32], FfiError> {
    if n == 0 {
        return Ok(&[]);
    }
    if tokens.is_null() {
        return Err(FfiError::Null("tokens"));
    }
    // SAFETY: valid for `n` reads per the contract.
    Ok(unsafe { std::slice::from_raw_parts(tokens, n) })
}

/// Copies `tokens` to `out` (room for `capacity`, checked by the core) and their count.
///
/// # Safety
/// `out` must be valid for `tokens.len()` writes, `count_out` for one.
unsafe fn tokens_out(
    tokens: &[i32],
    out: *mut llama_token,
    count_out: *mut usize,
) -> Result<(), FfiError> {
    if !tokens.is_empty() {
        // SAFETY: per the contract; the core checked `tokens.len() <= n_token_capacity`.
        unsafe { std::ptr::copy_nonoverlapping(tokens.as_ptr(), out, tokens.len()) };
    }
    // SAFETY: non-NULL (checked by the callers) and valid per the contract.
    unsafe { *count_out = tokens.len() };
    Ok(())
}

/// The size in bytes of the context's whole state (the architecture's name and the memory),
/// for saving: the exact size `llama_state_get_data` writes now. 0 with a log line for a
/// NULL context or a state llama-hotswap cannot save (see docs/dropin.md).
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_size(ctx: *mut llama_context) -> usize {
    boundary!("llama_state_get_size", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle
            .inner
            .state_write(StateOut::Count { tensors: true })?)
    })
}

/// Deprecated alias of `llama_state_get_size`.
#[no_mangle]
pub unsafe extern "C" fn llama_get_state_size(ctx: *mut llama_context) -> usize {
    // SAFETY: the same contract.
    unsafe { llama_state_get_size(ctx) }
}

/// Copies the context's whole state into `dst` (`size` bytes); returns the bytes copied.
/// A state larger than `size` copies nothing and returns 0 with a log line.
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_data(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
) -> usize {
    boundary!("llama_state_get_data", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let c = &handle.inner;
        // SAFETY: `dst` is valid for `size` bytes per the contract.
        unsafe {
            write_into(
                dst,
                size,
                || c.state_write(StateOut::Count { tensors: true }),
                |out| c.state_write(StateOut::Bytes(out)),
            )
        }
    })
}

/// Deprecated form of `llama_state_get_data` without a size: `dst` must hold
/// `llama_state_get_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_copy_state_data(ctx: *mut llama_context, dst: *mut u8) -> usize {
    // SAFETY: the same contract, unbounded as upstream's.
    unsafe { llama_state_get_data(ctx, dst, usize::MAX) }
}

/// Restores the context's whole state from `src` (`size` bytes), a state from
/// `llama_state_get_data` of either library for the same model and context parameters;
/// returns the bytes read. 0 with a log line, the context unchanged, for a state that does
/// not fit (wrong architecture, stream count, layer count, cache types, too many cells,
/// truncated).
#[no_mangle]
pub unsafe extern "C" fn llama_state_set_data(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
) -> usize {
    boundary!("llama_state_set_data", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        if src.is_null() {
            return Err(FfiError::Null("src"));
        }
        let mut source = RawSource {
            ptr: src,
            len: size,
            at: 0,
        };
        handle
            .inner
            .state_read(&mut source)
            .map_err(|e| FfiError::Core(format!("error loading state: {e}")))
    })
}

/// Deprecated form of `llama_state_set_data` without a size (the state's own length
/// bounds the reads).
#[no_mangle]
pub unsafe extern "C" fn llama_set_state_data(ctx: *mut llama_context, src: *const u8) -> usize {
    // SAFETY: the same contract, unbounded as upstream's.
    unsafe { llama_state_set_data(ctx, src, usize::MAX) }
}

/// Restores the context's whole state from a session file (`llama_state_save_file` of
/// either library) and writes its prompt tokens to `tokens_out` (room for
/// `n_token_capacity`) and their count to `n_token_count_out`. False with a log line, the
/// context and the out-pointers unchanged, for a missing file, a wrong magic or version,
/// more tokens than `n_token_capacity`, a state that does not fit, or data left over.
#[no_mangle]
pub unsafe extern "C" fn llama_state_load_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> bool {
    boundary!("llama_state_load_file", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // SAFETY: a NUL-terminated path per the contract.
        let p = unsafe { path(path_session) }?;
        if n_token_count_out.is_null() {
            return Err(FfiError::Null("n_token_count_out"));
        }
        if tokens_out.is_null() && n_token_capacity > 0 {
            return Err(FfiError::Null("tokens_out"));
        }
        let tokens = handle
            .inner
            .state_load_file(&p, n_token_capacity)
            .map_err(|e| FfiError::Core(format!("error loading session file: {e}")))?;
        // SAFETY: `tokens_out` has room for `n_token_capacity >= tokens.len()` tokens.
        unsafe { self::tokens_out(&tokens, tokens_out, n_token_count_out) }?;
        Ok(true)
    })
}

/// Deprecated alias of `llama_state_load_file`.
#[no_mangle]
pub unsafe extern "C" fn llama_load_session_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> bool {
    // SAFETY: the same contract.
    unsafe {
        llama_state_load_file(
            ctx,
            path_session,
            tokens_out,
            n_token_capacity,
            n_token_count_out,
        )
    }
}

/// Saves the context's whole state and the prompt `tokens` (`n_token_count`; NULL when 0)
/// to a session file, upstream's format. False with a log line when the file cannot be
/// written.
#[no_mangle]
pub unsafe extern "C" fn llama_state_save_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens: *const llama_token,
    n_token_count: usize,
) -> bool {
    boundary!("llama_state_save_file", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // SAFETY: a NUL-terminated path per the contract.
        let p = unsafe { path(path_session) }?;
        // SAFETY: `tokens` holds `n_token_count` tokens per the contract.
        let t = unsafe { tokens_in(tokens, n_token_count) }?;
        handle
            .inner
            .state_save_file(&p, t)
            .map_err(|e| FfiError::Core(format!("error saving session file: {e}")))?;
        Ok(true)
    })
}

/// Deprecated alias of `llama_state_save_file`.
#[no_mangle]
pub unsafe extern "C" fn llama_save_session_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens: *const llama_token,
    n_token_count: usize,
) -> bool {
    // SAFETY: the same contract.
    unsafe { llama_state_save_file(ctx, path_session, tokens, n_token_count) }
}

/// The exact size in bytes of the state of sequence `seq_id` (-1: every sequence).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
) -> usize {
    // SAFETY: the same contract.
    unsafe { llama_state_seq_get_size_ext(ctx, seq_id, 0) }
}

/// Copies the state of sequence `seq_id` into `dst` (`size` bytes); returns the bytes
/// copied, 0 with a log line when it does not fit.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
    seq_id: llama_seq_id,
) -> usize {
    // SAFETY: the same contract.
    unsafe { llama_state_seq_get_data_ext(ctx, dst, size, seq_id, 0) }
}

/// Restores a sequence state (`llama_state_seq_get_data` of either library) into
/// `dest_seq_id`: its cells replace the sequence's. Returns the bytes read; 0 with a log
/// line, the context unchanged, on failure (wrong magic, a state that does not fit, no room
/// for its cells).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
    dest_seq_id: llama_seq_id,
) -> usize {
    // SAFETY: the same contract.
    unsafe { llama_state_seq_set_data_ext(ctx, src, size, dest_seq_id, 0) }
}

/// Saves the state of sequence `seq_id` and its `tokens` to a file, upstream's format;
/// returns the bytes written, 0 with a log line on failure.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_save_file(
    ctx: *mut llama_context,
    filepath: *const c_char,
    seq_id: llama_seq_id,
    tokens: *const llama_token,
    n_token_count: usize,
) -> usize {
    boundary!("llama_state_seq_save_file", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // SAFETY: a NUL-terminated path per the contract.
        let p = unsafe { path(filepath) }?;
        // SAFETY: `tokens` holds `n_token_count` tokens per the contract.
        let t = unsafe { tokens_in(tokens, n_token_count) }?;
        handle
            .inner
            .state_seq_save_file(&p, seq_id, t)
            .map_err(|e| FfiError::Core(format!("error saving sequence state file: {e}")))
    })
}

/// Restores a sequence state file into `dest_seq_id` and writes its tokens to `tokens_out`
/// (room for `n_token_capacity`) and their count to `n_token_count_out`; with `tokens_out`
/// NULL only the count is reported and no state is loaded. Returns the bytes read from the
/// file; 0 with a log line, the context unchanged, on failure.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_load_file(
    ctx: *mut llama_context,
    filepath: *const c_char,
    dest_seq_id: llama_seq_id,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> usize {
    boundary!("llama_state_seq_load_file", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        // SAFETY: a NUL-terminated path per the contract.
        let p = unsafe { path(filepath) }?;
        if n_token_count_out.is_null() {
            return Err(FfiError::Null("n_token_count_out"));
        }
        let capacity = (!tokens_out.is_null()).then_some(n_token_capacity);
        let f = handle
            .inner
            .state_seq_load_file(&p, dest_seq_id, capacity)
            .map_err(|e| FfiError::Core(format!("error loading sequence state file: {e}")))?;
        if tokens_out.is_null() {
            // SAFETY: non-NULL, valid for one write per the contract.
            unsafe { *n_token_count_out = f.n_tokens };
        } else {
            // SAFETY: room for `n_token_capacity >= f.tokens.len()` tokens per the contract.
            unsafe { self::tokens_out(&f.tokens, tokens_out, n_token_count_out) }?;
        }
        Ok(f.n_read)
    })
}

/// `llama_state_seq_get_size` with flags: `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY` (only the
/// sliding-window part; the whole state for models without one, as upstream), and
/// `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE` (tensor data not counted: the context keeps it).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size_ext(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    boundary!("llama_state_seq_get_size_ext", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        handle
            .inner
            .state_seq_write(None, seq_id, flags)
            .map_err(|e| FfiError::Core(format!("error getting state size: {e}")))
    })
}

/// `llama_state_seq_get_data` with flags; with `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE` `dst`
/// gets the metadata only and the context keeps the tensor data for `seq_id` (replacing
/// what it kept for it before), as upstream keeps it in device buffers.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data_ext(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
    seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    boundary!("llama_state_seq_get_data_ext", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let c = &handle.inner;
        // SAFETY: `dst` is valid for `size` bytes per the contract.
        unsafe {
            write_into(
                dst,
                size,
                || c.state_seq_write(None, seq_id, flags),
                |out| c.state_seq_write(Some(out), seq_id, flags),
            )
        }
    })
}

/// `llama_state_seq_set_data` with flags; with `LLAMA_STATE_SEQ_FLAGS_ON_DEVICE` the tensor
/// data is the one the context kept when the state was saved with the flag.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data_ext(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
    dest_seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    boundary!("llama_state_seq_set_data_ext", 0, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        if src.is_null() {
            return Err(FfiError::Null("src"));
        }
        let mut source = RawSource {
            ptr: src,
            len: size,
            at: 0,
        };
        handle
            .inner
            .state_seq_read(&mut source, dest_seq_id, flags)
            .map_err(|e| FfiError::Core(format!("error loading state: {e}")))
    })
}
