//! Batches and decoding: `llama_batch_get_one`, `llama_batch_init`, `llama_batch_free`
//! (with upstream's allocation layout) and `llama_decode`; `llama_encode` (no supported
//! architecture has an encoder) and the extended batch API (`llama_batch_ext_*`,
//! `llama_process`) are not supported by llama-hotswap yet.

#![allow(unused_variables)] // stub parameters keep upstream's names, which the header shows

use std::ptr::{null_mut, NonNull};

use super::handles::llama_context;
use super::types::*;
use super::FfiError;

/// A batch with every field zero/NULL: what `llama_batch_init` returns on failure.
fn empty_batch() -> llama_batch {
    llama_batch {
        n_tokens: 0,
        token: null_mut(),
        embd: null_mut(),
        pos: null_mut(),
        n_seq_id: null_mut(),
        seq_id: null_mut(),
        logits: null_mut(),
    }
}

/// Allocates room for `count` values of `T` with `malloc`, as upstream does, so hosts that
/// manage batch fields with the C allocator stay compatible. At least one byte is requested,
/// so success is never NULL (glibc's `malloc(0)` behaves the same). `None` when the size
/// overflows or memory runs out.
fn malloc_array<T>(count: usize) -> Option<NonNull<T>> {
    let bytes = count.checked_mul(std::mem::size_of::<T>())?;
    // SAFETY: malloc has no preconditions; the result is checked for NULL. malloc's
    // alignment suits every type of a batch field.
    let ptr = unsafe { libc::malloc(bytes.max(1)) };
    NonNull::new(ptr.cast::<T>())
}

/// Frees every array of a batch made by [`llama_batch_init`], walking `seq_id` up to its NULL
/// sentinel, exactly as upstream's `llama_batch_free`.
///
/// # Safety
/// Each non-NULL field must come from `malloc` and not have been freed; `seq_id`, when
/// non-NULL, must hold malloc'ed rows followed by a NULL entry.
unsafe fn free_batch(batch: &llama_batch) {
    // SAFETY: per the contract every field is NULL (a no-op for `free`) or a live malloc'ed
    // block; the walk over `seq_id` stops at the NULL sentinel the contract guarantees.
    unsafe {
        libc::free(batch.token.cast());
        libc::free(batch.embd.cast());
        libc::free(batch.pos.cast());
        libc::free(batch.n_seq_id.cast());
        if !batch.seq_id.is_null() {
            let mut row = batch.seq_id;
            while !(*row).is_null() {
                libc::free((*row).cast());
                row = row.add(1);
            }
            libc::free(batch.seq_id.cast());
        }
        libc::free(batch.logits.cast());
    }
}

/// Fills `batch` with upstream's arrays for `n` tokens: `embd` (n * n_embd floats) when
/// `n_embd > 0`, otherwise `token`; then `pos`, `n_seq_id`, `seq_id` (n rows of `n_seq`
/// ids plus a NULL sentinel) and `logits`. On failure the arrays allocated so far stay in
/// `batch`, `seq_id` NULL-terminated, for [`free_batch`].
fn alloc_batch(batch: &mut llama_batch, n: usize, n_embd: usize, n_seq: usize) -> Option<()> {
    if n_embd > 0 {
        batch.embd = malloc_array::<f32>(n.checked_mul(n_embd)?)?.as_ptr();
    } else {
        batch.token = malloc_array::<llama_token>(n)?.as_ptr();
    }
    batch.pos = malloc_array::<llama_pos>(n)?.as_ptr();
    batch.n_seq_id = malloc_array::<i32>(n)?.as_ptr();
    let rows = malloc_array::<*mut llama_seq_id>(n.checked_add(1)?)?.as_ptr();
    // SAFETY: `rows` holds n + 1 pointers; entry 0 is written before the batch sees it.
    unsafe { rows.write(null_mut()) };
    batch.seq_id = rows;
    for i in 0..n {
        let row = malloc_array::<llama_seq_id>(n_seq);
        // SAFETY: i + 1 <= n, inside the n + 1 entries; writing the row (or NULL on failure)
        // and then the sentinel after it keeps the array NULL-terminated at every step.
        unsafe {
            rows.add(i).write(row.map_or(null_mut(), NonNull::as_ptr));
            if row.is_some() {
                rows.add(i + 1).write(null_mut());
            }
        }
        row?;
    }
    batch.logits = malloc_array::<i8>(n)?.as_ptr();
    Some(())
}

