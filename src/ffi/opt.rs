//! Training (`llama_opt_*`). Only the parameter filter `llama_opt_param_filter_all` works;
//! training itself is not supported by llama-hotswap yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_void;

use super::handles::{llama_context, llama_model};
use super::types::*;

/// The `llama_opt_param_filter` that marks every tensor trainable: always returns true, as
/// upstream. Neither argument is read; both may be NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_opt_param_filter_all(
    tensor: *const ggml_tensor,
    userdata: *mut c_void,
) -> bool {
    true
}

/// Upstream: prepares `lctx` for training the parameters of `model` selected by
/// `lopt_params.param_filter`, with the optimizer `lopt_params` describes.
/// Not supported by llama-hotswap yet: logs once and returns; no callback in `lopt_params`
/// is called.
#[no_mangle]
pub unsafe extern "C" fn llama_opt_init(
    lctx: *mut llama_context,
    model: *mut llama_model,
    lopt_params: llama_opt_params,
) {
    unsupported!("llama_opt_init")
}

/// Upstream: runs one training epoch over `dataset` (data before `idata_split` trains, the
/// rest evaluates), accumulating into the results and calling the callbacks per batch.
/// Not supported by llama-hotswap yet: logs once and returns; the results are not touched
/// and no callback is called.
#[no_mangle]
pub unsafe extern "C" fn llama_opt_epoch(
    lctx: *mut llama_context,
    dataset: ggml_opt_dataset_t,
    result_train: ggml_opt_result_t,
    result_eval: ggml_opt_result_t,
    idata_split: i64,
    callback_train: ggml_opt_epoch_callback,
    callback_eval: ggml_opt_epoch_callback,
) {
    unsupported!("llama_opt_epoch")
}
