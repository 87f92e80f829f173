//! ==== llama-hotswap extensions ====
//! Functions upstream llama.cpp lacks. They all start with `llama_ext_`, except
//! `llama_reload_changed_tensors`, which keeps ik_llama.cpp's name.

use std::ffi::{c_char, c_void};

use super::handles::{self, llama_context, llama_model};
use super::types::{ggml_backend_buffer_type_t, ggml_backend_dev_t};
use super::{c_str, write_snprintf, FfiError};

/// ==== llama-hotswap extensions (not in upstream llama.h) ====
///
/// Copies the current bytes of tensor `name` (from wherever they live) into `dst`.
/// Returns the tensor's byte count, or -1 when the model or name is NULL, the tensor does not
/// exist, holds no data (`no_alloc`, or bytes lost to an in-place truncation of its mapped file,
/// until a reload brings them back), or `dst_size` is smaller than the tensor (nothing is
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
        // SAFETY: as above: a C string per the contract.
        let name = unsafe { c_str(name, "name") }?;
        let tensor = handle
            .inner
            .tensors
            .get(&name)
            .ok_or_else(|| FfiError::Invalid(format!("no tensor named '{name}'")))?;
        let state = tensor.read();
        let len = usize::try_from(state.layout.nbytes)
            .map_err(|_| FfiError::Invalid(format!("tensor '{name}' is too large")))?;
        if state.lost {
            return Err(FfiError::Invalid(format!(
                "tensor '{name}' lost its bytes (its mapped file was truncated in place); \
                 reload a complete file"
            )));
        }
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

/// `llama_ext_tensor_info.buffer`: no storage (`no_alloc`).
pub const LLAMA_EXT_BUFFER_NONE: i32 = 0;
/// `llama_ext_tensor_info.buffer`: a view of a read-only file mapping (CPU).
pub const LLAMA_EXT_BUFFER_MAPPED: i32 = 1;
/// `llama_ext_tensor_info.buffer`: owned host memory (CPU).
pub const LLAMA_EXT_BUFFER_HOST: i32 = 2;
/// `llama_ext_tensor_info.buffer`: a buffer on a GPU.
pub const LLAMA_EXT_BUFFER_DEVICE: i32 = 3;
/// `llama_ext_tensor_info.buffer`: split by rows across GPUs (split mode ROW).
pub const LLAMA_EXT_BUFFER_ROW_SPLIT: i32 = 4;

/// ==== llama-hotswap extensions (not in upstream llama.h) ====
///
/// Where one tensor is and what it is, filled by `llama_ext_tensor_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct llama_ext_tensor_info {
    /// The current `enum ggml_type` value (changes when hot-swap retypes the tensor).
    pub r#type: i32,
    /// `blk.N` → N; -1 for input, output and global tensors.
    pub layer: i32,
    /// Shape (ggml order, unused dimensions 1).
    pub ne: [i64; 4],
    /// Bytes of the whole tensor in its current type.
    pub nbytes: u64,
    /// Index of the device holding it (as `ggml_backend_dev_get`); for a row split, the
    /// device of its first slice. Without storage (`no_alloc`, a dry run) the device the
    /// placement chose (-1 for a row split).
    pub device: i32,
    /// `LLAMA_EXT_BUFFER_*`.
    pub buffer: i32,
    /// Number of row slices (split mode ROW), else 0.
    pub n_row_slices: i32,
    /// 1 when the tensor did not fit on its device at load and went to the CPU.
    pub load_fallback: i32,
}

/// Fills `out` with tensor `name`'s type, layer, shape, size, device and buffer kind.
/// Returns 0 when found, -1 (with a log line) when the model, name or out is NULL or there is
/// no such tensor (`out` untouched then).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_tensor_info(
    model: *const llama_model,
    name: *const c_char,
    out: *mut llama_ext_tensor_info,
) -> i32 {
    boundary!("llama_ext_tensor_info", -1, {
        // SAFETY: NULL or a live model / C string per the contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: as above: a C string per the contract.
        let name = unsafe { c_str(name, "name") }?;
        if out.is_null() {
            return Err(FfiError::Null("out"));
        }
        let info = handle
            .inner
            .tensor_info(&name)
            .ok_or_else(|| FfiError::Invalid(format!("no tensor named '{name}'")))?;
        let filled = llama_ext_tensor_info {
            r#type: info.ggml_type as i32,
            layer: info.layer,
            ne: info.ne,
            nbytes: info.nbytes,
            device: info.device,
            buffer: info.buffer.as_raw(),
            n_row_slices: info.rows.len() as i32,
            load_fallback: i32::from(info.fallback_from.is_some()),
        };
        // SAFETY: `out` is a valid, writable struct per the contract.
        unsafe { out.write(filled) };
        Ok(0)
    })
}

