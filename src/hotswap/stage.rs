//! Staging: reading a job's bytes and preparing every new buffer of a tensor's family
//! before anything live is touched.

use crate::gguf::GgmlType;
use crate::model::swap::lock;
use crate::model::tensors::{moe_siblings, SwapState};
use crate::model::Model;
use crate::storage::data::writable;
use crate::storage::place::lcm_block;
use crate::storage::{read_exact_at_parallel, Home, ModelDevices, TensorData, TensorLayout};

use super::commit::commit;
use super::job::{Bytes, Job};
use super::outcomes::Outcomes;
use super::staged::{cpu_copy, current_bytes_safe, recycle, same_as_current, Action, Staged};
use crate::model::swap::report::Outcome;

/// Reads a job's bytes into a staging buffer (nothing live is touched). The buffer comes
/// from the model's pool when it is large enough (its pages are already resident).
pub(super) fn stage_bytes(model: &Model, job: &Job<'_>, nbytes: u64) -> Result<Vec<u8>, String> {
    let len = usize::try_from(nbytes).map_err(|_| "tensor too large".to_string())?;
    let mut buf = model
        .hotswap
        .as_ref()
        .map(|hs| std::mem::take(&mut *lock(&hs.staging)))
        .unwrap_or_default();
    match job.source {
        Bytes::Memory(data) => {
            buf.clear();
            buf.try_reserve_exact(len)
                .map_err(|_| format!("cannot allocate a {len}-byte staging buffer"))?;
            buf.extend_from_slice(data);
            Ok(buf)
        }
        Bytes::File { file, offset } => {
            // Only a grown part is zero-filled; a buffer reused for the same size is read
            // into as it is (every byte is overwritten by the read, or the job fails).
            if buf.len() < len {
                buf.try_reserve_exact(len - buf.len())
                    .map_err(|_| format!("cannot allocate a {len}-byte staging buffer"))?;
                buf.resize(len, 0);
            } else {
                buf.truncate(len);
            }
            read_exact_at_parallel(file, &mut buf, offset)
                .map_err(|e| super::direct::read_error(e, offset, len))?;
            Ok(buf)
        }
    }
}

pub(super) fn layout_for(ne: [i64; 4], ggml_type: GgmlType) -> Option<TensorLayout> {
    Some(TensorLayout {
        ggml_type,
        ne,
        nbytes: ggml_type.nbytes(ne)?,
    })
}

/// Why a member could not be staged.
pub(super) enum StageError {
    /// Nothing can be done for this tensor.
    Failed(String),
    /// A device of a row-split family is full: the whole family moves to the CPU. Carries
    /// the job's bytes back.
    FamilyFallback(String, Option<Vec<u8>>),
}

impl From<String> for StageError {
    fn from(e: String) -> Self {
        StageError::Failed(e)
    }
}

