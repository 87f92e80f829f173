//! Adapters: LoRA (and aLoRA) adapters, their metadata, and control vectors, as upstream's
//! src/llama-adapter.cpp. Parsing and validation live in `model::adapter`, the products in
//! the graph (`graph::builder`: `build_lora_mm`, `build_inp_embd`, `build_cvec`).

use std::ffi::c_char;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use super::handles::{self, llama_adapter_lora, llama_context, llama_model};
use super::types::*;
use super::{c_str, write_snprintf, FfiError};
use crate::model::adapter::{parse_lora, LoraAdapter};

/// Parses `bytes` as a LoRA adapter of `model` (every check of upstream's loader; the
/// tensors' types must be ones the engine computes with).
fn load_lora(model: &llama_model, bytes: &[u8]) -> Result<*mut llama_adapter_lora, FfiError> {
    let m = &model.inner;
    let shape = |name: &str| m.tensors.get(name).map(|t| t.read().layout.ne);
    let adapter = parse_lora(bytes, &m.arch, &shape, &crate::graph::kernel_api::supports)
        .map_err(|e| FfiError::Core(format!("failed to apply lora adapter: {e}")))?;
    crate::log_info!(
        "llama_adapter_lora_init_impl: loaded {} tensors from lora file",
        adapter.weights.len() * 2
    );
    Ok(llama_adapter_lora::new_boxed(model, adapter))
}

/// Loads a LoRA adapter from a GGUF file (`general.type = adapter`, `adapter.type = lora`,
/// the model's architecture, `<tensor>.lora_a` / `.lora_b` pairs shaped for the model's
/// tensors). It lives until `llama_adapter_lora_free` or until its model is freed. NULL,
/// with a log line saying why, for a missing, truncated or malformed file, an adapter of
/// another architecture or model, or tensors of a type the engine does not compute with.
/// Adapters of expert (3-D) tensors are refused: not supported by llama-hotswap yet.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init(
    model: *mut llama_model,
    path_lora: *const c_char,
) -> *mut llama_adapter_lora {
    boundary!("llama_adapter_lora_init", std::ptr::null_mut(), {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: NULL or a C string per the contract.
        let path = unsafe { c_str(path_lora, "path_lora") }?;
        crate::log_info!("llama_adapter_lora_init: loading lora adapter from '{path}' ...");
        let bytes = std::fs::read(&*path)
            .map_err(|e| FfiError::Core(format!("failed to open '{path}': {e}")))?;
        load_lora(handle, &bytes)
    })
}

/// Loads a LoRA adapter from an open `FILE *`, the GGUF starting at its current position
/// and running to the end of the file (upstream reads the tensor data at offsets from the
/// start of the file, so only a position of 0 gives the same answer there). The file is read
/// through a duplicate descriptor: its position is not moved, and it stays the caller's to
/// close. NULL on failure, as `llama_adapter_lora_init`.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_init_from_file_ptr(
    model: *mut llama_model,
    file: *mut libc::FILE,
) -> *mut llama_adapter_lora {
    boundary!(
        "llama_adapter_lora_init_from_file_ptr",
        std::ptr::null_mut(),
        {
            if file.is_null() {
                return Err(FfiError::Null("file"));
            }
            // SAFETY: NULL or a live model per the contract.
            let handle = unsafe { handles::model(model) }?;
            // SAFETY: a valid FILE * per the contract.
            let (fd, pos) = unsafe { (libc::fileno(file), libc::ftello(file)) };
            if fd < 0 || pos < 0 {
                return Err(FfiError::Invalid(
                    "FILE * has no usable descriptor or position".into(),
                ));
            }
            // SAFETY: duplicating a descriptor the host owns; we own the duplicate.
            let dup = unsafe { libc::dup(fd) };
            if dup < 0 {
                return Err(FfiError::Core(format!(
                    "dup failed: {}",
                    std::io::Error::last_os_error()
                )));
            }
            // SAFETY: `dup` is a fresh descriptor owned by nobody else.
            let mut owned = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(dup) };
            let mut bytes = Vec::new();
            // the duplicate shares the FILE's offset: read from `pos`, then put it back
            let read = owned
                .seek(SeekFrom::Start(pos as u64))
                .and_then(|_| owned.read_to_end(&mut bytes));
            let _ = owned.seek(SeekFrom::Start(pos as u64));
            read.map_err(|e| FfiError::Core(format!("failed to read the adapter: {e}")))?;
            load_lora(handle, &bytes)
        }
    )
}

