//! Models built from user-provided metadata (`llama_model_init_from_user`, not supported by
//! llama-hotswap yet) and model saving (`llama_model_save_to_file`).

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::{c_char, c_void};

use super::handles::llama_model;
use super::types::*;

/// Upstream: creates a model from GGUF metadata, calling `set_tensor_data(tensor,
/// set_tensor_data_ud)` to fill each tensor (tensors are F32 unless the metadata says
/// otherwise).
/// Not supported by llama-hotswap yet: logs once and returns NULL. `metadata` stays owned by
/// the caller, and `set_tensor_data` is never called.
#[no_mangle]
pub unsafe extern "C" fn llama_model_init_from_user(
    metadata: *mut gguf_context,
    set_tensor_data: llama_model_set_tensor_data_t,
    set_tensor_data_ud: *mut c_void,
    params: llama_model_params,
) -> *mut llama_model {
    unsupported!("llama_model_init_from_user", std::ptr::null_mut())
}

/// Writes the model as it is now (hot-swapped tensors included) to one GGUF file at
/// `path_model`: every tensor with its current type, shape and bytes, and the key/value
/// metadata of the model's first file (`split.*` dropped), so the file loads into the same
/// model in either library. Upstream regenerates the metadata from its hyperparameters
/// instead (see docs/dropin.md). Written to a temporary file beside `path_model` and renamed
/// into place; on failure (NULL arguments, a `no_alloc` model, an unwritable path) nothing is
/// left there and a log line says why (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_model_save_to_file(
    model: *const llama_model,
    path_model: *const c_char,
) {
    boundary!("llama_model_save_to_file", (), {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { super::handles::model(model) }?;
        // SAFETY: a C string per the contract (checked for NULL).
        let path = unsafe { super::c_str(path_model, "path_model") }?;
        let n =
            crate::model::save::save_to_file(&handle.inner, std::path::Path::new(path.as_ref()))
                .map_err(|e| super::FfiError::Core(e.to_string()))?;
        crate::log_info!("llama_model_save_to_file: {n} tensors written to {path}");
        Ok(())
    })
}
