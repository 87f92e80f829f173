//! Chat templates: `llama_chat_apply_template`, `llama_chat_builtin_templates` (core:
//! `crate::chat`). Output and return values are upstream's; where upstream crashes or aborts
//! (NULL messages, roles or contents; a message count no array can hold) these return -1 with
//! a log line.

use std::ffi::{c_char, CStr};

use super::types::*;
use super::FfiError;
use crate::chat::{self, Message};

/// Apply chat template. Inspired by hf apply_chat_template() on python.
///
/// Not a Jinja engine: `tmpl` (NULL means "chatml") is either the name of a built-in
/// template (`llama_chat_builtin_templates`) or a raw Jinja template from which one of them
/// is recognised by marker substrings, as upstream does.
/// `chat`: `n_msg` messages (may be NULL when `n_msg` is 0); `add_ass`: end with the
/// assistant's turn prefix. Writes up to `length` bytes of the formatted prompt to `buf` as
/// `strncpy` does (NUL-terminated and zero-padded only when it fits).
/// Returns the total length of the formatted prompt, also when `buf` is too small (then call
/// again with a larger buffer), or -1 when no built-in template matches `tmpl`, `chat` or a
/// role or content pointer is NULL, `n_msg` is larger than any array can be, or the prompt
/// would exceed INT32_MAX bytes (upstream crashes or aborts on these).
#[no_mangle]
pub unsafe extern "C" fn llama_chat_apply_template(
    tmpl: *const c_char,
    chat: *const llama_chat_message,
    n_msg: usize,
    add_ass: bool,
    buf: *mut c_char,
    length: i32,
) -> i32 {
    boundary!("llama_chat_apply_template", -1, {
        let tmpl_bytes: &[u8] = if tmpl.is_null() {
            b"chatml"
        } else {
            // SAFETY: non-NULL, and a NUL-terminated string per the API contract.
            unsafe { CStr::from_ptr(tmpl) }.to_bytes()
        };
        let Some(template) = chat::detect(tmpl_bytes) else {
            return Err(FfiError::Invalid(format!(
                "no built-in chat template matches the template given ({} bytes, starting {:?})",
                tmpl_bytes.len(),
                String::from_utf8_lossy(&tmpl_bytes[..tmpl_bytes.len().min(40)])
            )));
        };
        // SAFETY: `chat` is NULL or holds `n_msg` messages of C strings per the API contract.
        let messages = unsafe { borrow_messages(chat, n_msg) }?;
        let formatted = chat::apply(template, &messages, add_ass);
        let total = i32::try_from(formatted.len()).map_err(|_| {
            FfiError::Invalid(format!(
                "the formatted chat is {} bytes, more than INT32_MAX",
                formatted.len()
            ))
        })?;
        if !buf.is_null() && length > 0 {
            let capacity = length as usize; // length > 0
            let n = formatted.len().min(capacity);
            // SAFETY: `buf` is valid for `length` bytes of writes per the API contract; n and
            // the zero padding stay within `capacity`.
            unsafe {
                std::ptr::copy_nonoverlapping(formatted.as_ptr(), buf.cast::<u8>(), n);
                std::ptr::write_bytes(buf.cast::<u8>().add(n), 0, capacity - n);
            }
        }
        Ok(total)
    })
}

/// Borrows the caller's messages as byte slices, refusing NULL pointers.
///
/// # Safety
/// `chat` must be NULL or point to `n_msg` messages whose non-NULL strings are NUL-terminated
/// and outlive the borrow.
unsafe fn borrow_messages<'a>(
    chat: *const llama_chat_message,
    n_msg: usize,
) -> Result<Vec<Message<'a>>, FfiError> {
    if n_msg == 0 {
        return Ok(Vec::new());
    }
    if chat.is_null() {
        return Err(FfiError::Invalid(format!(
            "chat is NULL but n_msg is {n_msg}"
        )));
    }
    if n_msg > isize::MAX as usize / std::mem::size_of::<llama_chat_message>() {
        return Err(FfiError::Invalid(format!(
            "n_msg {n_msg} is larger than any array of messages can be"
        )));
    }
    // SAFETY: non-NULL, `n_msg` elements per the caller's contract, size checked above.
    let raw = unsafe { std::slice::from_raw_parts(chat, n_msg) };
    raw.iter()
        .enumerate()
        .map(|(i, m)| {
            if m.role.is_null() {
                return Err(FfiError::Invalid(format!("message {i}: role is NULL")));
            }
            if m.content.is_null() {
                return Err(FfiError::Invalid(format!("message {i}: content is NULL")));
            }
            // SAFETY: non-NULL and NUL-terminated per the caller's contract.
            let (role, content) = unsafe {
                (
                    CStr::from_ptr(m.role).to_bytes(),
                    CStr::from_ptr(m.content).to_bytes(),
                )
            };
            Ok(Message { role, content })
        })
        .collect()
}

/// Get list of built-in chat templates.
///
/// Writes the names of the first `len` built-in templates (static strings, in upstream's
/// order) to `output` and returns how many there are in all (54); `output` may be NULL when
/// `len` is 0. Returns -1 when `output` is NULL and `len` is not 0.
#[no_mangle]
pub unsafe extern "C" fn llama_chat_builtin_templates(
    output: *mut *const c_char,
    len: usize,
) -> i32 {
    boundary!("llama_chat_builtin_templates", -1, {
        let names = &chat::BUILTIN_TEMPLATES;
        let n = len.min(names.len());
        if n > 0 {
            if output.is_null() {
                return Err(FfiError::Invalid(format!(
                    "output is NULL but len is {len}"
                )));
            }
            // SAFETY: `output` is valid for `len` >= n pointer writes per the API contract.
            let out = unsafe { std::slice::from_raw_parts_mut(output, n) };
            for (slot, (name, _)) in out.iter_mut().zip(names.iter()) {
                *slot = name.as_ptr();
            }
        }
        Ok(names.len() as i32)
    })
}