/// Writes the model's placement report as JSON into `buf`, `snprintf`-style: at most
/// `buf_size` bytes including the NUL (NULL `buf` with `buf_size` 0 asks for the length);
/// returns the full length of the JSON, or -1 for a NULL model. Format:
/// `{"devices":[{"index","name","type","total","free","used"}],"tensors":[{"name","layer",
/// "type","ne":[4],"nbytes","device","buffer","swap_state","fallback_from"?,"rows"?:[{"device",
/// "first","count"}]}]}` — `device` is the device name ("CPU" for host memory, null without
/// storage), `buffer` one of "mapped", "host", "device", "row_split", "none"; `used` is the
/// bytes of this model's tensors on the device; `fallback_from` names the device a tensor was
/// meant for when it fell back to the CPU at load; `rows` lists the slices of a row split
/// (elements along the split dimension).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_placement_json(
    model: *const llama_model,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_ext_model_placement_json", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        let json = handle.inner.placement_json();
        // SAFETY: `buf` is NULL or valid for `buf_size` bytes per the contract.
        Ok(unsafe { write_snprintf(buf, buf_size, json.as_bytes()) })
    })
}

/// `llama_ext_reload_entry.outcome`: same type, size and placement; bytes written in place.
pub const LLAMA_EXT_RELOAD_IN_PLACE: i32 = 0;
/// `llama_ext_reload_entry.outcome`: moved to new storage on its device.
pub const LLAMA_EXT_RELOAD_RELOCATED: i32 = 1;
/// `llama_ext_reload_entry.outcome`: back on the buffer it was loaded into.
pub const LLAMA_EXT_RELOAD_RETURNED_TO_ORIGINAL: i32 = 2;
/// `llama_ext_reload_entry.outcome`: its device was full; now in CPU memory.
pub const LLAMA_EXT_RELOAD_CPU_FALLBACK: i32 = 3;
/// `llama_ext_reload_entry.outcome`: not reloaded by rule (shape changed, missing, bad size).
pub const LLAMA_EXT_RELOAD_REFUSED: i32 = 4;
/// `llama_ext_reload_entry.outcome`: not reloaded because of an error; the tensor is unchanged.
pub const LLAMA_EXT_RELOAD_FAILED: i32 = 5;

/// ==== llama-hotswap extensions (not in upstream llama.h) ====
///
/// One tensor of the last reload report. The strings belong to the model and stay valid
/// until the next reload call on it (or until it is freed).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct llama_ext_reload_entry {
    pub name: *const c_char,
    /// Why (empty when there is nothing to say).
    pub reason: *const c_char,
    /// Where the tensor is now: "CPU", "VGPU0", "VGPU0,VGPU1" for a row split.
    pub device: *const c_char,
    /// `LLAMA_EXT_RELOAD_*`.
    pub outcome: i32,
    /// `enum ggml_type` before and after the call.
    pub old_type: i32,
    pub new_type: i32,
}

/// Logs the "disabled" line and maps a hot-swap result to the number of reloaded tensors.
fn reload_count(
    what: &str,
    result: Result<std::sync::Arc<crate::hotswap::Report>, crate::hotswap::HotSwapError>,
) -> Result<i32, FfiError> {
    match result {
        Ok(report) => Ok(i32::try_from(report.reloaded()).unwrap_or(i32::MAX)),
        Err(crate::hotswap::HotSwapError::Disabled) => {
            crate::log_info!("{what}: {}", crate::hotswap::HotSwapError::Disabled);
            Ok(0)
        }
        Err(e) => Err(FfiError::Core(e.to_string())),
    }
}

