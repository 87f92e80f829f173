//! Model quantization (`llama_model_quantize`); the default parameters
//! (`llama_model_quantize_default_params`) live with the other defaults in `backend`.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::model::read_overrides;
use super::types::*;
use super::FfiError;
use crate::gguf::GgmlType as Type;
use crate::quantize::{quantize_model, QuantizeParams};

/// A path argument, byte for byte.
///
/// # Safety
/// `ptr` must be NULL or NUL-terminated.
unsafe fn c_path(ptr: *const c_char, what: &'static str) -> Result<PathBuf, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// A `ggml_type` parameter where `GGML_TYPE_COUNT` (or more) means "not set".
fn optional_type(id: i32, what: &str) -> Result<Option<Type>, FfiError> {
    if id >= crate::gguf::GGML_TYPE_COUNT as i32 {
        return Ok(None);
    }
    Type::from_id(id)
        .map(Some)
        .ok_or_else(|| FfiError::Invalid(format!("{what}: invalid ggml_type {id}")))
}

/// Reads `llama_model_quantize_params` into the core's parameters.
///
/// # Safety
/// The pointers in `p` must be NULL or valid terminated arrays as `llama.h` documents.
unsafe fn read_params(p: &llama_model_quantize_params) -> Result<QuantizeParams, FfiError> {
    let mut imatrix = None;
    if !p.imatrix.is_null() {
        let mut map = HashMap::new();
        for i in 0.. {
            // SAFETY: terminated by an entry with a NULL name; we stop there.
            let e = unsafe { &*p.imatrix.add(i) };
            if e.name.is_null() {
                break;
            }
            // SAFETY: a NUL-terminated name.
            let name = unsafe { CStr::from_ptr(e.name) }
                .to_string_lossy()
                .into_owned();
            let values = if e.size == 0 {
                Vec::new()
            } else if e.data.is_null() {
                return Err(FfiError::Null("imatrix data"));
            } else {
                // SAFETY: `data` holds `size` floats per the caller's contract.
                unsafe { std::slice::from_raw_parts(e.data, e.size) }.to_vec()
            };
            map.insert(name, values);
        }
        imatrix = Some(map);
    }
    let mut tensor_types = Vec::new();
    if !p.tt_overrides.is_null() {
        for i in 0.. {
            // SAFETY: terminated by an entry with a NULL pattern.
            let e = unsafe { &*p.tt_overrides.add(i) };
            if e.pattern.is_null() {
                break;
            }
            // SAFETY: a NUL-terminated pattern.
            let pattern = unsafe { CStr::from_ptr(e.pattern) }
                .to_string_lossy()
                .into_owned();
            let ty = Type::from_id(e.r#type.0).ok_or_else(|| {
                FfiError::Invalid(format!(
                    "tensor type override '{pattern}': invalid type {}",
                    e.r#type.0
                ))
            })?;
            tensor_types.push((pattern, ty));
        }
    }
    let mut prune_layers = Vec::new();
    if !p.prune_layers.is_null() {
        for i in 0.. {
            // SAFETY: terminated by -1.
            let v = unsafe { *p.prune_layers.add(i) };
            if v == -1 {
                break;
            }
            prune_layers.push(v);
        }
    }
    Ok(QuantizeParams {
        nthread: p.nthread,
        ftype: p.ftype.0,
        output_tensor_type: optional_type(p.output_tensor_type.0, "output_tensor_type")?,
        token_embedding_type: optional_type(p.token_embedding_type.0, "token_embedding_type")?,
        allow_requantize: p.allow_requantize,
        quantize_output_tensor: p.quantize_output_tensor,
        only_copy: p.only_copy,
        pure: p.pure,
        keep_split: p.keep_split,
        dry_run: p.dry_run,
        imatrix,
        // SAFETY: NULL or a list terminated by an empty key, per llama.h.
        kv_overrides: unsafe { read_overrides(p.kv_overrides) }?,
        tensor_types,
        prune_layers,
        max_buf_size: p.max_buf_size,
    })
}

/// Quantizes the GGUF model `fname_inp` into `fname_out` as `params` says (type mix of
/// `params.ftype`, output/token-embedding types, imatrix, per-tensor type overrides, pruned
/// layers, kv overrides, dry run); the file is byte-identical to upstream's. Returns 0 on
/// success and 1 on failure (logged; no partial output file is left). Split input models and
/// the grid IQ types (IQ1_*, IQ2_*, IQ3_*) as targets are refused for now.
#[no_mangle]
pub unsafe extern "C" fn llama_model_quantize(
    fname_inp: *const c_char,
    fname_out: *const c_char,
    params: *const llama_model_quantize_params,
) -> u32 {
    boundary!("llama_model_quantize", 1, {
        // SAFETY: NUL-terminated paths per the caller's contract.
        let input = unsafe { c_path(fname_inp, "fname_inp") }?;
        // SAFETY: as above.
        let output = unsafe { c_path(fname_out, "fname_out") }?;
        if params.is_null() {
            return Err(FfiError::Null("params"));
        }
        // SAFETY: non-NULL; the caller passes a valid parameter struct.
        let p = unsafe { read_params(&*params) }?;
        quantize_model(&input, &output, &p)
            .map_err(|e| FfiError::Core(format!("failed to quantize: {e}")))?;
        Ok(0)
    })
}
