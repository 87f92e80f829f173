//! State and sessions: saving and restoring a context's state (logits, embeddings, memory),
//! whole or per sequence, in memory or in files (`llama_state_*`, and upstream's deprecated
//! aliases). Not supported by llama-hotswap yet. No stub writes to a buffer or out-pointer.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;

use super::handles::llama_context;
use super::types::*;

/// Upstream: the size in bytes of the context's whole state, for saving.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_size(ctx: *mut llama_context) -> usize {
    unsupported!("llama_state_get_size", 0)
}

/// Upstream: deprecated alias of `llama_state_get_size`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_get_state_size(ctx: *mut llama_context) -> usize {
    unsupported!("llama_get_state_size", 0)
}

/// Upstream: copies the context's state into `dst` (`size` bytes); returns the bytes copied.
/// Not supported by llama-hotswap yet: logs once and returns 0; `dst` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_data(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
) -> usize {
    unsupported!("llama_state_get_data", 0)
}

/// Upstream: deprecated form of `llama_state_get_data` without a size.
/// Not supported by llama-hotswap yet: logs once and returns 0; `dst` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_copy_state_data(ctx: *mut llama_context, dst: *mut u8) -> usize {
    unsupported!("llama_copy_state_data", 0)
}

/// Upstream: restores the context's state from `src` (`size` bytes); returns the bytes read.
/// Not supported by llama-hotswap yet: logs once and returns 0; `src` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_state_set_data(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
) -> usize {
    unsupported!("llama_state_set_data", 0)
}

/// Upstream: deprecated form of `llama_state_set_data` without a size.
/// Not supported by llama-hotswap yet: logs once and returns 0; `src` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_set_state_data(ctx: *mut llama_context, src: *const u8) -> usize {
    unsupported!("llama_set_state_data", 0)
}

/// Upstream: restores the context's state from a session file, writing its prompt tokens to
/// `tokens_out` (up to `n_token_capacity`) and their count to `n_token_count_out`.
/// Not supported by llama-hotswap yet: logs once and returns false; nothing is read and
/// neither out-pointer is written.
#[no_mangle]
pub unsafe extern "C" fn llama_state_load_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> bool {
    unsupported!("llama_state_load_file", false)
}

/// Upstream: deprecated alias of `llama_state_load_file`.
/// Not supported by llama-hotswap yet: logs once and returns false; neither out-pointer is
/// written.
#[no_mangle]
pub unsafe extern "C" fn llama_load_session_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> bool {
    unsupported!("llama_load_session_file", false)
}

/// Upstream: saves the context's state and the prompt `tokens` to a session file.
/// Not supported by llama-hotswap yet: logs once and returns false; no file is written.
#[no_mangle]
pub unsafe extern "C" fn llama_state_save_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens: *const llama_token,
    n_token_count: usize,
) -> bool {
    unsupported!("llama_state_save_file", false)
}

/// Upstream: deprecated alias of `llama_state_save_file`.
/// Not supported by llama-hotswap yet: logs once and returns false; no file is written.
#[no_mangle]
pub unsafe extern "C" fn llama_save_session_file(
    ctx: *mut llama_context,
    path_session: *const c_char,
    tokens: *const llama_token,
    n_token_count: usize,
) -> bool {
    unsupported!("llama_save_session_file", false)
}

/// Upstream: the exact size in bytes of the state of sequence `seq_id`.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
) -> usize {
    unsupported!("llama_state_seq_get_size", 0)
}

/// Upstream: copies the state of sequence `seq_id` into `dst`; returns the bytes copied.
/// Not supported by llama-hotswap yet: logs once and returns 0; `dst` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
    seq_id: llama_seq_id,
) -> usize {
    unsupported!("llama_state_seq_get_data", 0)
}

/// Upstream: restores a sequence state from `src` into `dest_seq_id`; returns the bytes
/// read, 0 on failure.
/// Not supported by llama-hotswap yet: logs once and returns 0 (upstream's failure value);
/// `src` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
    dest_seq_id: llama_seq_id,
) -> usize {
    unsupported!("llama_state_seq_set_data", 0)
}

/// Upstream: saves the state of sequence `seq_id` and its `tokens` to a file; returns the
/// bytes written, 0 on failure.
/// Not supported by llama-hotswap yet: logs once and returns 0; no file is written.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_save_file(
    ctx: *mut llama_context,
    filepath: *const c_char,
    seq_id: llama_seq_id,
    tokens: *const llama_token,
    n_token_count: usize,
) -> usize {
    unsupported!("llama_state_seq_save_file", 0)
}

/// Upstream: restores a sequence state from a file into `dest_seq_id` (only counting its
/// tokens when `tokens_out` is NULL); returns the bytes read, 0 on failure.
/// Not supported by llama-hotswap yet: logs once and returns 0; nothing is read and neither
/// out-pointer is written.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_load_file(
    ctx: *mut llama_context,
    filepath: *const c_char,
    dest_seq_id: llama_seq_id,
    tokens_out: *mut llama_token,
    n_token_capacity: usize,
    n_token_count_out: *mut usize,
) -> usize {
    unsupported!("llama_state_seq_load_file", 0)
}

/// Upstream: `llama_state_seq_get_size` with `LLAMA_STATE_SEQ_FLAGS_*` flags.
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size_ext(
    ctx: *mut llama_context,
    seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    unsupported!("llama_state_seq_get_size_ext", 0)
}

/// Upstream: `llama_state_seq_get_data` with `LLAMA_STATE_SEQ_FLAGS_*` flags.
/// Not supported by llama-hotswap yet: logs once and returns 0; `dst` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data_ext(
    ctx: *mut llama_context,
    dst: *mut u8,
    size: usize,
    seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    unsupported!("llama_state_seq_get_data_ext", 0)
}

/// Upstream: `llama_state_seq_set_data` with `LLAMA_STATE_SEQ_FLAGS_*` flags; 0 on failure.
/// Not supported by llama-hotswap yet: logs once and returns 0; `src` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data_ext(
    ctx: *mut llama_context,
    src: *const u8,
    size: usize,
    dest_seq_id: llama_seq_id,
    flags: llama_state_seq_flags,
) -> usize {
    unsupported!("llama_state_seq_set_data_ext", 0)
}
