//! Threadpools (`llama_attach_threadpool`, `llama_detach_threadpool`). Not supported by
//! llama-hotswap yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use super::handles::llama_context;
use super::types::*;

/// Upstream: makes the context compute with the given ggml threadpools (`threadpool` for
/// single-token generation, `threadpool_batch` for batches) instead of its own.
/// Not supported by llama-hotswap yet: logs once and returns. Nothing is attached; the
/// threadpools stay owned by the caller and are never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn llama_attach_threadpool(
    ctx: *mut llama_context,
    threadpool: ggml_threadpool_t,
    threadpool_batch: ggml_threadpool_t,
) {
    unsupported!("llama_attach_threadpool")
}

/// Upstream: detaches the threadpools set with `llama_attach_threadpool`, so the context
/// goes back to its own.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_detach_threadpool(ctx: *mut llama_context) {
    unsupported!("llama_detach_threadpool")
}
