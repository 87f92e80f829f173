//! Threadpools (`llama_attach_threadpool`, `llama_detach_threadpool`). llama-hotswap computes
//! on its own workers; an attached ggml threadpool caps how many of them a decode uses, as the
//! pool's thread count caps `n_threads` in upstream's CPU backend.

use super::device::{threadpool_n_threads, threadpool_pause};
use super::handles::{self, llama_context};
use super::types::*;

/// Makes the context compute with at most the thread count of the given ggml threadpools
/// (`threadpool` for single-token decodes, `threadpool_batch` for batches, `threadpool` when
/// it is NULL), as upstream's CPU backend runs a graph on at most the pool's threads.
/// llama-hotswap runs the work on its own workers, that many; the pools stay the caller's and are only asked their count (libggml-cpu's
/// `ggml_threadpool_get_n_threads`) and paused (`ggml_threadpool_pause`: their threads sleep
/// instead of polling; libggml-cpu resumes a pool when a graph is computed on it). Where that getter is missing (libggml-cpu of upstream's
/// pinned commit declares it but does not export it) the count cannot be read: one log line,
/// and the context computes with its own thread counts (the same as the pool's when the
/// program made the pool with its `n_threads`, as common and llama-bench do).
#[no_mangle]
pub unsafe extern "C" fn llama_attach_threadpool(
    ctx: *mut llama_context,
    threadpool: ggml_threadpool_t,
    threadpool_batch: ggml_threadpool_t,
) {
    boundary!("llama_attach_threadpool", (), {
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { handles::context(ctx) }?;
        let batch = if threadpool_batch.is_null() {
            threadpool
        } else {
            threadpool_batch
        };
        let count = |pool: ggml_threadpool_t| -> Option<i32> {
            if pool.is_null() {
                return None;
            }
            // SAFETY: a pool made by libggml-cpu per the contract.
            let n = unsafe { threadpool_n_threads(pool) };
            if n.is_none() {
                crate::log_warn!(
                    "llama_attach_threadpool: accepted, but the pool's thread count cannot be read (libggml-cpu exports no ggml_threadpool_get_n_threads at this version): llama-hotswap computes on its own workers with the context's thread counts"
                );
            }
            n.filter(|&n| n > 0)
        };
        let (single, batched) = (count(threadpool), count(batch));
        // The pools' threads would otherwise poll for graphs that never come (ours compute on
        // our workers), taking a core from them at each attach on a small machine (llama-bench
        // attaches a fresh pool per test). Paused, they sleep; libggml-cpu resumes a paused
        // pool itself if the program computes a graph of its own on it.
        for pool in [threadpool, batch] {
            // SAFETY: NULL skipped; otherwise a pool made by libggml-cpu per the contract.
            if !pool.is_null() && !unsafe { threadpool_pause(pool) } {
                break;
            }
        }
        crate::log_info!(
            "llama_attach_threadpool: computing with at most {} thread(s) per token, {} per batch (the pools' counts; llama-hotswap's own workers)",
            single.map_or("the context's".to_string(), |n| n.to_string()),
            batched.map_or("the context's".to_string(), |n| n.to_string())
        );
        c.inner.set_pool_threads(single, batched);
        Ok(())
    })
}

/// Detaches the threadpools set with `llama_attach_threadpool`: the context computes with
/// its own thread counts (`n_threads`, `n_threads_batch`) again.
#[no_mangle]
pub unsafe extern "C" fn llama_detach_threadpool(ctx: *mut llama_context) {
    boundary!("llama_detach_threadpool", (), {
        // SAFETY: NULL or a live context per the contract.
        let c = unsafe { handles::context(ctx) }?;
        c.inner.set_pool_threads(None, None);
        Ok(())
    })
}