/// ik_llama.cpp's entry point: reloads every tensor whose file changed on disk into the
/// context's model. Returns true when at least one tensor was reloaded; false when nothing
/// changed, every changed tensor was refused or failed (see `llama_ext_reload_report_json`),
/// hot-swap is disabled for the model (`LLAMA_HOTSWAP_ENABLED` unset, empty, `0`, `false` or
/// `off` when it was loaded; one log line), or `ctx` is NULL. Any relocated or retyped tensor
/// bumps the model's generation, which makes every context of the model rebuild its graph.
/// Safe to call from any thread; calls on one model serialize. A file at a watched path that
/// is not a regular file (a FIFO, a directory) is never opened: its tensors are reported
/// `failed` ("not a regular file"). A changed file that cannot be opened or read for a
/// transient reason (out of descriptors, I/O or allocation error) is looked at again by the
/// next call. Relative paths were resolved when the model loaded (a later `chdir` does not
/// change which files are watched). A model loaded with `check_tensors` validates new bytes
/// before committing them (invalid ones are refused). Metadata-only changes (chmod, touch)
/// move nothing. The model must not be freed while this runs (see `llama_model_free`); the
/// context keeps it alive.
#[no_mangle]
pub unsafe extern "C" fn llama_reload_changed_tensors(ctx: *mut llama_context) -> bool {
    boundary!("llama_reload_changed_tensors", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        let model = &handle.inner.model;
        let n = reload_count(
            "llama_reload_changed_tensors",
            crate::hotswap::reload_changed(model),
        )?;
        Ok(n > 0)
    })
}

/// Like `llama_reload_changed_tensors`, without a context. Returns the number of tensors
/// reloaded (0 when nothing changed or hot-swap is disabled), or -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_reload_changed_tensors(model: *mut llama_model) -> i32 {
    boundary!("llama_ext_model_reload_changed_tensors", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        reload_count(
            "llama_ext_model_reload_changed_tensors",
            crate::hotswap::reload_changed(&handle.inner),
        )
    })
}

/// Reloads every tensor of the model from another GGUF file (or the first shard of a split
/// set, whose other shards are found by name) with the same tensor names and shapes: a
/// fine-tuned checkpoint or a different quantization. Tensors missing from it or with
/// another shape are refused and reported. The model's watched files do not change. Returns
/// the number of tensors reloaded (0 when hot-swap is disabled), or -1 when the model or path
/// is NULL or the file cannot be opened or parsed, or is not a regular file (nothing is
/// touched then). The model must not be freed while this runs (see `llama_model_free`).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_reload_from_file(
    model: *mut llama_model,
    path: *const c_char,
) -> i32 {
    boundary!("llama_ext_model_reload_from_file", -1, {
        // SAFETY: NULL or a live model / C string per the contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: as above: a C string per the contract.
        let path = unsafe { c_str(path, "path") }?;
        reload_count(
            "llama_ext_model_reload_from_file",
            crate::hotswap::reload_from_file(&handle.inner, std::path::Path::new(path.as_ref())),
        )
    })
}

/// Replaces tensor `name` with `size` bytes at `data`, stored as `ggml_type` (an
/// `enum ggml_type` value; it may differ from the current type, the shape may not): a trainer
/// pushing weights. The bytes are copied; `data` stays the caller's. Returns 1 when the
/// tensor was replaced, 0 when it was refused or failed (wrong size for the type and shape;
/// see the report; with `check_tensors` at load, NaN or infinite values are refused) or
/// hot-swap is disabled, -1 when the model, name or data is NULL, there is no such tensor, or
/// the type is not a valid ggml type.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_tensor_set(
    model: *mut llama_model,
    name: *const c_char,
    ggml_type: i32,
    data: *const c_void,
    size: usize,
) -> i32 {
    boundary!("llama_ext_tensor_set", -1, {
        // SAFETY: NULL or a live model / C string per the contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: as above: a C string per the contract.
        let name = unsafe { c_str(name, "name") }?;
        if data.is_null() {
            return Err(FfiError::Null("data"));
        }
        // SAFETY: `data` is valid for `size` bytes per the contract.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) };
        match crate::hotswap::tensor_set(&handle.inner, &name, ggml_type, bytes) {
            Err(crate::hotswap::HotSwapError::Invalid(e)) => Err(FfiError::Invalid(e)),
            other => reload_count("llama_ext_tensor_set", other),
        }
    })
}

