//! Models built from user-provided metadata (`llama_model_init_from_user`) and model saving
//! (`llama_model_save_to_file`). Not supported by llama-hotswap yet.

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

/// Upstream: writes the model (metadata and tensors) to a GGUF file at `path_model`.
/// Not supported by llama-hotswap yet: logs once and returns without writing anything.
#[no_mangle]
pub unsafe extern "C" fn llama_model_save_to_file(
    model: *const llama_model,
    path_model: *const c_char,
) {
    unsupported!("llama_model_save_to_file")
}
