//! Model loading, freeing and every `llama_model_*` query.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

use super::handles::{self, llama_model, llama_vocab};
use super::types::*;
use super::{c_str, write_snprintf, FfiError};
use crate::loader::place::PlacementParams;
use crate::loader::{self, LoadError, LoadOptions, ModelSource};
use crate::model::meta::{KvOverride, OverrideValue};
use crate::model::{LoadMode, Model};

/// Reads the NULL-terminated (`key[0] == 0`) kv override list.
///
/// # Safety
/// `list` must be NULL or point to an array terminated by an entry whose key starts with NUL.
pub(super) unsafe fn read_overrides(
    list: *const llama_model_kv_override,
) -> Result<Vec<KvOverride>, FfiError> {
    let mut out = Vec::new();
    if list.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: the caller promises a terminated array; we stop at the terminator.
        let entry = unsafe { &*list.add(i) };
        if entry.key[0] == 0 {
            break;
        }
        let key_bytes: Vec<u8> = entry
            .key
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let key = String::from_utf8_lossy(&key_bytes).into_owned();
        // SAFETY: reading the union member the tag names; every member is plain data.
        let value = unsafe {
            match entry.tag.0 {
                0 => OverrideValue::Int(entry.value.val_i64),
                1 => OverrideValue::Float(entry.value.val_f64),
                2 => OverrideValue::Bool(entry.value.val_bool != 0),
                3 => {
                    let raw = &entry.value.val_str;
                    let bytes: Vec<u8> = raw
                        .iter()
                        .take_while(|&&c| c != 0)
                        .map(|&c| c as u8)
                        .collect();
                    OverrideValue::Str(String::from_utf8_lossy(&bytes).into_owned())
                }
                other => {
                    return Err(FfiError::Invalid(format!(
                        "kv override '{key}' has invalid tag {other}"
                    )))
                }
            }
        };
        out.push(KvOverride { key, value });
    }
    Ok(out)
}

/// Reads `devices`, `tensor_split` and `tensor_buft_overrides`.
///
/// # Safety
/// `devices` and `tensor_buft_overrides` must be NULL or NULL-terminated arrays;
/// `tensor_split` NULL or `llama_max_devices()` floats.
unsafe fn read_placement(
    params: &llama_model_params,
    split_mode: crate::device::SplitMode,
) -> Result<PlacementParams, String> {
    use crate::device::placement::MAX_DEVICES;
    let mut placement = PlacementParams {
        n_gpu_layers: params.n_gpu_layers,
        split_mode,
        main_gpu: params.main_gpu,
        ..PlacementParams::default()
    };
    if !params.devices.is_null() {
        let mut list = Vec::new();
        for i in 0.. {
            // SAFETY: NULL-terminated per the contract; we stop at the terminator.
            let dev = unsafe { *params.devices.add(i) };
            if dev.is_null() {
                break;
            }
            let index = super::device::device_index(dev)
                .map_err(|e| format!("devices[{i}] is not a device of this library: {e}"))?;
            list.push(index);
        }
        placement.devices = Some(list);
    } else {
        super::libggml_rpc::warn_unseen_rpc_devices();
    }
    if !params.tensor_split.is_null() {
        let mut split = [0f32; MAX_DEVICES];
        // SAFETY: `tensor_split` points to llama_max_devices() floats per the contract.
        split.copy_from_slice(unsafe {
            std::slice::from_raw_parts(params.tensor_split, MAX_DEVICES)
        });
        placement.tensor_split = Some(split);
    }
    if !params.tensor_buft_overrides.is_null() {
        for i in 0.. {
            // SAFETY: terminated by an entry whose pattern is NULL, per the contract.
            let entry = unsafe { &*params.tensor_buft_overrides.add(i) };
            if entry.pattern.is_null() {
                break;
            }
            // SAFETY: a C string per the contract.
            let pattern = unsafe { CStr::from_ptr(entry.pattern) }
                .to_string_lossy()
                .into_owned();
            let device = super::device::buft_device_index(entry.buft).map_err(|e| {
                format!("tensor_buft_overrides[{i}] ({pattern}): invalid buffer type: {e}")
            })?;
            placement.overrides.push((pattern, device));
        }
    }
    Ok(placement)
}