/// Returns a batch over the caller's `tokens` (n_tokens of them) for a single sequence: the
/// other fields are NULL, so `llama_decode` uses sequence 0, tracks positions itself and
/// outputs logits for the last token. Nothing is allocated or copied: `tokens` must outlive
/// the batch, and the batch must not be passed to `llama_batch_free`.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_get_one(
    tokens: *mut llama_token,
    n_tokens: i32,
) -> llama_batch {
    llama_batch {
        n_tokens,
        token: tokens,
        ..empty_batch()
    }
}

/// Allocates a batch for up to `n_tokens` tokens of up to `n_seq_max` sequence ids each, as
/// upstream: `embd` (n_tokens * embd floats) when `embd` != 0, otherwise `token`; `pos`,
/// `n_seq_id`, `seq_id` (NULL-terminated) and `logits` always. `n_tokens` of the result is 0
/// and the arrays are uninitialized. Free it with `llama_batch_free`. A negative argument
/// or failed allocation logs an error and returns an all-zero batch (upstream crashes).
#[no_mangle]
pub extern "C" fn llama_batch_init(n_tokens: i32, embd: i32, n_seq_max: i32) -> llama_batch {
    boundary!("llama_batch_init", empty_batch(), {
        let negative =
            |what: &str, value: i32| FfiError::Invalid(format!("{what} is negative ({value})"));
        let n = usize::try_from(n_tokens).map_err(|_| negative("n_tokens", n_tokens))?;
        let n_embd = usize::try_from(embd).map_err(|_| negative("embd", embd))?;
        let n_seq = usize::try_from(n_seq_max).map_err(|_| negative("n_seq_max", n_seq_max))?;
        let mut batch = empty_batch();
        if alloc_batch(&mut batch, n, n_embd, n_seq).is_none() {
            // SAFETY: `alloc_batch` leaves only malloc'ed arrays and a NULL-terminated
            // `seq_id` in the batch, even when it fails part-way.
            unsafe { free_batch(&batch) };
            return Err(FfiError::Core(format!(
                "out of memory allocating a batch of {n_tokens} tokens (embd {embd}, n_seq_max {n_seq_max})"
            )));
        }
        Ok(batch)
    })
}

/// Frees the arrays of a batch allocated by `llama_batch_init` (NULL fields are skipped, as
/// upstream). Only pass batches from `llama_batch_init`, once each.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_free(batch: llama_batch) {
    // SAFETY: per the API contract the batch comes from `llama_batch_init`, whose arrays are
    // malloc'ed and whose `seq_id` is NULL-terminated, and is freed only once.
    unsafe { free_batch(&batch) }
}

/// Upstream: runs the encoder over the batch (no KV cache); 0 on success, negative on error.
/// The diffusion models (dream, llada, llada-moe, rnd1) run here as in `llama_decode`: both
/// are upstream's encode for them (every token an output, attention both ways). Every other
/// architecture the engine runs is decoder-only, where upstream's encode crashes the
/// process (it builds the decoder's graph without its KV cache): returns -1 with a log line
/// naming the architecture; the batch is not read. Use `llama_decode` (with
/// `llama_set_embeddings` for embeddings).
#[no_mangle]
pub unsafe extern "C" fn llama_encode(ctx: *mut llama_context, batch: llama_batch) -> i32 {
    boundary!("llama_encode", -1, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { super::handles::context(ctx) }?;
        if handle.inner.memoryless {
            // upstream's decode of a memory-less model is this encode: the same call
            // SAFETY: the arrays hold batch.n_tokens entries per the contract.
            return match unsafe { copy_batch(&handle.inner, &batch) } {
                Ok(()) => Ok(timed_decode(handle, batch.n_tokens)),
                Err(line) => {
                    crate::log_error!("{line}");
                    crate::log_error!("encode: failed to initialize batch");
                    Ok(-1)
                }
            };
        }
        Err(FfiError::Invalid(format!(
            "model architecture '{}' has no encoder (decoder-only): use llama_decode",
            handle.inner.model.arch
        )))
    })
}