/// Stages what member `m` of a family needs to end with `target_type` in the partition
/// `target` (row-split homes) or on its home device. `bytes`: its new bytes (the job
/// tensor's) or None for a sibling (its current bytes are read when needed).
pub(super) fn stage_member(
    model: &Model,
    devices: &ModelDevices,
    m: usize,
    target_type: GgmlType,
    bytes: Option<Vec<u8>>,
    granularity: u64,
) -> Result<Option<Staged>, StageError> {
    let tensor = model.tensors.at(m);
    let state = tensor.read();
    let is_job = bytes.is_some();
    let layout = layout_for(state.layout.ne, target_type)
        .ok_or_else(|| format!("shape cannot be stored as {}", target_type.name()))?;
    let target: Vec<(usize, u64, u64)> = match tensor.home {
        Home::Rows(dim) => devices
            .partition(&layout, dim, granularity)
            .ok_or_else(|| format!("shape cannot be split as {}", target_type.name()))?,
        _ => Vec::new(),
    };
    let rows = matches!(tensor.home, Home::Rows(_));
    // Storage already holds the target type (and, for a row split, the target partition).
    let fits = |layout: &TensorLayout, data: &TensorData| {
        layout.ggml_type == target_type
            && (!rows || data.row_partition().as_deref() == Some(&target[..]))
    };
    let current_matches = fits(&state.layout, &state.data);
    let (orig_layout, orig_data) = match &state.original {
        Some(o) => (o.layout, &o.data),
        None => (state.layout, &state.data),
    };
    let original_matches = fits(&orig_layout, orig_data);

    // A sibling already laid out right needs nothing.
    if !is_job && current_matches {
        return Ok(None);
    }
    let bytes = match bytes {
        Some(b) => b,
        None => current_bytes_safe(model, m, &state)?,
    };
    let resync = if is_job {
        String::new()
    } else {
        "MoE family partition resync".to_string()
    };
    let staged = |action, outcome, reason: String| Staged {
        tensor: m,
        action,
        outcome,
        reason,
        new_type: target_type,
    };

    if state.swap != SwapState::OnOriginal && original_matches {
        let fresh = if writable(orig_data) {
            None
        } else {
            Some(cpu_copy(devices, &bytes)?)
        };
        return Ok(Some(staged(
            Action::Reattach { bytes, fresh },
            Some(Outcome::ReturnedToOriginal),
            resync,
        )));
    }
    if current_matches && writable(&state.data) {
        if same_as_current(model, m, &state, &bytes) {
            recycle(model, bytes);
            return Ok(None);
        }
        return Ok(Some(staged(
            Action::WriteCurrent(bytes),
            Some(Outcome::ReloadedInPlace),
            resync,
        )));
    }
    if current_matches && state.swap == SwapState::OnOriginal {
        // Still reading through a file mapping. The same bytes: the mapping stays (its
        // inode is intact, or the caller moves it off after an in-place write). New bytes:
        // the original becomes owned CPU memory.
        let same = same_as_current(model, m, &state, &bytes);
        if same {
            recycle(model, bytes);
            return Ok(None);
        }
        let fresh = cpu_copy(devices, &bytes)?;
        return Ok(Some(staged(
            Action::Reattach {
                bytes,
                fresh: Some(fresh),
            },
            Some(Outcome::Relocated),
            "moved off the file mapping".to_string(),
        )));
    }
    let (data, swap, outcome, reason) = match devices
        .store(tensor.home, &layout, granularity, &bytes)
        .map_err(|e| e.reason)
    {
        Ok(data) => (data, SwapState::Detached, Outcome::Relocated, resync),
        Err(e) if tensor.home == Home::Cpu => return Err(StageError::Failed(e)),
        Err(e) => {
            if rows {
                // The family moves to the CPU together; the caller handles it.
                return Err(StageError::FamilyFallback(e, is_job.then_some(bytes)));
            }
            let data = cpu_copy(devices, &bytes)
                .map_err(|c| format!("{e}; CPU fallback failed too: {c}"))?;
            (
                data,
                SwapState::FallbackCpu,
                Outcome::CpuFallback,
                format!("{e}; placed on CPU"),
            )
        }
    };
    recycle(model, bytes);
    Ok(Some(staged(
        Action::Replace { layout, data, swap },
        Some(outcome),
        reason,
    )))
}

/// Stages a member onto the CPU (family fallback).
pub(super) fn stage_on_cpu(
    model: &Model,
    devices: &ModelDevices,
    m: usize,
    target_type: GgmlType,
    bytes: Option<Vec<u8>>,
    why: &str,
) -> Result<Staged, String> {
    let state = model.tensors.at(m).read();
    let layout = layout_for(state.layout.ne, target_type)
        .ok_or_else(|| format!("shape cannot be stored as {}", target_type.name()))?;
    let bytes = match bytes {
        Some(b) => b,
        None => current_bytes_safe(model, m, &state)?,
    };
    let data = cpu_copy(devices, &bytes)?;
    Ok(Staged {
        tensor: m,
        action: Action::Replace {
            layout,
            data,
            swap: SwapState::FallbackCpu,
        },
        outcome: Some(Outcome::CpuFallback),
        reason: why.to_string(),
        new_type: target_type,
    })
}

