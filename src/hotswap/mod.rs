//! Hot-swap of individual tensors from GGUF files on disk into a loaded model.
//!
//! # The flow
//! * **Gate.** [`ENV`] is read when a model loads ([`enabled_by_env`]); off → nothing is
//!   registered and every reload entry point reports [`HotSwapError::Disabled`].
//! * **Registration** (at load): every shard's path and identity (device, inode, size,
//!   mtime and ctime with nanoseconds), and for every tensor its shard and data offset.
//! * **Snapshot** (at load): the loaded storage *is* the original, so no copy is made; when a
//!   tensor is first detached its original storage, layout and row partition are moved aside
//!   ([`crate::model::tensors::Original`]) and kept until it returns.
//! * **Detection** (each call): one `stat` per file; a file changed when any identity field
//!   differs. A changed file is opened once; its header and its data are read through that
//!   one descriptor, so a rename in between cannot pair one file's header with another's bytes.
//!   Shape changes and missing tensors are refused; a file whose data ends early (truncated or
//!   still being written) fails as a whole (its header does not validate). The file's new
//!   identity is recorded either way, so a refused tensor is looked at again the next time
//!   its file changes (not on every call).
//! * **Jobs** run tensors returning to their original type first (their private buffers are
//!   freed before new ones are allocated).
//! * **Transactional per tensor.** Bytes are read into a staging buffer and every new buffer is
//!   allocated and filled before the live tensor is touched; the commit swaps storage under
//!   the tensor's write lock (readers hold its read lock, so none sees a torn tensor). Any
//!   failure leaves the tensor exactly as it was and is reported.
//! * **MoE families** (`ffn_{gate,up,down}_exps` of one layer, split mode ROW) keep one row
//!   partition, computed for the least common multiple of the members' block sizes; a member
//!   whose partition no longer matches is re-laid out (or reattached to its original when that
//!   matches again); a failed device allocation moves the whole family to the CPU.
//! * **Invalidation.** Any relocation or retype bumps the model's generation, which every
//!   context compares with the generation its cached graph was built for. A tensor written in
//!   place (same type, size and placement) keeps its storage and bumps nothing.
//! * **Mappings.** Tensors are never written through a file mapping. When a file changes,
//!   every tensor still reading through that file's mapping moves to owned memory at that call
//!   (from the new file when it reloads, else from the descriptor opened at load, which reads
//!   safely even if the file shrank).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use thiserror::Error;

use crate::gguf::{GgmlType, Gguf, TensorInfo};
use crate::model::swap::{lock, WatchedFile};
use crate::model::tensors::{moe_siblings, Original, SwapState, TensorState};
use crate::model::Model;
use crate::storage::data::{read_data, writable, write_storage};
use crate::storage::place::lcm_block;
use crate::storage::{
    read_exact_at_parallel, FileIdentity, Home, ModelDevices, TensorData, TensorLayout,
};

pub use crate::model::swap::report::{Outcome, Report, ReportEntry};
pub use crate::model::swap::{enabled_by_env, is_enabling_value, HotSwap, ENV};