/// One tensor of `llama_ext_tensors_push`: full-precision weights (say, from a trainer) to be
/// quantized by the library and stored in the tensor.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct llama_ext_tensor_push {
    /// The tensor's name (as in the GGUF).
    pub name: *const c_char,
    /// `GGML_TYPE_F32`, `GGML_TYPE_F16` or `GGML_TYPE_BF16`: the type of `data`.
    pub src_type: i32,
    /// Every element of the tensor in `src_type`, in the tensor's (ggml) order.
    pub data: *const c_void,
    /// Bytes at `data`.
    pub size: usize,
    /// The type to store (an `enum ggml_type` value); -1: the tensor's current type.
    pub dst_type: i32,
    /// NULL, or the importance matrix for the quantization: `ne[0] * ne[2]` values (one row
    /// of `ne[0]` per expert), as `llama-imatrix` writes them.
    pub imatrix: *const f32,
    /// Values at `imatrix`.
    pub n_imatrix: usize,
}

/// Pushes `n` tensors of full-precision weights into the model as one transaction: each is
/// quantized to its `dst_type` (or its current type) exactly as `llama_model_quantize`
/// converts a tensor it writes in that type, then all are stored as a hot-swap stores them
/// (contexts see the new weights at their next decode). All or nothing: if any tensor is
/// refused or fails, the ones already stored are put back and the model is as before (see
/// the report). `n_threads` <= 0: all cores. Returns `n` when every tensor holds its new
/// weights, 0 when the set was refused or failed (nothing changed; one log line) or hot-swap
/// is disabled for the model, -1 for a NULL model or items, an unknown or repeated name, a
/// `src_type` other than F32/F16/BF16, a `size` or `n_imatrix` that does not match the
/// tensor, or a `dst_type` the tensor's row length cannot take (nothing changed).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_tensors_push(
    model: *mut llama_model,
    items: *const llama_ext_tensor_push,
    n: usize,
    n_threads: i32,
) -> i32 {
    boundary!("llama_ext_tensors_push", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        if items.is_null() && n > 0 {
            return Err(FfiError::Null("items"));
        }
        let items: &[llama_ext_tensor_push] = if n == 0 {
            &[]
        } else {
            // SAFETY: `items` points at `n` structs per the contract.
            unsafe { std::slice::from_raw_parts(items, n) }
        };
        let model = &handle.inner;
        let mut names = Vec::with_capacity(items.len());
        let mut converted = Vec::with_capacity(items.len());
        for it in items {
            // SAFETY: a C string per the contract.
            let name = unsafe { c_str(it.name, "name") }?.into_owned();
            let src = crate::gguf::GgmlType::from_id(it.src_type)
                .filter(|t| {
                    matches!(
                        *t,
                        crate::gguf::GgmlType::F32
                            | crate::gguf::GgmlType::F16
                            | crate::gguf::GgmlType::BF16
                    )
                })
                .ok_or_else(|| {
                    FfiError::Invalid(format!(
                        "'{name}': src_type {} is not F32, F16 or BF16",
                        it.src_type
                    ))
                })?;
            if it.data.is_null() {
                return Err(FfiError::Null("data"));
            }
            // SAFETY: `data` is valid for `size` bytes per the contract.
            let data = unsafe { std::slice::from_raw_parts(it.data.cast::<u8>(), it.size) };
            let imatrix = if it.imatrix.is_null() {
                None
            } else {
                // SAFETY: `imatrix` is valid for `n_imatrix` floats per the contract.
                Some(unsafe { std::slice::from_raw_parts(it.imatrix, it.n_imatrix) })
            };
            let tensor = model
                .tensors
                .get(&name)
                .ok_or_else(|| FfiError::Invalid(format!("no tensor named '{name}'")))?;
            let (ne, current) = {
                let s = tensor.read();
                (s.layout.ne, s.layout.ggml_type)
            };
            let dst = if it.dst_type == -1 {
                current
            } else {
                crate::gguf::GgmlType::from_id(it.dst_type).ok_or_else(|| {
                    FfiError::Invalid(format!("'{name}': invalid dst_type {}", it.dst_type))
                })?
            };
            let bytes = crate::quantize::quantize_tensor(src, data, ne, dst, imatrix, n_threads)
                .map_err(|e| FfiError::Invalid(format!("'{name}': {e}")))?;
            names.push(name);
            converted.push((dst, bytes));
        }
        let set: Vec<(&str, crate::gguf::GgmlType, &[u8])> = names
            .iter()
            .zip(&converted)
            .map(|(n, (t, b))| (n.as_str(), *t, b.as_slice()))
            .collect();
        match crate::hotswap::tensors_set(model, &set) {
            Err(crate::hotswap::HotSwapError::Invalid(e)) => Err(FfiError::Invalid(e)),
            Err(crate::hotswap::HotSwapError::Disabled) => {
                crate::log_info!(
                    "llama_ext_tensors_push: {}",
                    crate::hotswap::HotSwapError::Disabled
                );
                Ok(0)
            }
            Err(e) => Err(FfiError::Core(e.to_string())),
            Ok(report) => {
                let refused = report.entries.iter().any(|e| {
                    matches!(
                        e.outcome,
                        crate::hotswap::Outcome::Refused | crate::hotswap::Outcome::Failed
                    )
                });
                if refused {
                    crate::log_warn!(
                        "llama_ext_tensors_push: the set of {n} tensors was not applied (see the reload report)"
                    );
                    Ok(0)
                } else {
                    Ok(i32::try_from(n).unwrap_or(i32::MAX))
                }
            }
        }
    })
}