/// Shared body of every load entry point: validates the parameters, loads, wraps the model.
///
/// # Safety
/// `params` pointers must follow `llama_model_params`' contract.
unsafe fn load_with_params(
    source: ModelSource,
    what: &str,
    params: &llama_model_params,
) -> Result<*mut llama_model, FfiError> {
    // SAFETY: same contract.
    unsafe { load_with_params_then(source, what, params, |_| {}) }
}

/// [`load_with_params`], with `adjust` applied to the loaded model before it is wrapped.
///
/// # Safety
/// `params` pointers must follow `llama_model_params`' contract.
pub(super) unsafe fn load_with_params_then(
    source: ModelSource,
    what: &str,
    params: &llama_model_params,
    adjust: impl FnOnce(&mut crate::model::Model),
) -> Result<*mut llama_model, FfiError> {
    let load_mode = LoadMode::from_raw(params.load_mode.0).ok_or_else(|| {
        FfiError::Invalid(format!("{what}: invalid load_mode {}", params.load_mode.0))
    })?;
    if !(0..=2).contains(&params.lazy_mode.0) {
        return Err(FfiError::Invalid(format!(
            "{what}: invalid lazy_mode {}",
            params.lazy_mode.0
        )));
    }
    let split_mode = crate::device::SplitMode::from_raw(params.split_mode.0)
        .map_err(|e| FfiError::Invalid(format!("{what}: {e}")))?;
    // SAFETY: per the params contract (NULL-terminated lists, 16 floats).
    let placement = unsafe { read_placement(params, split_mode) }
        .map_err(|e| FfiError::Invalid(format!("{what}: {e}")))?;
    // SAFETY: per the params contract.
    let overrides = unsafe { read_overrides(params.kv_overrides) }?;
    let callback = params.progress_callback;
    let user_data = params.progress_callback_user_data;
    let mut progress = move |fraction: f32| -> bool {
        match callback {
            // SAFETY: the host's callback with the host's user data, as documented.
            Some(cb) => unsafe { cb(fraction, user_data) },
            None => true,
        }
    };
    let options = LoadOptions {
        load_mode,
        vocab_only: params.vocab_only,
        no_alloc: params.no_alloc,
        check_tensors: params.check_tensors,
        overrides,
        progress: if callback.is_some() {
            Some(&mut progress as &mut dyn FnMut(f32) -> bool)
        } else {
            None
        },
        placement,
        hotswap: crate::hotswap::enabled_by_env(),
    };
    let t_start_us = super::backend::llama_time_us();
    match loader::load(source, options) {
        Ok(mut model) => {
            // Repacked layouts, made while loading as upstream does (CPU_REPACK buffers).
            model.use_extra_bufts = params.use_extra_bufts;
            adjust(&mut model);
            crate::model::derived::derive_all(&model);
            // The tokenizer finishes the vocabulary (newline id, piece cache) and lives in the
            // vocab handle: `model` sits below `tokenizer` in the crate's layering.
            let tokenizer = crate::tokenizer::attach(&mut model.vocab).map_err(FfiError::Core)?;
            let t_load_us = super::backend::llama_time_us() - t_start_us;
            Ok(llama_model::new_boxed(
                model, tokenizer, t_start_us, t_load_us,
            ))
        }
        Err(LoadError::Cancelled) => Err(FfiError::Core("cancelled model load".to_string())),
        Err(e) => Err(FfiError::Core(format!(
            "failed to load model from {what}: {e}"
        ))),
    }
}

/// Loads a model from a GGUF file; if the file is the first shard of a
/// `<prefix>-%05d-of-%05d.gguf` set, the other shards are found and loaded too.
/// Returns NULL on any failure (with a log line naming the file and the reason) or when the
/// progress callback cancels ("cancelled model load"). Free the model with `llama_model_free`.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_file(
    path_model: *const c_char,
    params: llama_model_params,
) -> *mut llama_model {
    boundary!("llama_model_load_from_file", std::ptr::null_mut(), {
        // SAFETY: NULL or a C string per the API contract.
        let path = unsafe { c_str(path_model, "path_model") }?.into_owned();
        // SAFETY: params per contract.
        unsafe { load_with_params(ModelSource::Path(PathBuf::from(&path)), &path, &params) }
    })
}

