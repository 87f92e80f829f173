//! A context's memory (its KV cache): `llama_memory_*`. The handle `llama_get_memory`
//! returns is the context itself; every call locks its KV cache. NULL handles behave as
//! upstream's (no-op, `seq_rm` true, positions -1). Sequence ids are checked as upstream's
//! cache asserts them: below `n_seq_max` with one KV stream per sequence (`kv_unified =
//! false`, `n_seq_max` > 1), below `LLAMA_MAX_SEQ` (256) with a single stream; others are
//! logged and ignored (upstream aborts the process).

use std::ffi::c_int;

use super::handles::{self, llama_context};
use super::types::*;
use super::FfiError;

/// The context behind a memory handle.
///
/// # Safety
/// `mem` must be NULL or a handle from `llama_get_memory` of a live context.
unsafe fn mem_ctx<'a>(mem: llama_memory_t) -> Result<Option<&'a llama_context>, FfiError> {
    if mem.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract, the handle is a live context.
    Ok(Some(unsafe {
        handles::context(mem as *const llama_context)
    }?))
}

/// Refuses moving positions in the KV cache of a multi-section rotary model (M-RoPE,
/// interleaved M-RoPE: four positions per token): upstream's cache aborts there
/// (`seq_add()/seq_div() is only supported for n_pos_per_embd() == 1`); ours leaves the
/// memory as it is and logs why.
fn check_shiftable(ctx: &llama_context, what: &str) -> Result<(), FfiError> {
    let model = &ctx.inner.model;
    if multi_section_kv(ctx) {
        return Err(FfiError::Invalid(format!(
            "{what} is not supported on the KV cache of a model with multi-section rotary positions ({}; upstream aborts here): the memory is unchanged",
            model.arch
        )));
    }
    Ok(())
}

/// Whether the context keeps a KV cache of a model with multi-section rotary positions
/// (upstream's `n_pos_per_embd() > 1`).
fn multi_section_kv(ctx: &llama_context) -> bool {
    let model = &ctx.inner.model;
    let rope = crate::model::arch::rope_type(&model.arch, model.hparams.rope_sections);
    let mrope = rope == crate::model::arch::ROPE_MROPE || rope == crate::model::arch::ROPE_IMROPE;
    mrope && ctx.inner.engine().kv.attn
}

/// A sequence id checked as upstream's cache asserts it.
fn seq(ctx: &llama_context, seq_id: llama_seq_id) -> Result<usize, FfiError> {
    ctx.inner
        .engine()
        .kv
        .check_seq(seq_id)
        .map_err(|e| FfiError::Invalid(e.to_string()))
}

/// Empties the memory; `data` also zeroes the cached keys and values. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_clear(mem: llama_memory_t, data: bool) {
    boundary!("llama_memory_clear", (), {
        // SAFETY: per the contract.
        if let Some(ctx) = unsafe { mem_ctx(mem) }? {
            ctx.inner.engine().kv.clear(data);
        }
        Ok(())
    })
}

/// Removes the tokens of `seq_id` (every sequence when negative) with positions in
/// [p0, p1) (p0 < 0: from 0; p1 < 0: to the end). Returns true (a KV cache can always remove
/// a partial sequence); true for NULL; false with a log line for a sequence id out of range
/// (>= n_seq_max with one KV stream per sequence, >= 256 with a single stream).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_rm(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
) -> bool {
    boundary!("llama_memory_seq_rm", false, {
        // SAFETY: per the contract.
        let Some(ctx) = unsafe { mem_ctx(mem) }? else {
            return Ok(true);
        };
        let s = if seq_id < 0 {
            None
        } else {
            Some(seq(ctx, seq_id)?)
        };
        Ok(ctx.inner.engine().kv.seq_rm(s, p0, p1))
    })
}

