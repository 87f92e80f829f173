//! Planning: checking a tensor against a new header (shape, presence, data range) into a
//! job or a refusal; the jobs of a reload from another file and of a set from memory; the
//! order jobs run in.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::gguf::{GgmlType, Gguf, TensorInfo};
use crate::model::swap::lock;
use crate::model::tensors::SwapState;
use crate::model::Model;

use super::job::{Bytes, Job};
use super::outcomes::{finish, hotswap_of, HotSwapError, Outcomes};
use super::stage::run_job;
use crate::model::swap::report::{Outcome, Report};

/// Why a changed file could not be opened and parsed.
pub(super) struct OpenFailure {
    pub(super) reason: String,
    /// The failure says something about what is at the path (gone, not a regular file, not a
    /// valid header), as opposed to a transient one (out of descriptors, I/O error) that the
    /// next call must retry.
    pub(super) about_content: bool,
}

impl From<OpenFailure> for String {
    fn from(f: OpenFailure) -> String {
        f.reason
    }
}

/// Opens a GGUF (a regular file only, without blocking) and reads its header through the
/// returned descriptor.
pub(super) fn open_gguf(path: &Path) -> Result<(File, crate::gguf::GgufHeader), OpenFailure> {
    let file = crate::storage::file::open_regular(path, 0).map_err(|e| OpenFailure {
        reason: format!("cannot open: {e}"),
        about_content: matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput
        ),
    })?;
    let size = file
        .metadata()
        .map_err(|e| OpenFailure {
            reason: format!("cannot stat: {e}"),
            about_content: false,
        })?
        .len();
    let header =
        crate::gguf::read_header_from(&file, size, crate::gguf::file::DEFAULT_MAX_HEADER_BYTES)
            .map_err(|e| OpenFailure {
                reason: format!("invalid GGUF header: {e}"),
                about_content: true,
            })?;
    Ok((file, header))
}

/// Checks tensor `i` against a new header; returns its job, or reports why not.
#[allow(clippy::too_many_arguments)]
pub(super) fn plan<'a>(
    model: &Model,
    i: usize,
    info: Option<&TensorInfo<'_>>,
    gguf: &Gguf<'_>,
    file: &'a File,
    file_size: u64,
    path: &Path,
    out: &mut Outcomes,
) -> Option<Job<'a>> {
    let tensor = model.tensors.at(i);
    let Some(info) = info else {
        out.refuse(
            model,
            i,
            None,
            format!("tensor is missing from {}", path.display()),
        );
        return None;
    };
    let live_ne = tensor.read().layout.ne;
    if info.ne != live_ne {
        out.refuse(
            model,
            i,
            Some(info.ggml_type),
            format!(
                "shape changed in {}: {:?} in the file, {:?} in the model (shapes never change)",
                path.display(),
                info.ne,
                live_ne
            ),
        );
        return None;
    }
    let offset = info.abs_offset(gguf);
    let end = offset.checked_add(info.nbytes);
    if end.map_or(true, |e| e > file_size) {
        out.fail(
            model,
            i,
            Some(info.ggml_type),
            format!(
                "{}: data range {offset}..{} is past the end of the file ({file_size} bytes): \
                 truncated or still being written",
                path.display(),
                offset.saturating_add(info.nbytes)
            ),
        );
        return None;
    }
    Some(Job {
        tensor: i,
        new_type: info.ggml_type,
        source: Bytes::File { file, offset },
    })
}