/// Why a reload call as a whole did not run (per-tensor problems go into the report).
#[derive(Debug, Error)]
pub enum HotSwapError {
    #[error("hot-swap is disabled for this model (set {ENV}=1 before loading it)")]
    Disabled,
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

/// Where a job's bytes come from.
enum Bytes<'a> {
    File { file: &'a File, offset: u64 },
    Memory(&'a [u8]),
}

struct Job<'a> {
    tensor: usize,
    new_type: GgmlType,
    source: Bytes<'a>,
}

/// What one call did, gathered while it runs.
#[derive(Default)]
struct Outcomes {
    entries: Vec<ReportEntry>,
    relocated: bool,
}

fn hotswap_of(model: &Model) -> Result<&HotSwap, HotSwapError> {
    model.hotswap.as_ref().ok_or(HotSwapError::Disabled)
}

/// Polls every watched file and reloads the tensors of those that changed.
pub fn reload_changed(model: &Model) -> Result<Arc<Report>, HotSwapError> {
    let hs = hotswap_of(model)?;
    let mut watch = lock(&hs.watch);
    let mut out = Outcomes::default();
    for (fi, watched) in watch.iter_mut().enumerate() {
        let Some(path) = watched.path.as_deref() else {
            continue;
        };
        let now = std::fs::metadata(path).ok().map(|m| FileIdentity::of(&m));
        if now == watched.identity {
            continue;
        }
        watched.identity = now;
        reload_file(model, fi, watched, &mut out);
    }
    drop(watch);
    Ok(finish(model, hs, out))
}

/// Handles one changed shard: parse its header once, reload its tensors from it.
fn reload_file(model: &Model, fi: usize, watched: &mut WatchedFile, out: &mut Outcomes) {
    let ours = &watched.tensors;
    let Some(path) = watched.path.as_deref() else {
        return;
    };
    let opened = open_gguf(path);
    let (file, header) = match opened {
        Ok(x) => x,
        Err(reason) => {
            crate::log_warn!("hot-swap: {}: {reason}", path.display());
            for &i in ours {
                out.fail(model, i, None, format!("{}: {reason}", path.display()));
            }
            migrate_off_mapping(model, fi, ours, out);
            return;
        }
    };
    // The identity of what we actually opened (the path may have moved on since the stat).
    let meta = file.metadata().ok();
    let file_size = meta.as_ref().map_or(0, |m| m.len());
    let opened_identity = meta.map(|m| FileIdentity::of(&m));
    let gguf = match header.gguf() {
        Ok(g) => g,
        Err(e) => {
            for &i in ours {
                out.fail(model, i, None, format!("{}: {e}", path.display()));
            }
            migrate_off_mapping(model, fi, ours, out);
            watched.identity = opened_identity.or(watched.identity);
            return;
        }
    };
    let by_name: HashMap<&str, &TensorInfo<'_>> =
        gguf.tensors().iter().map(|t| (t.name, t)).collect();
    let mut jobs = Vec::new();
    for &i in ours {
        let info = by_name.get(model.tensors.at(i).name.as_str()).copied();
        if let Some(job) = plan(model, i, info, &gguf, &file, file_size, path, out) {
            jobs.push(job);
        }
    }
    run_jobs(model, jobs, out);
    migrate_off_mapping(model, fi, ours, out);
    watched.identity = opened_identity.or(watched.identity);
}

/// Opens a GGUF and reads its header through the returned descriptor.
fn open_gguf(path: &Path) -> Result<(File, crate::gguf::GgufHeader), String> {
    let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let size = file
        .metadata()
        .map_err(|e| format!("cannot stat: {e}"))?
        .len();
    let header =
        crate::gguf::read_header_from(&file, size, crate::gguf::file::DEFAULT_MAX_HEADER_BYTES)
            .map_err(|e| format!("invalid GGUF header: {e}"))?;
    Ok((file, header))
}

/// Checks tensor `i` against a new header; returns its job, or reports why not.
#[allow(clippy::too_many_arguments)]
fn plan<'a>(
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
    let (first, header) = open_gguf(path).map_err(|r| file_error(path, r))?;
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
            let (f, h) = open_gguf(&shard).map_err(|r| file_error(&shard, r))?;
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

fn finish(model: &Model, hs: &HotSwap, out: Outcomes) -> Arc<Report> {
    if out.relocated {
        model.generation.fetch_add(1, Ordering::AcqRel);
    }
    let report = Arc::new(Report::new(
        model.generation.load(Ordering::Acquire),
        out.entries,
    ));
    for e in &report.entries {
        let line = format!(
            "hot-swap: tensor '{}': {} ({} -> {}) on {}{}{}",
            e.name,
            e.outcome.name(),
            e.old_type.name(),
            e.new_type.name(),
            e.device,
            if e.reason.is_empty() { "" } else { ": " },
            e.reason
        );
        match e.outcome {
            Outcome::Refused | Outcome::Failed => crate::log_warn!("{line}"),
            Outcome::CpuFallback => crate::log_warn!("{line}"),
            _ => crate::log_info!("{line}"),
        }
    }
    *lock(&hs.report) = Arc::clone(&report);
    report
}

impl Outcomes {
    fn push(
        &mut self,
        model: &Model,
        i: usize,
        outcome: Outcome,
        new_type: Option<GgmlType>,
        reason: String,
    ) {
        let t = model.tensors.at(i);
        let state = t.read();
        let old_type = state.layout.ggml_type;
        self.entries.push(ReportEntry {
            name: t.name.clone(),
            outcome,
            reason,
            old_type,
            new_type: new_type.unwrap_or(old_type),
            device: device_label(model, &state),
        });
    }

