//! Layouts derived from a tensor's bytes for the CPU kernels: upstream's repacked weights
//! (`CPU_REPACK` buffer type, `kernels::cpu::repack`).
//!
//! Which tensors (as upstream's loader decides): weights on the CPU that feed MUL_MAT, 2-D,
//! of a type and shape `ggml_repack_get_optimal_repack_type` repacks on this CPU, when the
//! model was loaded with `use_extra_bufts` (the default). The token embeddings feed GET_ROWS
//! and keep their plain bytes; when the output projection is tied to them, upstream loads a
//! second, repacked copy for the output MUL_MAT, and so do we (GET_ROWS still reads the plain
//! bytes).
//!
//! In an owned load (no mmap) the repacked layout replaces the plain bytes: their pages go
//! back to the OS ([`crate::model::tensors::Tensor::release_plain`]) and readers of the
//! bytes un-repack them (`TensorState::read_into`, `plain_bytes`); with a mapping the file's
//! pages stay and the repacked layout is extra, as upstream.
//!
//! The derived layout lives beside the tensor's bytes under the tensor's lock
//! ([`TensorState::derived`]): made at load ([`derive_all`]), dropped by any write of the
//! tensor (hot-swap), made again right after a reload ([`derive()`]) or, failing that, on the
//! next use. Only the swapped tensor is repacked again.

use crate::kernels::cpu::{repack, repack_kind, Repacked};
use crate::model::tensors::TensorState;
use crate::model::Model;

/// The derived layout of a tensor (made now if it is due and missing), or None when the tensor
/// has none: the MUL_MAT path uses it instead of the plain bytes.
pub fn repacked<'a>(model: &Model, state: &'a TensorState) -> Option<&'a Repacked> {
    if !model.use_extra_bufts {
        return None;
    }
    state.derived.get_or_init(|| make(model, state)).as_ref()
}

fn make(model: &Model, state: &TensorState) -> Option<Repacked> {
    let cpu = model.cpu_index();
    if state.device_index(cpu) != Some(cpu) || state.lost {
        return None;
    }
    let l = &state.layout;
    let kind = repack_kind(l.ggml_type, l.ne)?;
    let bytes = state.host_bytes()?;
    Some(repack::repack(
        kind,
        l.ggml_type,
        bytes,
        l.ne[1] as usize,
        l.ne[0] as usize,
    ))
}

/// Whether tensor `name` feeds a MUL_MAT in upstream's graphs (every 2-D weight of the
/// supported architectures but the token embeddings, which do too when no `output.weight`
/// exists: the tied output projection).
fn feeds_mul_mat(model: &Model, name: &str) -> bool {
    if name.starts_with("token_embd.") {
        return model.tensors.get("output.weight").is_none();
    }
    true
}

/// Makes the derived layout of tensor `index` now (after a load or a reload), when it is due.
pub fn derive(model: &Model, index: usize) {
    let tensor = model.tensors.at(index);
    if !feeds_mul_mat(model, &tensor.name) {
        return;
    }
    let made = repacked(model, &tensor.read()).is_some();
    // An owned load keeps the repacked layout only (upstream's `CPU_REPACK` buffer holds the
    // weight once); the token embeddings keep their plain bytes for GET_ROWS.
    if made && !tensor.name.starts_with("token_embd.") {
        tensor.release_plain();
    }
}

/// Makes every derived layout due at load (upstream repacks while loading).
pub fn derive_all(model: &Model) {
    if !model.use_extra_bufts {
        return;
    }
    let mut made = (0usize, 0usize);
    for index in 0..model.tensors.len() {
        derive(model, index);
        if let Some(Some(r)) = model.tensors.at(index).read().derived.get() {
            made = (made.0 + 1, made.1 + r.nbytes());
        }
    }
    if made.0 > 0 {
        crate::log_info!(
            "repack: {} tensors repacked for the CPU ({:.2} MiB)",
            made.0,
            made.1 as f64 / (1024.0 * 1024.0)
        );
    }
}