pub(super) fn run_job(model: &Model, job: Job<'_>, out: &mut Outcomes) {
    let i = job.tensor;
    let tensor = model.tensors.at(i);
    let Some(devices) = model.devices.as_ref() else {
        out.refuse_for_good(model, i, Some(job.new_type), "vocab-only model".into());
        return;
    };
    let (ne, unallocated) = {
        let s = tensor.read();
        (
            s.layout.ne,
            matches!(s.data, TensorData::Unallocated) && !s.lost,
        )
    };
    if unallocated {
        out.refuse_for_good(
            model,
            i,
            Some(job.new_type),
            "the model was loaded with no_alloc: the tensor has no storage".into(),
        );
        return;
    }
    let Some(new_layout) = layout_for(ne, job.new_type) else {
        out.refuse(
            model,
            i,
            Some(job.new_type),
            "invalid type for the shape".into(),
        );
        return;
    };
    if super::direct::try_run(model, devices, &job, new_layout, out) {
        return;
    }
    let bytes = match stage_bytes(model, &job, new_layout.nbytes) {
        Ok(b) => b,
        Err(reason) => {
            out.fail_transient(model, i, Some(job.new_type), reason);
            return;
        }
    };

    if model.hotswap.as_ref().is_some_and(|hs| hs.check_tensors) {
        if let Some(why) = crate::gguf::validate::find_invalid(job.new_type, &bytes) {
            recycle(model, bytes);
            out.refuse(
                model,
                i,
                Some(job.new_type),
                format!("invalid data (the model was loaded with check_tensors): {why}"),
            );
            return;
        }
    }

    // The family that must share one partition (just the tensor unless it is a row-split
    // MoE expert tensor).
    let mut family = vec![i];
    if matches!(tensor.home, Home::Rows(_)) {
        for s in moe_siblings(&tensor.name) {
            if let Some(j) = model.tensors.index_of(&s) {
                if matches!(model.tensors.at(j).home, Home::Rows(_)) {
                    family.push(j);
                }
            }
        }
    }
    let type_of = |m: usize| {
        if m == i {
            job.new_type
        } else {
            model.tensors.at(m).read().layout.ggml_type
        }
    };
    let granularity = lcm_block(family.iter().map(|&m| type_of(m)));

    let mut staged = Vec::with_capacity(family.len());
    let mut own_bytes = Some(bytes);
    let mut family_fallback: Option<String> = None;
    for &m in &family {
        let b = if m == i { own_bytes.take() } else { None };
        match stage_member(model, devices, m, type_of(m), b, granularity) {
            Ok(Some(s)) => staged.push(s),
            Ok(None) => {}
            Err(StageError::FamilyFallback(why, returned)) => {
                if returned.is_some() {
                    own_bytes = returned;
                }
                family_fallback = Some(why);
                break;
            }
            Err(StageError::Failed(e)) => {
                out.fail_transient(model, i, Some(job.new_type), e);
                return;
            }
        }
    }
    if let Some(why) = family_fallback {
        // Re-stage every member on the CPU (the job tensor with its new bytes).
        staged.clear();
        let bytes = match own_bytes.take() {
            Some(b) => b,
            None => match stage_bytes(model, &job, new_layout.nbytes) {
                Ok(b) => b,
                Err(reason) => {
                    out.fail_transient(model, i, Some(job.new_type), reason);
                    return;
                }
            },
        };
        let mut own = Some(bytes);
        let reason = format!("{why}; the MoE family moved to CPU");
        for &m in &family {
            let b = if m == i { own.take() } else { None };
            match stage_on_cpu(model, devices, m, type_of(m), b, &reason) {
                Ok(s) => staged.push(s),
                Err(e) => {
                    out.fail_transient(
                        model,
                        i,
                        Some(job.new_type),
                        format!("{why}; CPU fallback failed too: {e}"),
                    );
                    return;
                }
            }
        }
    }
    commit(model, staged, out);
}