/// The adapter's metadata pair number `i` (file order; upstream lists them in its hash
/// map's order), if any.
fn meta_at(a: &LoraAdapter, i: i32) -> Option<&(String, String)> {
    usize::try_from(i).ok().and_then(|i| a.meta.get(i))
}

/// Writes "" into `buf` (upstream clears the buffer on failure) and returns -1.
///
/// # Safety
/// `buf` must be NULL or valid for `buf_size` bytes of writes.
unsafe fn meta_fail(buf: *mut c_char, buf_size: usize) -> i32 {
    // SAFETY: per the caller's contract.
    unsafe { write_snprintf(buf, buf_size, b"") };
    -1
}

/// Writes the adapter's metadata value for `key` into `buf` like snprintf and returns its
/// length, or -1 (with `buf` cleared) when the adapter has no such scalar key. Array values
/// are not listed, as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str(
    adapter: *const llama_adapter_lora,
    key: *const c_char,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_adapter_meta_val_str", -1, {
        // SAFETY: NULL or a live adapter per the contract.
        let a = unsafe { handles::adapter(adapter) }?;
        // SAFETY: NULL or a C string per the contract.
        let key = unsafe { c_str(key, "key") }?;
        match a.inner.meta.iter().find(|(k, _)| *k == *key) {
            // SAFETY: `buf` is NULL or valid for `buf_size` bytes per the contract.
            Some((_, v)) => Ok(unsafe { write_snprintf(buf, buf_size, v.as_bytes()) }),
            // SAFETY: as above.
            None => Ok(unsafe { meta_fail(buf, buf_size) }),
        }
    })
}

/// The number of scalar metadata key/value pairs of the adapter (-1 for a NULL or dead
/// handle, where upstream would crash).
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_count(adapter: *const llama_adapter_lora) -> i32 {
    boundary!("llama_adapter_meta_count", -1, {
        // SAFETY: NULL or a live adapter per the contract.
        let a = unsafe { handles::adapter(adapter) }?;
        Ok(i32::try_from(a.inner.meta.len()).unwrap_or(i32::MAX))
    })
}

/// Writes the adapter's metadata key number `i` into `buf` like snprintf and returns its
/// length, or -1 (with `buf` cleared) when `i` is out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_key_by_index(
    adapter: *const llama_adapter_lora,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_adapter_meta_key_by_index", -1, {
        // SAFETY: NULL or a live adapter per the contract.
        let a = unsafe { handles::adapter(adapter) }?;
        Ok(match meta_at(&a.inner, i) {
            // SAFETY: `buf` is NULL or valid for `buf_size` bytes per the contract.
            Some((k, _)) => unsafe { write_snprintf(buf, buf_size, k.as_bytes()) },
            // SAFETY: as above.
            None => unsafe { meta_fail(buf, buf_size) },
        })
    })
}

/// Writes the adapter's metadata value number `i` into `buf` like snprintf and returns its
/// length, or -1 (with `buf` cleared) when `i` is out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_meta_val_str_by_index(
    adapter: *const llama_adapter_lora,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_adapter_meta_val_str_by_index", -1, {
        // SAFETY: NULL or a live adapter per the contract.
        let a = unsafe { handles::adapter(adapter) }?;
        Ok(match meta_at(&a.inner, i) {
            // SAFETY: `buf` is NULL or valid for `buf_size` bytes per the contract.
            Some((_, v)) => unsafe { write_snprintf(buf, buf_size, v.as_bytes()) },
            // SAFETY: as above.
            None => unsafe { meta_fail(buf, buf_size) },
        })
    })
}

/// Frees a LoRA adapter before its model is freed (adapters not freed are freed with their
/// model). NULL is a no-op; a pointer that is not a live adapter is refused with a log line.
/// Contexts that compute with the adapter keep doing so until their adapters are set again
/// (upstream leaves them a dangling pointer).
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_lora_free(adapter: *mut llama_adapter_lora) {
    boundary!("llama_adapter_lora_free", (), {
        // SAFETY: NULL or a live adapter per the contract.
        unsafe { handles::free_adapter(adapter) }
    })
}

