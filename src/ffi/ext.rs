//! ==== llama-hotswap extensions ====
//! Functions upstream llama.cpp lacks. They all start with `llama_ext_`, except
//! `llama_reload_changed_tensors`, which keeps ik_llama.cpp's name.

use std::ffi::{c_char, c_void};

use super::handles::{self, llama_model};
use super::{c_str, FfiError};

/// ==== llama-hotswap extensions (not in upstream llama.h) ====
///
/// Copies the current bytes of tensor `name` (from wherever they live) into `dst`.
/// Returns the tensor's byte count, or -1 when the model or name is NULL, the tensor does not
/// exist, holds no data (`no_alloc`), or `dst_size` is smaller than the tensor (nothing is
/// written then).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_tensor_read(
    model: *const llama_model,
    name: *const c_char,
    dst: *mut c_void,
    dst_size: usize,
) -> i64 {
    boundary!("llama_ext_tensor_read", -1, {
        // SAFETY: NULL or a live model / C string per the contract.
        let handle = unsafe { handles::model(model) }?;
        let name = unsafe { c_str(name, "name") }?;
        let tensor = handle
            .inner
            .tensors
            .get(&name)
            .ok_or_else(|| FfiError::Invalid(format!("no tensor named '{name}'")))?;
        let state = tensor.read();
        let len = usize::try_from(state.layout.nbytes)
            .map_err(|_| FfiError::Invalid(format!("tensor '{name}' is too large")))?;
        if matches!(state.data, crate::model::tensors::TensorData::Unallocated) {
            return Err(FfiError::Invalid(format!(
                "tensor '{name}' holds no data (no_alloc)"
            )));
        }
        if dst.is_null() {
            return Err(FfiError::Null("dst"));
        }
        if dst_size < len {
            return Err(FfiError::Invalid(format!(
                "tensor '{name}' needs {len} bytes, dst_size is {dst_size}"
            )));
        }
        // SAFETY: `dst` is valid for writes of `dst_size >= len` bytes per the contract.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        state
            .read_into(out)
            .map_err(|e| FfiError::Core(format!("tensor '{name}': {e}")))?;
        Ok(len as i64)
    })
}