/// Evaluates the batch with the decoder: 0 on success, 1 when the KV cache has no room for
/// the batch (nothing changed), 2 when the abort callback stopped it, -1 for an invalid batch
/// (logged: empty, more than `n_batch` tokens, token ids out of range, sequence ids outside
/// [0, n_seq_max), positions that do not continue the memory, go backwards or leave gaps,
/// NULL token and embedding arrays), -3 when the model cannot be computed. NULL `pos`,
/// `seq_id`/`n_seq_id` and `logits` mean: positions continuing each sequence, sequence 0, and
/// logits for the last token only. A batch with `embd` (from `llama_batch_init(n, n_embd, ..)`)
/// and a NULL `token` feeds its n_tokens × n_embd floats to the first layer instead of the
/// token table's rows, as upstream; with both, the token ids are used.
#[no_mangle]
pub unsafe extern "C" fn llama_decode(ctx: *mut llama_context, batch: llama_batch) -> i32 {
    let ret = boundary!("llama_decode", -1, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { super::handles::context(ctx) }?;
        // SAFETY: the arrays hold batch.n_tokens entries per the contract.
        match unsafe { copy_batch(&handle.inner, &batch) } {
            Ok(()) => Ok(timed_decode(handle, batch.n_tokens)),
            Err(line) => {
                crate::log_error!("{line}");
                crate::log_error!("decode: failed to initialize batch");
                Ok(-1)
            }
        }
    });
    if ret != 0 && ret != 1 {
        crate::log_error!("llama_decode: failed to decode, ret = {ret}");
    }
    ret
}

/// Decodes the batch already in the context's intake buffers and adds a successful decode of
/// `n_tokens` to the context's performance counters (`llama_perf_context`).
fn timed_decode(handle: &super::handles::llama_context, n_tokens: i32) -> i32 {
    // LLAMA_HOTSWAP_AUTO: changed files are applied before this decode (a no-op otherwise).
    let _ = crate::hotswap::auto_reload(&handle.inner.model);
    // backend sampling: attached chains run on their sequences' output rows after the decode
    // (the lock is not held during the decode: callbacks may call into the library)
    let sampling = || handle.sampling.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(line) = sampling().before_decode(&handle.inner) {
        crate::log_error!("{line}");
        return -1;
    }
    let t0 = super::backend::llama_time_us();
    let builds = handle.inner.engine().n_graph_builds;
    let ret = handle.inner.decode();
    if ret == 0 {
        sampling().after_decode(&handle.inner);
    }
    if ret == 0 {
        let rebuilt = handle.inner.engine().n_graph_builds != builds;
        handle
            .perf
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(n_tokens, t0, rebuilt);
    }
    ret
}

/// Copies a caller's batch into the context's reused intake buffers; Err(log line) for
/// arrays that cannot be read.
///
/// # Safety
/// Each non-NULL array of `batch` must hold `batch.n_tokens` entries (and `seq_id[i]`
/// `n_seq_id[i]` ids, or one when `n_seq_id` is NULL).
unsafe fn copy_batch(ctx: &crate::context::Context, batch: &llama_batch) -> Result<(), String> {
    let n_embd = ctx.hp.n_embd;
    let mut e = ctx.engine();
    let n_batch = e.cparams.n_batch as usize;
    let n_seq_max = e.cparams.n_seq_max as i32;
    let raw = &mut e.raw;
    raw.clear();
    let n = usize::try_from(batch.n_tokens).unwrap_or(0);
    if n == 0 {
        return Ok(()); // decode reports "n_tokens == 0"
    }
    if n > n_batch {
        // decode reports it before reading anything else
        raw.tokens.resize(n, 0);
        return Ok(());
    }
    if batch.token.is_null() {
        if batch.embd.is_null() {
            return Err("init: batch has neither token ids nor embeddings".into());
        }
        // input embeddings (upstream reads them only when there are no token ids)
        raw.has_embd = true;
        raw.tokens.resize(n, 0);
        let len = n
            .checked_mul(n_embd)
            .ok_or_else(|| "init: embeddings batch too large".to_string())?;
        // SAFETY: `embd` is non-NULL and holds n_tokens * n_embd floats per the contract
        // (llama_batch_init(n, n_embd, ..)).
        raw.embd
            .extend_from_slice(unsafe { std::slice::from_raw_parts(batch.embd, len) });
    } else {
        // SAFETY: `token` is non-NULL and holds n entries per the contract.
        raw.tokens
            .extend_from_slice(unsafe { std::slice::from_raw_parts(batch.token, n) });
    }
    if !batch.pos.is_null() {
        raw.has_pos = true;
        // SAFETY: `pos` is non-NULL and holds n entries per the contract.
        raw.pos
            .extend_from_slice(unsafe { std::slice::from_raw_parts(batch.pos, n) });
    }
    if !batch.seq_id.is_null() || !batch.n_seq_id.is_null() {
        raw.has_seq = true;
        for i in 0..n {
            let k = if batch.n_seq_id.is_null() {
                1
            } else {
                // SAFETY: `n_seq_id` is non-NULL and holds n entries per the contract; i < n.
                unsafe { *batch.n_seq_id.add(i) }
            };
            if k < 0 || k > n_seq_max {
                return Err(format!(
                    "init: invalid n_seq_id[{i}] = {k} (must be in [1, n_seq_max = {n_seq_max}])"
                ));
            }
            if batch.seq_id.is_null() {
                // no ids given: sequence 0, as upstream's default
                raw.seq_flat.extend(std::iter::repeat(0).take(k as usize));
            } else {
                // SAFETY: `seq_id` is non-NULL and holds n rows per the contract; i < n.
                let row = unsafe { *batch.seq_id.add(i) };
                if row.is_null() && k > 0 {
                    return Err(format!("init: seq_id[{i}] is NULL"));
                }
                if k > 0 {
                    // SAFETY: row i is non-NULL (checked) and holds n_seq_id[i] = k ids.
                    let ids = unsafe { std::slice::from_raw_parts(row, k as usize) };
                    raw.seq_flat.extend_from_slice(ids);
                }
            }
            raw.seq_n.push(k as usize);
        }
    }
    if !batch.logits.is_null() {
        raw.has_output = true;
        // SAFETY: `logits` is non-NULL and holds n entries per the contract.
        let flags = unsafe { std::slice::from_raw_parts(batch.logits, n) };
        raw.output.extend(flags.iter().map(|&v| v != 0));
    }
    Ok(())
}