/// Deprecated alias of `llama_model_load_from_file`.
#[no_mangle]
pub unsafe extern "C" fn llama_load_model_from_file(
    path_model: *const c_char,
    params: llama_model_params,
) -> *mut llama_model {
    // SAFETY: same contract.
    unsafe { llama_model_load_from_file(path_model, params) }
}

/// Loads a model from an open `FILE *`, starting at its current position. The file is not
/// closed and may be closed by the caller after this returns (the library keeps its own
/// duplicate descriptor). Split models cannot be discovered this way. NULL on failure.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_file_ptr(
    file: *mut libc::FILE,
    params: llama_model_params,
) -> *mut llama_model {
    boundary!("llama_model_load_from_file_ptr", std::ptr::null_mut(), {
        if file.is_null() {
            return Err(FfiError::Null("file"));
        }
        // SAFETY: a valid FILE * per the contract.
        let (fd, pos) = unsafe { (libc::fileno(file), libc::ftello(file)) };
        if fd < 0 || pos < 0 {
            return Err(FfiError::Invalid(
                "FILE * has no usable descriptor or position".into(),
            ));
        }
        // SAFETY: duplicating a descriptor the host owns; we own the duplicate.
        let dup = unsafe { libc::dup(fd) };
        if dup < 0 {
            return Err(FfiError::Core(format!(
                "dup failed: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: `dup` is a fresh descriptor owned by nobody else.
        let owned = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(dup) };
        let source = ModelSource::File {
            file: owned,
            base: pos as u64,
        };
        // SAFETY: params per contract.
        unsafe { load_with_params(source, "<FILE *>", &params) }
    })
}

/// Loads a split model from explicit shard paths (any names; `paths[0]` must be the first
/// shard, the others in order). NULL on failure.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_splits(
    paths: *mut *const c_char,
    n_paths: usize,
    params: llama_model_params,
) -> *mut llama_model {
    boundary!("llama_model_load_from_splits", std::ptr::null_mut(), {
        if paths.is_null() {
            return Err(FfiError::Null("paths"));
        }
        if n_paths == 0 {
            return Err(FfiError::Invalid("list of splits is empty".into()));
        }
        let mut list = Vec::with_capacity(n_paths);
        for i in 0..n_paths {
            // SAFETY: `paths` holds `n_paths` entries per the contract.
            let p = unsafe { *paths.add(i) };
            // SAFETY: each entry is a C string per the contract.
            list.push(PathBuf::from(unsafe { c_str(p, "paths[i]") }?.into_owned()));
        }
        let first = list[0].display().to_string();
        // SAFETY: params per contract.
        unsafe { load_with_params(ModelSource::Splits(list), &first, &params) }
    })
}

/// Frees a model and everything it owns. NULL is a no-op.
///
/// Freeing a model while another thread still uses it through the model handle (a reload,
/// `llama_ext_tensor_set`, a getter, a tensor read) is undefined behaviour, as it is upstream:
/// the caller must make sure those calls have returned. Contexts created from the model keep
/// it alive: it is really freed when the last of them is freed, so calls through a context
/// (`llama_reload_changed_tensors`) stay valid.
#[no_mangle]
pub unsafe extern "C" fn llama_model_free(model: *mut llama_model) {
    boundary!("llama_model_free", (), {
        // SAFETY: NULL or a live model per the contract.
        unsafe { handles::free_model(model) }
    })
}

/// Deprecated alias of `llama_model_free`.
#[no_mangle]
pub unsafe extern "C" fn llama_free_model(model: *mut llama_model) {
    // SAFETY: same contract.
    unsafe { llama_model_free(model) }
}

/// Runs a getter on a checked model handle.
///
/// # Safety
/// `model` must be NULL or a live model handle.
unsafe fn with_model<T>(
    model: *const llama_model,
    f: impl FnOnce(&Model) -> T,
) -> Result<T, FfiError> {
    // SAFETY: per the caller's contract.
    let handle = unsafe { handles::model(model) }?;
    Ok(f(&handle.inner))
}

/// The model's vocabulary (owned by the model; valid until `llama_model_free`). NULL for a
/// NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_get_vocab(model: *const llama_model) -> *const llama_vocab {
    boundary!("llama_model_get_vocab", std::ptr::null(), {
        // SAFETY: NULL or a live model.
        let handle = unsafe { handles::model(model) }?;
        Ok(&*handle.vocab as *const llama_vocab)
    })
}

/// The model's rope type (`enum llama_rope_type`), from the architecture table; NONE for
/// architectures the table does not know. -1 (NONE) for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_rope_type(model: *const llama_model) -> LlamaRopeType {
    boundary!("llama_model_rope_type", LlamaRopeType(-1), {
        // SAFETY: NULL or a live model.
        unsafe {
            with_model(model, |m| {
                LlamaRopeType(crate::model::arch::rope_type(
                    &m.arch,
                    m.hparams.rope_sections,
                ))
            })
        }
    })
}