/// Writes the last reload call's report as JSON into `buf`, `snprintf`-style; returns the full
/// length, or -1 for a NULL model. Format: `{"generation": N, "tensors": [{"name", "outcome",
/// "reason", "old_type", "new_type", "device"}]}`, outcome one of `reloaded_in_place`,
/// `relocated`, `returned_to_original`, `cpu_fallback`, `refused`, `failed`; unchanged tensors
/// are not listed. Before any reload (or with hot-swap disabled): `{"generation":0,"tensors":[]}`
/// with the model's generation.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_reload_report_json(
    model: *const llama_model,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_ext_reload_report_json", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        let json = match &handle.inner.hotswap {
            Some(hs) => hs.last_report().to_json(),
            None => crate::hotswap::Report::new(
                handle
                    .inner
                    .generation
                    .load(std::sync::atomic::Ordering::Acquire),
                Vec::new(),
            )
            .to_json(),
        };
        // SAFETY: `buf` is NULL or valid for `buf_size` bytes per the contract.
        Ok(unsafe { write_snprintf(buf, buf_size, json.as_bytes()) })
    })
}

/// The number of entries in the last reload report (0 before any reload or when hot-swap is
/// disabled), or -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_reload_report_count(model: *const llama_model) -> i32 {
    boundary!("llama_ext_reload_report_count", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        Ok(handle
            .inner
            .hotswap
            .as_ref()
            .map_or(0, |hs| hs.last_report().entries.len() as i32))
    })
}

/// Fills `out` with entry `i` of the last reload report. Returns 0, or -1 when the model or
/// out is NULL or `i` is out of range. The strings stay valid until the next reload call on
/// the model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_reload_report_entry(
    model: *const llama_model,
    i: i32,
    out: *mut llama_ext_reload_entry,
) -> i32 {
    boundary!("llama_ext_reload_report_entry", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        if out.is_null() {
            return Err(FfiError::Null("out"));
        }
        let hs = handle
            .inner
            .hotswap
            .as_ref()
            .ok_or_else(|| FfiError::Invalid("hot-swap is disabled for this model".into()))?;
        let report = hs.last_report();
        let index = usize::try_from(i)
            .ok()
            .filter(|&k| k < report.entries.len())
            .ok_or_else(|| FfiError::Invalid(format!("entry {i} out of range")))?;
        let e = &report.entries[index];
        let c = &report.c_strings()[index];
        let filled = llama_ext_reload_entry {
            name: c[0].as_ptr(),
            reason: c[1].as_ptr(),
            device: c[2].as_ptr(),
            outcome: e.outcome.as_raw(),
            old_type: e.old_type.id() as i32,
            new_type: e.new_type.id() as i32,
        };
        // SAFETY: `out` is a valid, writable struct per the contract.
        unsafe { out.write(filled) };
        Ok(0)
    })
}