/// One entry of an extended batch.
#[derive(Clone, Debug)]
struct ExtToken {
    id: llama_token,
    pos: llama_pos,
    /// Sequence ids, ascending (upstream keeps a set).
    seqs: Vec<llama_seq_id>,
    output: bool,
}

/// What a `llama_batch_ext *` points to.
struct BatchExt {
    magic: u64,
    n_tokens_max: usize,
    n_seq_max: i32,
    n_vocab: i32,
    tokens: Vec<ExtToken>,
}

const BATCH_EXT_MAGIC: u64 = u64::from_le_bytes(*b"LHSbatch");

/// Borrows an extended batch after checking its tag.
///
/// # Safety
/// `ptr` must be NULL or a batch from `llama_batch_ext_init` that was not freed.
unsafe fn batch_ext<'a>(ptr: *mut llama_batch_ext) -> Result<&'a mut BatchExt, FfiError> {
    if ptr.is_null() {
        return Err(FfiError::Null("batch"));
    }
    // SAFETY: per the contract, a live BatchExt allocation.
    let b = unsafe { &mut *ptr.cast::<BatchExt>() };
    if b.magic != BATCH_EXT_MAGIC {
        return Err(FfiError::BadHandle("batch"));
    }
    Ok(b)
}

/// Creates an empty extended batch sized for the context (`n_batch` entries, sequence ids
/// below `n_seq_max`, token ids below the vocabulary size); free it with
/// `llama_batch_ext_free`. NULL for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_init(ctx: *mut llama_context) -> *mut llama_batch_ext {
    boundary!("llama_batch_ext_init", null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { super::handles::context(ctx) }?;
        let e = handle.inner.engine();
        let b = Box::new(BatchExt {
            magic: BATCH_EXT_MAGIC,
            n_tokens_max: e.cparams.n_batch as usize,
            n_seq_max: e.cparams.n_seq_max as i32,
            n_vocab: handle.inner.n_vocab() as i32,
            tokens: Vec::new(),
        });
        Ok(Box::into_raw(b).cast::<llama_batch_ext>())
    })
}

/// Frees an extended batch; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_free(batch: *mut llama_batch_ext) {
    boundary!("llama_batch_ext_free", (), {
        if batch.is_null() {
            return Ok(());
        }
        // SAFETY: NULL was handled; otherwise a batch of ours per the contract (tag checked).
        unsafe { batch_ext(batch) }?.magic = 0;
        // SAFETY: a live batch from `llama_batch_ext_init`'s Box, freed once.
        drop(unsafe { Box::from_raw(batch.cast::<BatchExt>()) });
        Ok(())
    })
}