    fn refuse(&mut self, model: &Model, i: usize, new_type: Option<GgmlType>, reason: String) {
        self.push(model, i, Outcome::Refused, new_type, reason);
    }

    fn fail(&mut self, model: &Model, i: usize, new_type: Option<GgmlType>, reason: String) {
        self.push(model, i, Outcome::Failed, new_type, reason);
    }
}

/// "CPU", "VGPU0", or "VGPU0,VGPU1" for a row split.
fn device_label(model: &Model, state: &TensorState) -> String {
    let cpu = model.cpu_index();
    match &state.data {
        TensorData::RowSplit { pieces, .. } => pieces
            .iter()
            .map(|p| model.device_name(p.alloc.device_index()))
            .collect::<Vec<_>>()
            .join(","),
        _ => state
            .device_index(cpu)
            .map_or("none".to_string(), |d| model.device_name(d).to_string()),
    }
}

/// Runs jobs, tensors returning to their original type first.
fn run_jobs(model: &Model, mut jobs: Vec<Job<'_>>, out: &mut Outcomes) {
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

/// Gives a staging buffer back to the model's pool (the larger one is kept).
fn recycle(model: &Model, buf: Vec<u8>) {
    if let Some(hs) = &model.hotswap {
        let mut pool = lock(&hs.staging);
        if buf.capacity() > pool.capacity() {
            *pool = buf;
        }
    }
}

/// Reads a job's bytes into a staging buffer (nothing live is touched). The buffer comes
/// from the model's pool when it is large enough (its pages are already resident).
fn stage_bytes(model: &Model, job: &Job<'_>, nbytes: u64) -> Result<Vec<u8>, String> {
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
            read_exact_at_parallel(file, &mut buf, offset).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    format!("short read: the file ends inside the tensor's data (offset {offset}, {len} bytes)")
                } else {
                    format!("read error at offset {offset}: {e}")
                }
            })?;
            Ok(buf)
        }
    }
}

fn layout_for(ne: [i64; 4], ggml_type: GgmlType) -> Option<TensorLayout> {
    Some(TensorLayout {
        ggml_type,
        ne,
        nbytes: ggml_type.nbytes(ne)?,
    })
}

/// What the commit does to one member of a job's family.
enum Action {
    /// Write these bytes into the current storage (same type and layout).
    WriteCurrent(Vec<u8>),
    /// Return to the original storage and write these bytes there; `fresh` replaces an
    /// original that cannot be written (a file mapping, or dropped) with owned CPU memory.
    Reattach {
        bytes: Vec<u8>,
        fresh: Option<TensorData>,
    },
    /// Move to new storage.
    Replace {
        layout: TensorLayout,
        data: TensorData,
        swap: SwapState,
    },
}

struct Staged {
    tensor: usize,
    action: Action,
    outcome: Option<Outcome>,
    reason: String,
    new_type: GgmlType,
}

/// A copy of `bytes` in CPU memory.
fn cpu_copy(devices: &ModelDevices, bytes: &[u8]) -> Result<TensorData, String> {
    devices
        .store_on(devices.cpu(), bytes)
        .map(TensorData::Device)
        .map_err(|e| e.reason)
}

