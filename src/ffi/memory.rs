//! A context's memory (KV cache or recurrent state): `llama_memory_*`. Not supported by
//! llama-hotswap yet (no context has memory: `llama_get_memory` returns NULL).

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ffi::c_int;

use super::types::*;

/// Upstream: clears the memory's metadata, and its data buffers too when `data` is true.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_clear(mem: llama_memory_t, data: bool) {
    unsupported!("llama_memory_clear")
}

/// Upstream: removes the tokens of `seq_id` (any sequence if negative) with positions in
/// [p0, p1); returns false if a partial sequence cannot be removed.
/// Not supported by llama-hotswap yet: logs once and returns false.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_rm(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
) -> bool {
    unsupported!("llama_memory_seq_rm", false)
}

/// Upstream: copies the tokens of `seq_id_src` with positions in [p0, p1) to `seq_id_dst`.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_cp(
    mem: llama_memory_t,
    seq_id_src: llama_seq_id,
    seq_id_dst: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
) {
    unsupported!("llama_memory_seq_cp")
}

/// Upstream: removes all tokens that do not belong to `seq_id`.
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_keep(mem: llama_memory_t, seq_id: llama_seq_id) {
    unsupported!("llama_memory_seq_keep")
}

/// Upstream: adds `delta` to the positions of the tokens of `seq_id` in [p0, p1).
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_add(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
    delta: llama_pos,
) {
    unsupported!("llama_memory_seq_add")
}

/// Upstream: divides the positions of the tokens of `seq_id` in [p0, p1) by `d` (> 1).
/// Not supported by llama-hotswap yet: logs once and returns.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_div(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
    d: c_int,
) {
    unsupported!("llama_memory_seq_div")
}

/// Upstream: the smallest position of `seq_id` in the memory, or -1 if the sequence is empty.
/// Not supported by llama-hotswap yet: logs once and returns -1 (as for an empty sequence).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_min(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
) -> llama_pos {
    unsupported!("llama_memory_seq_pos_min", -1)
}

/// Upstream: the largest position of `seq_id` in the memory, or -1 if the sequence is empty.
/// Not supported by llama-hotswap yet: logs once and returns -1 (as for an empty sequence).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_max(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
) -> llama_pos {
    unsupported!("llama_memory_seq_pos_max", -1)
}

/// Upstream: whether the memory supports shifting positions (`llama_memory_seq_add`).
/// Not supported by llama-hotswap yet: logs once and returns false.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_can_shift(mem: llama_memory_t) -> bool {
    unsupported!("llama_memory_can_shift", false)
}