/// The model's generation: bumped by every reload call that relocated or retyped a tensor.
/// Returns 0 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_generation(model: *const llama_model) -> u64 {
    boundary!("llama_ext_model_generation", 0, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        Ok(handle
            .inner
            .generation
            .load(std::sync::atomic::Ordering::Acquire))
    })
}

/// Whether the context's cached graph was built for an older model generation and must be
/// rebuilt before reuse (decode does this check; it is exposed for hosts and tests). False
/// for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_context_graph_is_stale(ctx: *const llama_context) -> bool {
    boundary!("llama_ext_context_graph_is_stale", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.graph_is_stale())
    })
}

/// Rebuilds the context's cached graph if it is stale (what decode does first; with decode
/// not supported yet, this only records the model generation the graph is now built for).
/// Returns true when it was stale; false when current or `ctx` is NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_context_rebuild_graph(ctx: *mut llama_context) -> bool {
    boundary!("llama_ext_context_rebuild_graph", false, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.inner.rebuild_graph_if_stale())
    })
}

// ---------------------------------------------------------------------------------------------
// C forms of upstream's C++ entry points (src/llama-ext.h): the C++ shim (cpp/llama_ext.cpp)
// exports upstream's mangled names over these; see docs/dropin.md.
// ---------------------------------------------------------------------------------------------

/// One buffer type's share of a context's memory (`llama_ext_memory_breakdown`), in bytes:
/// upstream's `llama_memory_breakdown_data` with its key.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct llama_ext_memory_breakdown_entry {
    /// The buffer type: libggml's handle for the device when upstream's libggml is loaded in
    /// the process (so the program can pass it to libggml), else this library's.
    pub buft: ggml_backend_buffer_type_t,
    /// Model weights held there (sizes only for a `no_alloc` model).
    pub model: usize,
    /// The context's KV cache.
    pub context: usize,
    /// Temporary compute buffers: an estimate, the largest activations of one micro-batch
    /// (logits or feed-forward rows, and the attention scores over the whole context).
    pub compute: usize,
}

/// Upstream's `hparams.n_expert` (0 for dense models); -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_n_expert(model: *const llama_model) -> i32 {
    boundary!("llama_ext_model_n_expert", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        Ok(i32::try_from(handle.inner.hparams.n_expert).unwrap_or(i32::MAX))
    })
}

/// The number of devices the model offloads to (upstream's `model->devices`: GPUs, not the
/// CPU; 0 on a machine without one); -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_n_devices(model: *const llama_model) -> i32 {
    boundary!("llama_ext_model_n_devices", -1, {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        let n = handle.inner.devices.as_ref().map_or(0, |d| d.devices.len());
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}

/// The model's device `i` (`0 <= i < llama_ext_model_n_devices`), or NULL (no log line for an
/// index out of range, as upstream). With upstream's libggml in the process the handle is
/// libggml's device of the same name, which the program can pass to libggml.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_model_get_device(
    model: *const llama_model,
    i: i32,
) -> ggml_backend_dev_t {
    boundary!("llama_ext_model_get_device", std::ptr::null_mut(), {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { handles::model(model) }?;
        let index = usize::try_from(i).ok().and_then(|i| {
            handle
                .inner
                .devices
                .as_ref()
                .and_then(|d| d.devices.get(i).copied())
        });
        Ok(index.map_or(std::ptr::null_mut(), super::device::program_device))
    })
}

/// Upstream's `llama_get_ctx_other`: the `ctx_other` the context was created with (NULL when
/// none, or for a NULL context).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_get_ctx_other(ctx: *mut llama_context) -> *mut llama_context {
    boundary!("llama_ext_get_ctx_other", std::ptr::null_mut(), {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        Ok(handle.ctx_other)
    })
}