/// Why a member could not be staged.
enum StageError {
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
fn stage_member(
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
        // Still reading through a file mapping: the original becomes owned CPU memory.
        let same = same_as_current(model, m, &state, &bytes);
        let fresh = cpu_copy(devices, &bytes)?;
        return Ok(Some(staged(
            Action::Reattach {
                bytes,
                fresh: Some(fresh),
            },
            if same { None } else { Some(Outcome::Relocated) },
            if same {
                String::new()
            } else {
                "moved off the file mapping".to_string()
            },
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

/// A tensor's current bytes without touching a file mapping: a mapped tensor is read through
/// the descriptor opened at load (a file that shrank gives a short read, never a fault).
fn current_bytes_safe(model: &Model, m: usize, state: &TensorState) -> Result<Vec<u8>, String> {
    let len = usize::try_from(state.layout.nbytes).map_err(|_| "tensor too large".to_string())?;
    let mut bytes = vec![0u8; len];
    if matches!(state.data, TensorData::Mapped { .. }) {
        let tensor = model.tensors.at(m);
        let source = &model.files[tensor.source.file_index];
        read_exact_at_parallel(&source.file, &mut bytes, source.base + tensor.source.offset)
            .map_err(|e| format!("cannot read the loaded bytes back: {e}"))?;
    } else {
        state.read_into(&mut bytes).map_err(|e| e.to_string())?;
    }
    Ok(bytes)
}

/// Whether the tensor already holds exactly `bytes`, compared in place when its storage is
/// host memory (no copy), else through a copy read without touching a mapping.
fn same_as_current(model: &Model, m: usize, state: &TensorState, bytes: &[u8]) -> bool {
    if !matches!(state.data, TensorData::Mapped { .. }) {
        if let Some(current) = state.host_bytes() {
            return current == bytes;
        }
    }
    current_bytes_safe(model, m, state).is_ok_and(|c| c == bytes)
}

/// Stages a member onto the CPU (family fallback).
fn stage_on_cpu(
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

fn run_job(model: &Model, job: Job<'_>, out: &mut Outcomes) {
    let i = job.tensor;
    let tensor = model.tensors.at(i);
    let Some(devices) = model.devices.as_ref() else {
        out.refuse(model, i, Some(job.new_type), "vocab-only model".into());
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
        out.refuse(
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
    let bytes = match stage_bytes(model, &job, new_layout.nbytes) {
        Ok(b) => b,
        Err(reason) => {
            out.fail(model, i, Some(job.new_type), reason);
            return;
        }
    };

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
                out.fail(model, i, Some(job.new_type), e);
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
                    out.fail(model, i, Some(job.new_type), reason);
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
                    out.fail(
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

/// Applies staged actions under the members' write locks (taken in index order).
fn commit(model: &Model, mut staged: Vec<Staged>, out: &mut Outcomes) {
    staged.sort_by_key(|s| s.tensor);
    let mut guards: Vec<_> = staged
        .iter()
        .map(|s| model.tensors.at(s.tensor).write())
        .collect();
    let mut results = Vec::with_capacity(staged.len());
    for (s, state) in staged.into_iter().zip(guards.iter_mut()) {
        let old_type = state.layout.ggml_type;
        let mut relocated = false;
        let result: Result<(), String> = match s.action {
            Action::WriteCurrent(bytes) => {
                let layout = state.layout;
                let written = write_storage(&layout, &mut state.data, &bytes);
                recycle(model, bytes);
                written
            }
            Action::Reattach { bytes, fresh } => {
                relocated = true;
                let original = state.original.take();
                let (layout, mut data) = match original {
                    Some(o) => (o.layout, o.data),
                    None => (
                        state.layout,
                        std::mem::replace(&mut state.data, TensorData::Unallocated),
                    ),
                };
                let written = match fresh {
                    Some(f) => {
                        data = f;
                        Ok(())
                    }
                    None => write_storage(&layout, &mut data, &bytes),
                };
                recycle(model, bytes);
                state.layout = layout;
                state.data = data; // the private buffer (if any) was replaced by `original`
                state.swap = SwapState::OnOriginal;
                written
            }
            Action::Replace { layout, data, swap } => {
                relocated = true;
                let previous = std::mem::replace(&mut state.data, data);
                let previous_layout = std::mem::replace(&mut state.layout, layout);
                if state.swap == SwapState::OnOriginal {
                    // Keep the original aside; a file mapping is not kept (it may be stale).
                    let kept = if matches!(previous, TensorData::Mapped { .. }) {
                        TensorData::Unallocated
                    } else {
                        previous
                    };
                    state.original = Some(Original {
                        layout: previous_layout,
                        data: kept,
                    });
                }
                state.swap = swap;
                Ok(())
            }
        };
        if relocated {
            out.relocated = true;
        }
        if result.is_ok() && !matches!(state.data, TensorData::Unallocated) {
            state.lost = false;
        }
        results.push((s.tensor, s.outcome, s.reason, old_type, s.new_type, result));
    }
    drop(guards);
    for (m, outcome, reason, old_type, new_type, result) in results {
        let (outcome, reason) = match result {
            Ok(()) => match outcome {
                Some(o) => (o, reason),
                None => continue,
            },
            Err(e) => (Outcome::Failed, format!("write failed: {e}")),
        };
        let t = model.tensors.at(m);
        let state = t.read();
        out.entries.push(ReportEntry {
            name: t.name.clone(),
            outcome,
            reason,
            old_type,
            new_type,
            device: device_label(model, &state),
        });
    }
}

/// After a file changed: every tensor of it still reading through its (now stale) mapping
/// moves to owned memory, read through the descriptor opened at load (a read past a shrunken
/// end is a short read, never a fault).
fn migrate_off_mapping(model: &Model, fi: usize, ours: &[usize], out: &mut Outcomes) {
    let Some(devices) = model.devices.as_ref() else {
        return;
    };
    let source = &model.files[fi];
    for &i in ours {
        let tensor = model.tensors.at(i);
        let (layout, mapped) = {
            let s = tensor.read();
            (s.layout, matches!(s.data, TensorData::Mapped { .. }))
        };
        if !mapped {
            continue;
        }
        let mut bytes = vec![0u8; layout.nbytes as usize];
        let read =
            read_exact_at_parallel(&source.file, &mut bytes, source.base + tensor.source.offset);
        match read
            .map_err(|e| e.to_string())
            .and_then(|_| cpu_copy(devices, &bytes))
        {
            Ok(data) => {
                let mut state = tensor.write();
                if matches!(state.data, TensorData::Mapped { .. }) {
                    state.data = data;
                    out.relocated = true;
                }
            }
            Err(e) => {
                // The file was cut under its mapping: reading it would fault. The bytes are
                // gone; the tensor reads as an error until a complete file reloads it.
                let mut state = tensor.write();
                if matches!(state.data, TensorData::Mapped { .. }) {
                    state.data = TensorData::Unallocated;
                    state.lost = true;
                    out.relocated = true;
                }
                drop(state);
                crate::log_error!(
                    "hot-swap: tensor '{}': {} was changed in place and its bytes cannot be \
                     read back ({e}); the tensor has no data until a complete file is reloaded. \
                     Replace model files by renaming new files into place.",
                    tensor.name,
                    source.display_name()
                );
                if out.entries.iter().all(|x| x.name != tensor.name) {
                    out.fail(model, i, None, format!("bytes lost: {e}"));
                }
            }
        }
    }
}

/// The bytes of a tensor as it is now (for tests and tools).
pub fn current_bytes(model: &Model, name: &str) -> Option<Vec<u8>> {
    let t = model.tensors.get(name)?;
    let s = t.read();
    let mut b = vec![0u8; s.layout.nbytes as usize];
    read_data(&s.layout, &s.data, &mut b).ok()?;
    Some(b)
}