/// Removes every entry.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_clear(batch: *mut llama_batch_ext) {
    boundary!("llama_batch_ext_clear", (), {
        // SAFETY: NULL or a live batch per the contract.
        unsafe { batch_ext(batch) }?.tokens.clear();
        Ok(())
    })
}

fn ext_add(b: &mut BatchExt, seq_id: llama_seq_id) -> i32 {
    if b.tokens.len() >= b.n_tokens_max {
        return -1;
    }
    if seq_id < 0 || seq_id >= b.n_seq_max {
        return -3;
    }
    b.tokens.push(ExtToken {
        id: LLAMA_TOKEN_NULL,
        pos: 0,
        seqs: vec![seq_id],
        output: false,
    });
    (b.tokens.len() - 1) as i32
}

/// Adds an entry for `seq_id` (token id and position set later); returns its index, or -1
/// (full: `n_batch` entries) or -3 (sequence id outside [0, n_seq_max)), as upstream.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add(
    batch: *mut llama_batch_ext,
    seq_id: llama_seq_id,
) -> i32 {
    boundary!("llama_batch_ext_add", -1, {
        // SAFETY: NULL or a live batch per the contract.
        Ok(ext_add(unsafe { batch_ext(batch) }?, seq_id))
    })
}

/// Adds token `id` for `seq_id`; returns its index, -1 (full), -2 (token id out of range;
/// the entry stays, without a token, as upstream) or -3 (invalid sequence id).
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add_token(
    batch: *mut llama_batch_ext,
    seq_id: llama_seq_id,
    id: llama_token,
) -> i32 {
    boundary!("llama_batch_ext_add_token", -1, {
        // SAFETY: NULL or a live batch per the contract.
        let b = unsafe { batch_ext(batch) }?;
        let idx = ext_add(b, seq_id);
        if idx < 0 {
            return Ok(idx);
        }
        if id < 0 || id >= b.n_vocab {
            return Ok(-2);
        }
        b.tokens[idx as usize].id = id;
        Ok(idx)
    })
}

/// Upstream: adds an input embedding for `seq_id`. Input embeddings are not supported by
/// llama-hotswap yet: logs and returns -2 without adding an entry; `embd.data` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add_embd(
    batch: *mut llama_batch_ext,
    seq_id: llama_seq_id,
    embd: llama_embd,
) -> i32 {
    boundary!("llama_batch_ext_add_embd", -2, {
        // SAFETY: NULL or a live batch per the contract.
        unsafe { batch_ext(batch) }?;
        Err(FfiError::Invalid(
            "input embeddings are not supported by llama-hotswap yet".into(),
        ))
    })
}

/// Adds the entry at `idx` to sequence `seq_id` as well; false for an invalid index or id.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add_seq(
    batch: *mut llama_batch_ext,
    idx: i32,
    seq_id: llama_seq_id,
) -> bool {
    boundary!("llama_batch_ext_add_seq", false, {
        // SAFETY: NULL or a live batch per the contract.
        let b = unsafe { batch_ext(batch) }?;
        if idx < 0 || idx as usize >= b.tokens.len() || seq_id < 0 || seq_id >= b.n_seq_max {
            return Ok(false);
        }
        let seqs = &mut b.tokens[idx as usize].seqs;
        if let Err(at) = seqs.binary_search(&seq_id) {
            seqs.insert(at, seq_id);
        }
        Ok(true)
    })
}

/// Upstream: sets the token embedding of the entry at `idx`. Input embeddings are not
/// supported by llama-hotswap yet: logs and returns false; `embd.data` is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_embd_token(
    batch: *mut llama_batch_ext,
    idx: i32,
    embd: llama_embd,
) -> bool {
    boundary!("llama_batch_ext_set_embd_token", false, {
        // SAFETY: NULL or a live batch per the contract.
        unsafe { batch_ext(batch) }?;
        Err(FfiError::Invalid(
            "input embeddings are not supported by llama-hotswap yet".into(),
        ))
    })
}

/// Returns false, as upstream (which leaves "state" embeddings unimplemented); `embd.data`
/// is not read.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_embd_state(
    batch: *mut llama_batch_ext,
    idx: i32,
    embd: llama_embd,
) -> bool {
    boundary!("llama_batch_ext_set_embd_state", false, {
        // SAFETY: NULL or a live batch per the contract.
        unsafe { batch_ext(batch) }?;
        Ok(false)
    })
}

