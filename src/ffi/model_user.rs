//! Models built from a caller's metadata (`llama_model_init_from_user`) and model saving
//! (`llama_model_save_to_file`).

use std::collections::HashMap;
use std::ffi::{c_char, c_void};

use super::handles::llama_model;
use super::types::*;
use super::FfiError;
use crate::gguf::writer::PendingTensor;
use crate::gguf::{GgmlType, Gguf, GgufWriter, MetaValue};
use crate::loader::{LoadOptions, ModelSource};
use crate::model::LoadMode;

/// Creates a model from the GGUF metadata in `metadata` (libggml's `gguf_context`: the
/// caller's libggml must be loaded in the process) as upstream does: every tensor the
/// architecture creates from those hyperparameters alone, F32 unless `metadata` holds a
/// tensor of the same name (its type wins), each filled by `set_tensor_data(tensor,
/// set_tensor_data_ud)` on a host `ggml_tensor` the callback may write with
/// `ggml_backend_tensor_set` or through `tensor->data`. `params.load_mode` is NONE and
/// `use_extra_bufts` false, as upstream forces.
/// The architectures whose tensor table is upstream's are listed in docs/dropin.md; any
/// other, a NULL `metadata` or `set_tensor_data` (upstream aborts), missing
/// hyperparameters or an override type that does not fit a tensor's shape give NULL and a
/// log line. The callback runs in upstream's order and as often: once per tensor it
/// creates, in creation order, a tensor created more than once (a global created again in
/// each layer, as llama's `rope_freqs`, or the token table again as the output) once per
/// creation; the model keeps the first call's values (upstream's later copies hold the
/// later calls': see docs/dropin.md).
#[no_mangle]
pub unsafe extern "C" fn llama_model_init_from_user(
    metadata: *mut gguf_context,
    set_tensor_data: llama_model_set_tensor_data_t,
    set_tensor_data_ud: *mut c_void,
    params: llama_model_params,
) -> *mut llama_model {
    boundary!("llama_model_init_from_user", std::ptr::null_mut(), {
        if metadata.is_null() {
            return Err(FfiError::Null("metadata"));
        }
        let fill = set_tensor_data.ok_or(FfiError::Null("set_tensor_data"))?;
        // SAFETY: a live gguf_context of the process's libggml, per the contract.
        let meta = unsafe { super::device::gguf_meta_bytes(metadata) }.ok_or_else(|| {
            FfiError::Core(
                "libggml's gguf functions are not loaded in this process: a gguf_context cannot be read".into(),
            )
        })?;
        let (image, calls) = declared_image(&meta).map_err(FfiError::Core)?;
        let file = write_image(&image, &calls, fill, set_tensor_data_ud)?;
        let mut params = params;
        params.load_mode = LlamaLoadMode(LoadMode::None as i32);
        params.use_extra_bufts = false;
        let source = ModelSource::File { file, base: 0 };
        // upstream's loader saw no file tensors: it reports 0 parameters and 0 bytes; and
        // it created every tensor itself, so it names none as unused (ours would name the
        // ones it creates that no graph reads, the optional scales)
        let counted_none = |m: &mut crate::model::Model| {
            m.n_params = 0;
            m.size = 0;
            *m.unused_tensors_logged.get_mut() = true;
        };
        // SAFETY: params per the contract.
        unsafe { super::model::load_with_params_then(source, "(metadata)", &params, counted_none) }
    })
}