/// The context's memory by buffer type (upstream's `llama_get_memory_breakdown`): writes up
/// to `capacity` entries to `out` (NULL with capacity 0 to count) and returns how many there
/// are, or -1 for a NULL context (or NULL `out` with a capacity). Weights are counted on the
/// device that holds them (where the placement puts them for a `no_alloc` model); the KV
/// cache and compute buffers on the CPU, where llama-hotswap's engine keeps them.
#[no_mangle]
pub unsafe extern "C" fn llama_ext_memory_breakdown(
    ctx: *const llama_context,
    out: *mut llama_ext_memory_breakdown_entry,
    capacity: usize,
) -> i32 {
    boundary!("llama_ext_memory_breakdown", -1, {
        // SAFETY: NULL or a live context per the contract.
        let handle = unsafe { handles::context(ctx) }?;
        if out.is_null() && capacity > 0 {
            return Err(FfiError::Null("out"));
        }
        let entries = memory_breakdown(&handle.inner);
        for (i, entry) in entries.iter().take(capacity).enumerate() {
            // SAFETY: `out` holds `capacity` entries per the contract; `i < capacity`.
            unsafe { out.add(i).write(*entry) };
        }
        Ok(i32::try_from(entries.len()).unwrap_or(i32::MAX))
    })
}

/// Per registry device with anything on it: weights, KV cache, compute estimate.
fn memory_breakdown(ctx: &crate::context::Context) -> Vec<llama_ext_memory_breakdown_entry> {
    let model = &ctx.model;
    let cpu = model.cpu_index();
    let n_devices = crate::device::Registry::global().len().max(cpu + 1);
    let mut weights = vec![0u64; n_devices];
    for t in model.tensors.iter() {
        let info = crate::model::report::TensorInfo::of(t, cpu);
        if info.rows.is_empty() {
            let device = usize::try_from(info.device).unwrap_or(cpu);
            if let Some(w) = weights.get_mut(device) {
                *w += info.nbytes;
            }
        } else {
            let total: u64 = info.rows.iter().map(|r| r.2).sum::<u64>().max(1);
            for &(device, _, count) in &info.rows {
                if let Some(w) = weights.get_mut(device) {
                    *w += info.nbytes * count / total;
                }
            }
        }
    }
    let e = ctx.engine();
    let cp = &e.cparams;
    let hp = &model.hparams;
    let n_vocab = model.vocab.n_tokens() as u64;
    let n_ff = hp.n_ff.iter().copied().max().unwrap_or(0) as u64;
    let n_head = hp.n_head.iter().copied().max().unwrap_or(0) as u64;
    let compute =
        4 * u64::from(cp.n_ubatch) * (n_vocab.max(n_ff) + u64::from(cp.n_ctx_seq) * n_head);
    let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for (device, &bytes) in weights.iter().enumerate() {
        let on_cpu = device == cpu;
        if bytes == 0 && !on_cpu {
            continue;
        }
        out.push(llama_ext_memory_breakdown_entry {
            buft: super::device::program_buft(device),
            model: to_usize(bytes),
            context: if on_cpu { to_usize(ctx.kv_bytes) } else { 0 },
            compute: if on_cpu { to_usize(compute) } else { 0 },
        });
    }
    out
}

/// Adds the devices of an upstream `rpc-server` (ggml-rpc protocol 7.0) at `endpoint`
/// (`"host:port"`) to this library's device registry, as upstream's `--rpc host:port` does
/// through `ggml_backend_rpc_add_server`. The server is contacted now: its version is
/// checked and its devices are counted. They appear as `RPC0`, `RPC1`, … (description: the
/// endpoint; memory: as the server reports it) before the CPU, and placement puts layers on
/// them like on GPUs (the default device list starts with them, as upstream's). Call it
/// before the first device query or model load (the registry is created once), or list the
/// servers in `LLAMA_RPC_SERVERS=host:port,…` instead. Returns the number of devices the
/// server offers, or -1 with a log line naming the server and the reason (NULL endpoint,
/// unreachable, wrong protocol version, invalid reply, registry already created).
/// rpc-server trusts its clients: never expose it on an untrusted network (see docs/rpc.md).
#[no_mangle]
pub unsafe extern "C" fn llama_ext_rpc_add_server(endpoint: *const c_char) -> i32 {
    boundary!("llama_ext_rpc_add_server", -1, {
        // SAFETY: NULL or a C string per the contract.
        let endpoint = unsafe { c_str(endpoint, "endpoint") }?;
        let n = crate::device::add_rpc_server(&endpoint).map_err(FfiError::Core)?;
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    })
}