/// Reloads every tensor of the model from another GGUF (or split set) with the same tensor
/// names and shapes.
pub fn reload_from_file(model: &Model, path: &Path) -> Result<Arc<Report>, HotSwapError> {
    let hs = hotswap_of(model)?;
    let watch = lock(&hs.watch);
    let file_error = |p: &Path, reason: String| HotSwapError::File {
        path: p.display().to_string(),
        reason,
    };
    let (first, header) = open_gguf(path).map_err(|r| file_error(path, r.into()))?;
    let gguf = header.gguf().map_err(|e| file_error(path, e.to_string()))?;
    let count = match gguf.get("split.count") {
        Some(crate::gguf::Value::U16(n)) => *n,
        _ => 1,
    };
    let mut shards: Vec<(File, crate::gguf::GgufHeader, PathBuf)> = Vec::new();
    drop(gguf);
    shards.push((first, header, path.to_path_buf()));
    if count > 1 {
        let text = path.to_string_lossy().into_owned();
        let prefix = crate::model::split::split_prefix(&text, 0, i32::from(count))
            .ok_or_else(|| file_error(path, "not the first shard of a split set".into()))?;
        for n in 1..i32::from(count) {
            let shard = PathBuf::from(crate::model::split::split_path(prefix, n, i32::from(count)));
            let (f, h) = open_gguf(&shard).map_err(|r| file_error(&shard, r.into()))?;
            shards.push((f, h, shard));
        }
    }
    let mut out = Outcomes::default();
    let mut found = vec![false; model.tensors.len()];
    let mut jobs = Vec::new();
    let parsed: Vec<Gguf<'_>> = shards
        .iter()
        .map(|(_, h, p)| h.gguf().map_err(|e| file_error(p, e.to_string())))
        .collect::<Result<_, _>>()?;
    for ((file, _, shard_path), gguf) in shards.iter().zip(&parsed) {
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        for info in gguf.tensors() {
            let Some(i) = model.tensors.index_of(info.name) else {
                continue;
            };
            found[i] = true;
            if let Some(job) = plan(model, i, Some(info), gguf, file, size, shard_path, &mut out) {
                jobs.push(job);
            }
        }
    }
    for (i, seen) in found.iter().enumerate() {
        if !seen {
            out.refuse(
                model,
                i,
                None,
                format!("tensor is missing from {}", path.display()),
            );
        }
    }
    run_jobs(model, jobs, &mut out);
    drop(watch);
    Ok(finish(model, hs, out))
}

/// Replaces one tensor from host memory (`data` in `ggml_type`, the tensor's shape).
pub fn tensor_set(
    model: &Model,
    name: &str,
    ggml_type: i32,
    data: &[u8],
) -> Result<Arc<Report>, HotSwapError> {
    let hs = hotswap_of(model)?;
    let watch = lock(&hs.watch);
    let mut out = Outcomes::default();
    let Some(i) = model.tensors.index_of(name) else {
        return Err(HotSwapError::Invalid(format!("no tensor named '{name}'")));
    };
    let new_type = GgmlType::from_id(ggml_type)
        .filter(|t| t.type_size() > 0)
        .ok_or_else(|| HotSwapError::Invalid(format!("invalid ggml type {ggml_type}")))?;
    let ne = model.tensors.at(i).read().layout.ne;
    let blck = new_type.block_size().max(1) as i64;
    match new_type.nbytes(ne) {
        Some(n) if ne[0] % blck == 0 && n == data.len() as u64 => {
            let job = Job {
                tensor: i,
                new_type,
                source: Bytes::Memory(data),
            };
            run_jobs(model, vec![job], &mut out);
            if out.entries.iter().all(|e| e.name != name) {
                // The tensor already held exactly these bytes: done, nothing to move.
                out.push(
                    model,
                    i,
                    Outcome::ReloadedInPlace,
                    Some(new_type),
                    "bytes unchanged".into(),
                );
            }
        }
        Some(n) if ne[0] % blck == 0 => out.refuse(
            model,
            i,
            Some(new_type),
            format!(
                "{} bytes given, a {} tensor of shape {ne:?} has {n}",
                data.len(),
                new_type.name()
            ),
        ),
        _ => out.refuse(
            model,
            i,
            Some(new_type),
            format!(
                "shape {ne:?} cannot be stored as {} (row length not a multiple of {blck})",
                new_type.name()
            ),
        ),
    }
    drop(watch);
    Ok(finish(model, hs, out))
}