fn clamp_i32(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Context length the model was trained with. -1 for a NULL model; 0 for vocab-only.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_ctx_train(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_ctx_train", model, -1, |m| {
        clamp_i32(m.hparams.n_ctx_train)
    })
}

/// Embedding size. -1 for a NULL model; 0 for vocab-only.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_embd(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_embd", model, -1, |m| clamp_i32(
        m.hparams.n_embd
    ))
}

/// Input embedding size (equals `n_embd` for the architectures supported). -1 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_embd_inp(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_embd_inp", model, -1, |m| {
        clamp_i32(m.hparams.n_embd)
    })
}

/// Output embedding size (`<arch>.embedding_length_out`, else `n_embd`). -1 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_embd_out(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_embd_out", model, -1, |m| {
        clamp_i32(m.hparams.n_embd_out)
    })
}

/// Layers, excluding NextN/MTP layers. -1 for a NULL model; 0 for vocab-only.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_layer(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_layer", model, -1, |m| clamp_i32(
        m.hparams.n_layer()
    ))
}

/// NextN/MTP layers (`<arch>.nextn_predict_layers`). -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_layer_nextn(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_layer_nextn", model, -1, |m| {
        clamp_i32(m.hparams.n_layer_nextn)
    })
}

/// Attention heads of layer 0. -1 for a NULL model; 0 for vocab-only (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_head(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_head", model, -1, |m| clamp_i32(
        m.hparams.n_head0()
    ))
}

/// KV heads of layer 0. -1 for a NULL model; 0 for vocab-only (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_head_kv(model: *const llama_model) -> i32 {
    getter!(with_model, "llama_model_n_head_kv", model, -1, |m| {
        clamp_i32(m.hparams.n_head_kv0())
    })
}

/// Sliding-window size (`<arch>.attention.sliding_window`, 0 when absent). -1 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_swa(model: *const llama_model) -> i32 {
    boundary!("llama_model_n_swa", -1, {
        // SAFETY: NULL or a live model.
        unsafe {
            with_model(model, |m| {
                clamp_i32(if m.arch == "deepseek4" {
                    0
                } else {
                    m.hparams.n_swa
                })
            })
        }
    })
}

/// Trained RoPE frequency scale (1 / `rope.scaling.factor`, 1.0 when absent). 0 for NULL
/// and for vocab-only models.
#[no_mangle]
pub unsafe extern "C" fn llama_model_rope_freq_scale_train(model: *const llama_model) -> f32 {
    getter!(
        with_model,
        "llama_model_rope_freq_scale_train",
        model,
        0.0,
        |m| m.hparams.rope_freq_scale_train
    )
}

/// Classifier outputs (labels count, else 1). 0 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_cls_out(model: *const llama_model) -> u32 {
    getter!(with_model, "llama_model_n_cls_out", model, 0, |m| m
        .hparams
        .n_cls_out)
}

/// Label of classifier output `i`, owned by the model; NULL when out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_model_cls_label(model: *const llama_model, i: u32) -> *const c_char {
    boundary!("llama_model_cls_label", std::ptr::null(), {
        // SAFETY: NULL or a live model.
        unsafe {
            with_model(model, |m| {
                m.cls_labels
                    .get(i as usize)
                    .map_or(std::ptr::null(), |l| l.as_ptr())
            })
        }
    })
}