/// The GGUF image upstream's loader would see: the caller's key/value pairs and every
/// tensor the architecture declares for them (data deferred to the caller's callback), in
/// upstream's creation order; with the image's tensor of each of upstream's callbacks, in
/// its order (a tensor upstream creates more than once appears more than once).
fn declared_image(meta: &[u8]) -> Result<(GgufWriter, Vec<usize>), String> {
    let gguf = Gguf::parse_header(meta, u64::MAX).map_err(|e| format!("metadata: {e}"))?;
    let mut kvs = GgufWriter::new();
    for kv in gguf.kvs() {
        let key = String::from_utf8_lossy(kv.key);
        kvs.set(&key, MetaValue::from_value(&kv.value));
    }
    let types: HashMap<&str, GgmlType> = gguf
        .tensors()
        .iter()
        .map(|t| (t.name, t.ggml_type))
        .collect();
    // the metadata alone, loaded without tensors: hyperparameters and vocabulary checked
    // as for a file, then the architecture's table for them
    let mut probe = crate::storage::host::anonymous_file(c"llama-init-from-user")
        .map_err(|e| format!("memfd_create: {e}"))?;
    kvs.write_with(&mut probe, |_, _, _| Ok(()))
        .map_err(|e| format!("metadata: {e}"))?;
    let model = crate::loader::load(
        ModelSource::File {
            file: probe,
            base: 0,
        },
        LoadOptions {
            load_mode: LoadMode::None,
            no_alloc: true,
            progress: Some(&mut |_| true),
            hotswap: false,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    if !crate::graph::arch::declares_tensors(&model.arch) {
        let why = crate::graph::arch::METADATA_REFUSED
            .iter()
            .find(|(a, _)| *a == model.arch)
            .map_or(
                if crate::graph::arch::is_supported(&model.arch) {
                    "its tensor table from hyperparameters is not upstream's"
                } else {
                    "this library has no graph for it"
                },
                |r| r.1,
            );
        return Err(format!(
            "model architecture '{}': building it from metadata is not supported by llama-hotswap yet ({why}; see docs/dropin.md)",
            model.arch
        ));
    }
    let hp = crate::graph::arch::load_params(&model)?;
    let table = crate::graph::arch::declared_tensors(&model, &hp)
        .map_err(|e| format!("model architecture '{}': {e}", model.arch))?;
    let sequence = crate::graph::arch::creation_sequence(&model.arch, &table);
    let mut image = kvs;
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut calls = Vec::with_capacity(sequence.len());
    for w in &sequence {
        if let Some(&i) = at.get(w.name.as_str()) {
            calls.push(i);
            continue;
        }
        let ty = types.get(w.name.as_str()).copied().unwrap_or(GgmlType::F32);
        let n_dims = w.ne.iter().rposition(|&n| n != 1).map_or(1, |i| i + 1);
        image
            .add_tensor_deferred(&w.name, &w.ne[..n_dims], ty)
            .map_err(|e| format!("tensor '{}' as {}: {e}", w.name, ty.name()))?;
        let i = at.len();
        at.insert(&w.name, i);
        calls.push(i);
    }
    Ok((image, calls))
}

/// Writes `image` to a new in-memory file, each tensor's bytes made by the caller's
/// `fill` on a host `ggml_tensor` in a libggml CPU buffer over our scratch bytes. `calls`
/// holds the image tensor of each callback, in order (the image's own order is each
/// tensor's first call): a tensor's later calls fill the scratch and are dropped.
fn write_image(
    image: &GgufWriter,
    calls: &[usize],
    fill: unsafe extern "C" fn(*mut ggml_tensor, *mut c_void),
    ud: *mut c_void,
) -> Result<std::fs::File, FfiError> {
    const ALIGN: usize = 64;
    let largest = image.tensors().iter().map(|t| t.nbytes).max().unwrap_or(0) as usize;
    let mut scratch = vec![0u8; largest + ALIGN];
    let at = scratch.as_ptr().align_offset(ALIGN);
    let data = scratch[at..].as_mut_ptr();
    // SAFETY: `data` is 64-byte aligned with `largest` bytes behind it, alive (and not
    // moved) until the buffer is freed at the end of this function.
    let buffer = unsafe { super::device::cpu_buffer_from_ptr(data.cast(), largest.max(1)) }
        .ok_or_else(|| {
            FfiError::Core("libggml's ggml_backend_cpu_buffer_from_ptr is not loaded".into())
        })?;
    // one callback on the scratch bytes for `t`: the bytes it wrote
    let call = |t: &PendingTensor| -> &[u8] {
        let n = t.nbytes as usize;
        let mut ne = [1i64; 4];
        ne[..t.dims.len()].copy_from_slice(&t.dims);
        let row = t.ggml_type.row_size(ne[0]).unwrap_or(0) as usize;
        let nb = [
            t.ggml_type.type_size() as usize,
            row,
            row * ne[1] as usize,
            row * (ne[1] * ne[2]) as usize,
        ];
        // SAFETY: the first `n <= largest` scratch bytes, no other reference to them live.
        let bytes = unsafe { std::slice::from_raw_parts_mut(data, n) };
        bytes.fill(0);
        let mut view = super::eval_callback::TensorView::host(
            t.ggml_type.id() as i32,
            ne,
            nb,
            &t.name,
            data.cast(),
            buffer,
        );
        // SAFETY: the host's callback with its user data; the tensor header lives for the
        // call and its data are `n` writable bytes in `buffer`.
        unsafe {
            fill(
                (&mut view as *mut super::eval_callback::TensorView).cast(),
                ud,
            )
        };
        // SAFETY: as above; the callback has returned and the next call comes after the
        // caller is done with these bytes.
        unsafe { std::slice::from_raw_parts(data, n) }
    };
    let tensors = image.tensors();
    let mut next = 0;
    let mut file = crate::storage::host::anonymous_file(c"llama-init-from-user")
        .map_err(|e| FfiError::Core(format!("memfd_create: {e}")))?;
    let written = image.write_with(&mut file, |index, t, out| {
        // the repeated creations upstream fills before this tensor's first
        while next < calls.len() && calls[next] != index {
            call(&tensors[calls[next]]);
            next += 1;
        }
        next += 1;
        out.write_all(call(t))
    });
    if written.is_ok() {
        for &i in &calls[next.min(calls.len())..] {
            call(&tensors[i]);
        }
    }
    // SAFETY: made above, not used after this.
    unsafe { super::device::free_buffer(buffer) };
    drop(scratch);
    written.map_err(|e| FfiError::Core(format!("writing the model image: {e}")))?;
    Ok(file)
}

/// Writes the model as it is now (hot-swapped tensors included) to one GGUF file at
/// `path_model`: every tensor with its current type, shape and bytes, and the key/value
/// metadata of the model's first file (`split.*` dropped), so the file loads into the same
/// model in either library. Upstream regenerates the metadata from its hyperparameters
/// instead (see docs/dropin.md). Written to a temporary file beside `path_model` and renamed
/// into place; on failure (NULL arguments, a `no_alloc` model, an unwritable path) nothing is
/// left there and a log line says why (upstream aborts).
#[no_mangle]
pub unsafe extern "C" fn llama_model_save_to_file(
    model: *const llama_model,
    path_model: *const c_char,
) {
    boundary!("llama_model_save_to_file", (), {
        // SAFETY: NULL or a live model per the contract.
        let handle = unsafe { super::handles::model(model) }?;
        // SAFETY: a C string per the contract (checked for NULL).
        let path = unsafe { super::c_str(path_model, "path_model") }?;
        let n =
            crate::model::save::save_to_file(&handle.inner, std::path::Path::new(path.as_ref()))
                .map_err(|e| super::FfiError::Core(e.to_string()))?;
        crate::log_info!("llama_model_save_to_file: {n} tensors written to {path}");
        Ok(())
    })
}