fn ext_set_output(batch: *mut llama_batch_ext, idx: i32, value: bool) -> Result<bool, FfiError> {
    // SAFETY: NULL or a live batch per the callers' contract.
    let b = unsafe { batch_ext(batch) }?;
    match b.tokens.get_mut(usize::try_from(idx).unwrap_or(usize::MAX)) {
        Some(t) => {
            t.output = value;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Sets whether the entry at `idx` outputs (logits and embeddings share the flag, as
/// upstream); false for an invalid index.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_output_embd(
    batch: *mut llama_batch_ext,
    idx: i32,
    value: bool,
) -> bool {
    boundary!("llama_batch_ext_set_output_embd", false, {
        ext_set_output(batch, idx, value)
    })
}

/// Sets whether the entry at `idx` outputs logits; false for an invalid index.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_output_logits(
    batch: *mut llama_batch_ext,
    idx: i32,
    value: bool,
) -> bool {
    boundary!("llama_batch_ext_set_output_logits", false, {
        ext_set_output(batch, idx, value)
    })
}

/// Sets the position of the entry at `idx` (one value for a token entry); false for an
/// invalid index or NULL `pos`.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_pos(
    batch: *mut llama_batch_ext,
    idx: i32,
    pos: *const llama_pos,
) -> bool {
    boundary!("llama_batch_ext_set_pos", false, {
        // SAFETY: NULL or a live batch per the contract.
        let b = unsafe { batch_ext(batch) }?;
        if pos.is_null() {
            return Ok(false);
        }
        match b.tokens.get_mut(usize::try_from(idx).unwrap_or(usize::MAX)) {
            Some(t) => {
                // SAFETY: non-NULL, at least one position per the contract.
                t.pos = unsafe { *pos };
                Ok(true)
            }
            None => Ok(false),
        }
    })
}

/// Decodes an extended batch (`LLAMA_PROCESS_TYPE_DECODE`); returns as `llama_decode`
/// (positions are the ones set, 0 where unset, as upstream). Encoding runs on the diffusion
/// models (the same as their decode); on other architectures (no supported one has an
/// encoder) it and other types return -1 with a log line.
#[no_mangle]
pub unsafe extern "C" fn llama_process(
    ctx: *mut llama_context,
    r#type: LlamaProcessType,
    batch: *mut llama_batch_ext,
) -> i32 {
    let ret = boundary!("llama_process", -1, {
        // SAFETY: NULL or live handles per the contract.
        let handle = unsafe { super::handles::context(ctx) }?;
        // SAFETY: NULL or a live batch per the contract.
        let b = unsafe { batch_ext(batch) }?;
        // a memory-less (diffusion) model's encode is its decode, as upstream's
        let encode = r#type.0 == llama_process_type::LLAMA_PROCESS_TYPE_ENCODE as i32;
        if r#type.0 != llama_process_type::LLAMA_PROCESS_TYPE_DECODE as i32
            && !(encode && handle.inner.memoryless)
        {
            return Err(FfiError::Invalid(format!(
                "process type {} is not supported by llama-hotswap yet (only DECODE)",
                r#type.0
            )));
        }
        {
            let mut e = handle.inner.engine();
            let raw = &mut e.raw;
            raw.clear();
            if !b.tokens.is_empty() && b.tokens.iter().any(|t| t.id == LLAMA_TOKEN_NULL) {
                drop(e);
                crate::log_error!("init: batch has neither token ids nor embeddings");
                crate::log_error!("decode: failed to initialize batch");
                return Ok(-1);
            }
            raw.has_pos = true;
            raw.has_seq = true;
            raw.has_output = true;
            for t in &b.tokens {
                raw.tokens.push(t.id);
                raw.pos.push(t.pos);
                raw.seq_n.push(t.seqs.len());
                raw.seq_flat.extend_from_slice(&t.seqs);
                raw.output.push(t.output);
            }
        }
        let n_tokens = i32::try_from(b.tokens.len()).unwrap_or(i32::MAX);
        Ok(timed_decode(handle, n_tokens))
    });
    if ret != 0 && ret != 1 {
        crate::log_error!("llama_process: failed to process, ret = {ret}");
    }
    ret
}