/// Adds `seq_id_dst` to the tokens of `seq_id_src` with positions in [p0, p1) (the cells are
/// shared, not copied) when both share a KV stream. With one stream per sequence
/// (`kv_unified = false`) the destination's stream is replaced by a copy of the source's
/// whole sequence (cells and cached rows); a bounded range there is refused with a log line
/// (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_cp(
    mem: llama_memory_t,
    seq_id_src: llama_seq_id,
    seq_id_dst: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
) {
    boundary!("llama_memory_seq_cp", (), {
        // SAFETY: per the contract.
        if let Some(ctx) = unsafe { mem_ctx(mem) }? {
            let (s, d) = (seq(ctx, seq_id_src)?, seq(ctx, seq_id_dst)?);
            ctx.inner
                .engine()
                .kv
                .seq_cp(s, d, p0, p1)
                .map_err(|e| FfiError::Invalid(e.to_string()))?;
        }
        Ok(())
    })
}

/// Removes every token that does not belong to `seq_id` from the KV stream of `seq_id`: the
/// whole cache when unified; with one stream per sequence, other sequences keep their
/// tokens, as upstream's.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_keep(mem: llama_memory_t, seq_id: llama_seq_id) {
    boundary!("llama_memory_seq_keep", (), {
        // SAFETY: per the contract.
        if let Some(ctx) = unsafe { mem_ctx(mem) }? {
            let s = seq(ctx, seq_id)?;
            ctx.inner.engine().kv.seq_keep(s);
        }
        Ok(())
    })
}

/// Adds `delta` to the positions of the tokens of `seq_id` in [p0, p1); tokens whose position
/// becomes negative are removed. The cached keys are re-rotated before the next decode.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_add(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
    delta: llama_pos,
) {
    boundary!("llama_memory_seq_add", (), {
        // SAFETY: per the contract.
        if let Some(ctx) = unsafe { mem_ctx(mem) }? {
            let s = seq(ctx, seq_id)?;
            check_shiftable(ctx, "seq_add")?;
            ctx.inner.engine().kv.seq_add(s, p0, p1, delta);
        }
        Ok(())
    })
}

/// Integer-divides the positions of the tokens of `seq_id` in [p0, p1) by `d`; `d` < 1 is
/// refused with a log line (upstream divides by it).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_div(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
    p0: llama_pos,
    p1: llama_pos,
    d: c_int,
) {
    boundary!("llama_memory_seq_div", (), {
        // SAFETY: per the contract.
        if let Some(ctx) = unsafe { mem_ctx(mem) }? {
            let s = seq(ctx, seq_id)?;
            if d < 1 {
                return Err(FfiError::Invalid(format!("divisor {d} must be >= 1")));
            }
            check_shiftable(ctx, "seq_div")?;
            ctx.inner.engine().kv.seq_div(s, p0, p1, d);
        }
        Ok(())
    })
}

/// The smallest position of `seq_id` in the memory; -1 when the sequence is empty, the handle
/// NULL or the id out of range (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_min(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
) -> llama_pos {
    boundary!("llama_memory_seq_pos_min", -1, {
        // SAFETY: per the contract.
        let Some(ctx) = unsafe { mem_ctx(mem) }? else {
            return Ok(-1);
        };
        let s = seq(ctx, seq_id)?;
        Ok(ctx.inner.engine().kv.seq_pos_min(s))
    })
}

/// The largest position of `seq_id` in the memory; -1 when the sequence is empty, the handle
/// NULL or the id out of range (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_max(
    mem: llama_memory_t,
    seq_id: llama_seq_id,
) -> llama_pos {
    boundary!("llama_memory_seq_pos_max", -1, {
        // SAFETY: per the contract.
        let Some(ctx) = unsafe { mem_ctx(mem) }? else {
            return Ok(-1);
        };
        let s = seq(ctx, seq_id)?;
        Ok(ctx.inner.engine().kv.seq_pos_max(s))
    })
}

/// Whether positions can be shifted (`llama_memory_seq_add`/`seq_div`): true for a KV cache
/// of a supported architecture, false for NULL and, as upstream's, for the KV cache of a
/// model with multi-section rotary positions (M-RoPE).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_can_shift(mem: llama_memory_t) -> bool {
    boundary!("llama_memory_can_shift", false, {
        // SAFETY: per the contract.
        let Some(ctx) = unsafe { mem_ctx(mem) }? else {
            return Ok(false);
        };
        Ok(ctx.inner.engine().kv.can_shift && !multi_section_kv(ctx))
    })
}