/// Writes the metadata value of `key` as text (snprintf convention: returns the full length,
/// writes at most `buf_size` bytes including the NUL). A missing key returns -1 and, when
/// `buf_size > 0`, an empty string. Array values are not listed (as upstream); kv overrides
/// do not change these values (as upstream).
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str(
    model: *const llama_model,
    key: *const c_char,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_model_meta_val_str", -1, {
        // SAFETY: NULL or a live model / C string / buffer per contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: as above: a C string per the contract.
        let key = unsafe { c_str(key, "key") }?;
        match handle.inner.meta.listing_value(&key) {
            // SAFETY: `buf` holds `buf_size` bytes (or is NULL with 0) per the contract.
            Some(v) => Ok(unsafe { write_snprintf(buf, buf_size, v.as_bytes()) }),
            None => {
                // SAFETY: as above.
                unsafe { write_snprintf(buf, buf_size, b"") };
                Ok(-1)
            }
        }
    })
}

/// Number of (non-array) metadata entries. -1 for a NULL model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_count(model: *const llama_model) -> i32 {
    getter!(
        with_model,
        "llama_model_meta_count",
        model,
        -1,
        |m| m.meta.listing().len() as i32
    )
}

/// Shared body of the by-index metadata functions.
///
/// # Safety
/// As `llama_model_meta_val_str`.
unsafe fn meta_by_index(
    model: *const llama_model,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
    pick: fn(&(String, String)) -> &str,
) -> Result<i32, FfiError> {
    // SAFETY: per contract.
    let handle = unsafe { handles::model(model) }?;
    match usize::try_from(i)
        .ok()
        .and_then(|i| handle.inner.meta.listing().get(i))
    {
        // SAFETY: buffer per contract.
        Some(entry) => Ok(unsafe { write_snprintf(buf, buf_size, pick(entry).as_bytes()) }),
        None => {
            // SAFETY: buffer per contract.
            unsafe { write_snprintf(buf, buf_size, b"") };
            Ok(-1)
        }
    }
}

/// Writes the key of metadata entry `i` (file order; upstream's order is its hash map's).
/// snprintf convention; -1 and an empty buffer when `i` is out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_key_by_index(
    model: *const llama_model,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_model_meta_key_by_index", -1, {
        // SAFETY: per contract.
        unsafe { meta_by_index(model, i, buf, buf_size, |e| &e.0) }
    })
}

/// Writes the value of metadata entry `i` as text (file order). snprintf convention; -1 and an
/// empty buffer when `i` is out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str_by_index(
    model: *const llama_model,
    i: i32,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_model_meta_val_str_by_index", -1, {
        // SAFETY: per contract.
        unsafe { meta_by_index(model, i, buf, buf_size, |e| &e.1) }
    })
}

/// Writes `"<arch> <size label> <ftype name>"` (e.g. "llama 7B Q4_K - Medium"; "?B" when the
/// size is unknown; empty for vocab-only models). snprintf convention; -1 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_desc(
    model: *const llama_model,
    buf: *mut c_char,
    buf_size: usize,
) -> i32 {
    boundary!("llama_model_desc", -1, {
        // SAFETY: per contract.
        let handle = unsafe { handles::model(model) }?;
        // SAFETY: `buf` holds `buf_size` bytes (or is NULL with 0) per the contract.
        Ok(unsafe { write_snprintf(buf, buf_size, handle.inner.desc.as_bytes()) })
    })
}

/// The model's file type (`general.file_type`, or guessed from the tensor types with the
/// LLAMA_FTYPE_GUESSED bit). ALL_F32 for vocab-only models and NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_ftype(model: *const llama_model) -> LlamaFtype {
    getter!(with_model, "llama_model_ftype", model, LlamaFtype(0), |m| {
        LlamaFtype(m.ftype)
    })
}

/// Total bytes of all tensors in all the model's files. 0 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_size(model: *const llama_model) -> u64 {
    getter!(with_model, "llama_model_size", model, 0, |m| m.size)
}