/// The number of invocation tokens of an aLoRA adapter (`adapter.alora.invocation_tokens`;
/// 0 for a plain LoRA or a NULL adapter).
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_get_alora_n_invocation_tokens(
    adapter: *const llama_adapter_lora,
) -> u64 {
    if adapter.is_null() {
        return 0;
    }
    boundary!("llama_adapter_get_alora_n_invocation_tokens", 0, {
        // SAFETY: a live adapter per the contract.
        let a = unsafe { handles::adapter(adapter) }?;
        Ok(a.inner.alora_invocation_tokens.len() as u64)
    })
}

/// The invocation tokens of an aLoRA adapter, owned by the adapter (valid until it is
/// freed). NULL for a NULL or dead handle (upstream asserts) and for an adapter without
/// invocation tokens (upstream's empty vector's data).
#[no_mangle]
pub unsafe extern "C" fn llama_adapter_get_alora_invocation_tokens(
    adapter: *const llama_adapter_lora,
) -> *const llama_token {
    boundary!(
        "llama_adapter_get_alora_invocation_tokens",
        std::ptr::null(),
        {
            // SAFETY: NULL or a live adapter per the contract.
            let a = unsafe { handles::adapter(adapter) }?;
            let t = &a.inner.alora_invocation_tokens;
            Ok(if t.is_empty() {
                std::ptr::null()
            } else {
                t.as_ptr()
            })
        }
    )
}

/// Sets the LoRA adapters the context computes with, each with its scale (adapters with a
/// scale of 0 are left out; no adapters clears them). Nothing changes when they are the ones
/// already set. Returns 0; -1 with a log line for a NULL or dead context, a NULL array with
/// `n_adapters > 0` (upstream asserts), or an adapter that is not live or belongs to another
/// model (nothing is changed then).
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapters_lora(
    ctx: *mut llama_context,
    adapters: *mut *mut llama_adapter_lora,
    n_adapters: usize,
    scales: *mut f32,
) -> i32 {
    boundary!("llama_set_adapters_lora", -1, {
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { handles::context(ctx) }?;
        if n_adapters > 0 && (adapters.is_null() || scales.is_null()) {
            return Err(FfiError::Invalid(
                "invalid llama_set_adapters_lora call: NULL adapters or scales with n_adapters > 0"
                    .into(),
            ));
        }
        let mut list = Vec::with_capacity(n_adapters.min(1024));
        for i in 0..n_adapters {
            // SAFETY: both arrays hold `n_adapters` entries per the contract.
            let (a, s) = unsafe { (*adapters.add(i), *scales.add(i)) };
            // SAFETY: each entry must be a live adapter; checked before use.
            let a = unsafe { handles::adapter(a) }
                .map_err(|e| FfiError::Invalid(format!("adapters[{i}]: {e}")))?;
            if !std::ptr::eq(a.model, c.model) {
                return Err(FfiError::Invalid(format!(
                    "adapters[{i}] was loaded for another model"
                )));
            }
            list.push((Arc::clone(&a.inner), s));
        }
        c.inner.set_loras(&list);
        Ok(0)
    })
}

/// Applies a control vector: `data` holds `n_embd` floats per layer starting from layer 1
/// (`len` floats in all; layers past its end keep their previous direction), added to the
/// output of layers `il_start..=il_end`. NULL `data` turns it off (the directions are kept).
/// Returns 0, or -1 with a log line when `n_embd` is not the model's.
#[no_mangle]
pub unsafe extern "C" fn llama_set_adapter_cvec(
    ctx: *mut llama_context,
    data: *const f32,
    len: usize,
    n_embd: i32,
    il_start: i32,
    il_end: i32,
) -> i32 {
    boundary!("llama_set_adapter_cvec", -1, {
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { handles::context(ctx) }?;
        let data = if data.is_null() {
            None
        } else {
            // SAFETY: `data` holds `len` floats per the contract.
            Some(unsafe { std::slice::from_raw_parts(data, len) })
        };
        Ok(if c.inner.set_cvec(data, n_embd, il_start, il_end) {
            0
        } else {
            -1
        })
    })
}
