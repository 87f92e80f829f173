//! Adapters: LoRA (and aLoRA) adapters, their metadata, and control vectors. Not supported by
//! llama-hotswap yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;

use super::handles::{llama_context, llama_model};
use super::types::*;

/// Upstream: loads a LoRA adapter from a GGUF file; it lives until `llama_adapter_lora_free`
/// or until its model is freed.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init(
    model: *mut llama_model,
    path_lora: *const c_char,
) -> *mut llama_adapter_lora {
    unsupported!("llama_adapter_lora_init", std::ptr::null_mut())
}

/// Upstream: loads a LoRA adapter from an open file, reading from its current position.
/// Not supported by llama-hotswap yet: logs once and returns NULL. The file is not read and
/// stays owned (and open) by the caller.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init_from_file_ptr(
    model: *mut llama_model,
    file: *mut libc::FILE,
) -> *mut llama_adapter_lora {
    unsupported!(
        "llama_adapter_lora_init_from_file_ptr",
        std::ptr::null_mut()
    )
}

/// Upstream: writes the adapter's metadata value for `key` into `buf` like snprintf and
/// returns its length, or -1 (with `buf` cleared) on failure.
/// Not supported by llama-hotswap yet: logs once and returns -1. `buf` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str(
    adapter: *const llama_adapter_lora,
    key: *const c_char,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    unsupported!("llama_adapter_meta_val_str", -1)
}

/// Upstream: the number of metadata key/value pairs of the adapter.
/// Not supported by llama-hotswap yet: logs once and returns -1.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_count(adapter: *const llama_adapter_lora) -> i32 {
    unsupported!("llama_adapter_meta_count", -1)
}

/// Upstream: writes the adapter's metadata key number `i` into `buf` like snprintf and
/// returns its length, or -1 (with `buf` cleared) on failure.
/// Not supported by llama-hotswap yet: logs once and returns -1. `buf` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_key_by_index(
    adapter: *const llama_adapter_lora,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    unsupported!("llama_adapter_meta_key_by_index", -1)
}

/// Upstream: writes the adapter's metadata value number `i` into `buf` like snprintf and
/// returns its length, or -1 (with `buf` cleared) on failure.
/// Not supported by llama-hotswap yet: logs once and returns -1. `buf` is left untouched.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str_by_index(
    adapter: *const llama_adapter_lora,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    unsupported!("llama_adapter_meta_val_str_by_index", -1)
}

/// Upstream: frees a LoRA adapter before its model is freed.
/// Not supported by llama-hotswap yet: logs once and returns. No adapter can exist (loading
/// returns NULL); the pointer is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_free(adapter: *mut llama_adapter_lora) {
    unsupported!("llama_adapter_lora_free")
}

/// Upstream: the number of invocation tokens of an aLoRA adapter (0 for a plain LoRA).
/// Not supported by llama-hotswap yet: logs once and returns 0.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_get_alora_n_invocation_tokens(
    adapter: *const llama_adapter_lora,
) -> u64 {
    unsupported!("llama_adapter_get_alora_n_invocation_tokens", 0)
}

/// Upstream: the invocation tokens of an aLoRA adapter, owned by the adapter.
/// Not supported by llama-hotswap yet: logs once and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_get_alora_invocation_tokens(
    adapter: *const llama_adapter_lora,
) -> *const llama_token {
    unsupported!(
        "llama_adapter_get_alora_invocation_tokens",
        std::ptr::null()
    )
}

/// Upstream: sets the LoRA adapters applied by the context, each with its scale; returns 0.
/// Not supported by llama-hotswap yet: logs once and returns -1; the context's adapters are
/// unchanged and neither array is read.
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapters_lora(
    ctx: *mut llama_context,
    adapters: *mut *mut llama_adapter_lora,
    n_adapters: usize,
    scales: *mut f32,
) -> i32 {
    unsupported!("llama_set_adapters_lora", -1)
}

/// Upstream: applies a control vector (`n_embd` floats per layer, from layer 1) to layers
/// `il_start..=il_end`, or clears it when `data` is NULL; returns 0, or -1 on failure.
/// Not supported by llama-hotswap yet: logs once and returns -1; `data` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapter_cvec(
    ctx: *mut llama_context,
    data: *const f32,
    len: usize,
    n_embd: i32,
    il_start: i32,
    il_end: i32,
) -> i32 {
    unsupported!("llama_set_adapter_cvec", -1)
}