/// The chat template `tokenizer.chat_template` (name NULL) or `tokenizer.chat_template.<name>`;
/// NULL when absent. Owned by the model.
#[no_mangle]
pub unsafe extern "C" fn llama_model_chat_template(
    model: *const llama_model,
    name: *const c_char,
) -> *const c_char {
    boundary!("llama_model_chat_template", std::ptr::null(), {
        // SAFETY: per contract.
        let handle = unsafe { handles::model(model) }?;
        let name = if name.is_null() {
            None
        } else {
            Some(
                // SAFETY: non-NULL, so a NUL-terminated string per the contract.
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        Ok(handle
            .inner
            .chat_template(name.as_deref())
            .map_or(std::ptr::null(), |t| t.as_ptr()))
    })
}

/// Total elements of all tensors in all the model's files. 0 for NULL.
#[no_mangle]
pub unsafe extern "C" fn llama_model_n_params(model: *const llama_model) -> u64 {
    getter!(with_model, "llama_model_n_params", model, 0, |m| m.n_params)
}

/// True for encoder architectures (T5, T5ENCODER, EAGLE3, DFLASH).
#[no_mangle]
pub unsafe extern "C" fn llama_model_has_encoder(model: *const llama_model) -> bool {
    getter!(with_model, "llama_model_has_encoder", model, false, |m| {
        crate::model::arch::has_encoder(&m.arch)
    })
}

/// False only for T5ENCODER.
#[no_mangle]
pub unsafe extern "C" fn llama_model_has_decoder(model: *const llama_model) -> bool {
    getter!(with_model, "llama_model_has_decoder", model, false, |m| {
        crate::model::arch::has_decoder(&m.arch)
    })
}

/// `<arch>.decoder_start_token_id`, or LLAMA_TOKEN_NULL (-1).
#[no_mangle]
pub unsafe extern "C" fn llama_model_decoder_start_token(model: *const llama_model) -> llama_token {
    getter!(
        with_model,
        "llama_model_decoder_start_token",
        model,
        -1,
        |m| m.hparams.dec_start_token
    )
}

/// True for recurrent architectures (Mamba, RWKV, …).
#[no_mangle]
pub unsafe extern "C" fn llama_model_is_recurrent(model: *const llama_model) -> bool {
    getter!(with_model, "llama_model_is_recurrent", model, false, |m| {
        crate::model::arch::is_recurrent(&m.arch)
    })
}

/// True for hybrid (attention + recurrent) architectures.
#[no_mangle]
pub unsafe extern "C" fn llama_model_is_hybrid(model: *const llama_model) -> bool {
    getter!(with_model, "llama_model_is_hybrid", model, false, |m| {
        crate::model::arch::is_hybrid(&m.arch)
    })
}

/// True for diffusion architectures (Dream, LLaDA, …).
#[no_mangle]
pub unsafe extern "C" fn llama_model_is_diffusion(model: *const llama_model) -> bool {
    getter!(with_model, "llama_model_is_diffusion", model, false, |m| {
        crate::model::arch::is_diffusion(&m.arch)
    })
}

/// Deprecated: `llama_model_n_ctx_train`.
#[no_mangle]
pub unsafe extern "C" fn llama_n_ctx_train(model: *const llama_model) -> i32 {
    // SAFETY: same contract.
    unsafe { llama_model_n_ctx_train(model) }
}

/// Deprecated: `llama_model_n_embd`.
#[no_mangle]
pub unsafe extern "C" fn llama_n_embd(model: *const llama_model) -> i32 {
    // SAFETY: same contract.
    unsafe { llama_model_n_embd(model) }
}

/// Deprecated: `llama_model_n_layer`.
#[no_mangle]
pub unsafe extern "C" fn llama_n_layer(model: *const llama_model) -> i32 {
    // SAFETY: same contract.
    unsafe { llama_model_n_layer(model) }
}

/// Deprecated: `llama_model_n_head`.
#[no_mangle]
pub unsafe extern "C" fn llama_n_head(model: *const llama_model) -> i32 {
    // SAFETY: same contract.
    unsafe { llama_model_n_head(model) }
}
