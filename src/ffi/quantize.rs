//! Model quantization (`llama_model_quantize`). Not supported by llama-hotswap yet; the
//! default parameters (`llama_model_quantize_default_params`) live with the other defaults
//! in `backend`.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_char;

use super::types::*;

/// Upstream: quantizes the GGUF model `fname_inp` into `fname_out` as `params` says; returns
/// 0 on success and 1 on failure.
/// Not supported by llama-hotswap yet: logs once and returns 1 (upstream's failure value);
/// no file is written.
#[no_mangle]
pub unsafe extern "C" fn llama_model_quantize(
    fname_inp: *const c_char,
    fname_out: *const c_char,
    params: *const llama_model_quantize_params,
) -> u32 {
    unsupported!("llama_model_quantize", 1)
}