/// Replaces several tensors from host memory as one transaction (`(name, type, bytes)` each,
/// the shapes unchanged): everything is checked first (an unknown name, a tensor named
/// twice, a size that does not fit the type and shape: an error, nothing changed); then all
/// are written, and when any write is refused or fails, the ones already written are put
/// back to the type and bytes they had, so the model is either wholly the new set or as it
/// was. One report (each tensor of a set not applied is `refused`, saying why), one
/// generation bump.
pub fn tensors_set(
    model: &Model,
    items: &[(&str, GgmlType, &[u8])],
) -> Result<Arc<Report>, HotSwapError> {
    let hs = hotswap_of(model)?;
    let watch = lock(&hs.watch);
    let mut idx: Vec<usize> = Vec::with_capacity(items.len());
    for &(name, ty, data) in items {
        let i = model
            .tensors
            .index_of(name)
            .ok_or_else(|| HotSwapError::Invalid(format!("no tensor named '{name}'")))?;
        if idx.contains(&i) {
            return Err(HotSwapError::Invalid(format!(
                "'{name}' is named twice in one set"
            )));
        }
        let ne = model.tensors.at(i).read().layout.ne;
        match ty.nbytes(ne) {
            Some(n) if n == data.len() as u64 => {}
            Some(n) => {
                return Err(HotSwapError::Invalid(format!(
                    "'{name}': {} bytes given, a {} tensor of shape {ne:?} has {n}",
                    data.len(),
                    ty.name()
                )))
            }
            None => {
                return Err(HotSwapError::Invalid(format!(
                    "'{name}': shape {ne:?} cannot be stored as {}",
                    ty.name()
                )))
            }
        }
        idx.push(i);
    }
    // What each tensor holds now, to put back if the set cannot be applied whole (None
    // without storage: such a tensor is refused, so nothing of it needs putting back).
    let saved: Vec<Option<(GgmlType, Vec<u8>)>> = idx
        .iter()
        .map(|&i| {
            let state = model.tensors.at(i).read();
            let mut bytes = vec![0u8; state.layout.nbytes as usize];
            state
                .read_into(&mut bytes)
                .ok()
                .map(|()| (state.layout.ggml_type, bytes))
        })
        .collect();
    let jobs = idx
        .iter()
        .zip(items)
        .map(|(&i, &(_, new_type, data))| Job {
            tensor: i,
            new_type,
            source: Bytes::Memory(data),
        })
        .collect();
    let mut out = Outcomes::default();
    run_jobs(model, jobs, &mut out);
    let failed = |o: Outcome| matches!(o, Outcome::Refused | Outcome::Failed);
    if let Some(first) = out.entries.iter().find(|e| failed(e.outcome)) {
        let why = format!(
            "'{}' was {}: {}",
            first.name,
            first.outcome.name(),
            first.reason
        );
        let written: Vec<usize> = (0..idx.len())
            .filter(|&k| {
                let name = &model.tensors.at(idx[k]).name;
                out.entries
                    .iter()
                    .any(|e| &e.name == name && !failed(e.outcome))
            })
            .collect();
        let mut back = Outcomes::default();
        let mut lost = Vec::new();
        let back_jobs = written
            .iter()
            .filter_map(|&k| match &saved[k] {
                Some((ty, bytes)) => Some(Job {
                    tensor: idx[k],
                    new_type: *ty,
                    source: Bytes::Memory(bytes),
                }),
                None => {
                    lost.push(idx[k]);
                    None
                }
            })
            .collect();
        run_jobs(model, back_jobs, &mut back);
        for e in &mut out.entries {
            if !failed(e.outcome) {
                e.outcome = Outcome::Refused;
                e.reason = format!("not applied: the set is all or nothing, and {why}");
            }
        }
        for e in back.entries.iter().filter(|e| failed(e.outcome)) {
            if let Some(i) = model.tensors.index_of(&e.name) {
                out.fail(
                    model,
                    i,
                    None,
                    format!("could not be put back after the set failed: {}", e.reason),
                );
            }
        }
        for i in lost {
            out.fail(
                model,
                i,
                None,
                "could not be put back: its bytes were unreadable".into(),
            );
        }
        out.relocated |= back.relocated;
        out.retry |= back.retry;
    }
    drop(watch);
    Ok(finish(model, hs, out))
}

/// Runs jobs, tensors returning to their original type first.
pub(super) fn run_jobs(model: &Model, mut jobs: Vec<Job<'_>>, out: &mut Outcomes) {
    let returning = |job: &Job<'_>| {
        let state = model.tensors.at(job.tensor).read();
        state.swap != SwapState::OnOriginal
            && state.original.as_ref().map(|o| o.layout.ggml_type) == Some(job.new_type)
    };
    let flags: Vec<bool> = jobs.iter().map(returning).collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&k| !flags[k]);
    let mut sorted: Vec<Option<Job<'_>>> = jobs.drain(..).map(Some).collect();
    for k in order {
        if let Some(job) = sorted[k].take() {
            run_job(model, job, out);
        }
    }
}
