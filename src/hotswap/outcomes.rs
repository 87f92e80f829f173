//! What one reload call gathers and how it ends: per-tensor outcomes, the report and its log
//! lines (a leaf of this room: every step imports it, it imports none of them).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use thiserror::Error;

use crate::gguf::GgmlType;
use crate::model::swap::report::{Outcome, Report, ReportEntry};
use crate::model::swap::{lock, HotSwap, ENV};
use crate::model::tensors::TensorState;
use crate::model::Model;
use crate::storage::TensorData;

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

/// What one call did, gathered while it runs.
#[derive(Default)]
pub(super) struct Outcomes {
    pub(super) entries: Vec<ReportEntry>,
    pub(super) relocated: bool,
    /// A transient failure (read, allocation) happened: the file's new identity is not
    /// recorded, so the next call tries again.
    pub(super) retry: bool,
    /// Tensors refused for what they are, not for what a file holds (no storage, a
    /// vocab-only model): no later file can swap them, and the log says so in ik_llama.cpp's
    /// words, which GGUF-Tool-Suite's sweep reads to reload the whole model instead.
    pub(super) unswappable: Vec<usize>,
}

pub(super) fn hotswap_of(model: &Model) -> Result<&HotSwap, HotSwapError> {
    model.hotswap.as_ref().ok_or(HotSwapError::Disabled)
}

pub(super) fn finish(model: &Model, hs: &HotSwap, out: Outcomes) -> Arc<Report> {
    // The tensors written by this call lost their derived (repacked) layouts: make them again
    // now rather than in the next decode.
    for e in &out.entries {
        if let Some(i) = model.tensors.index_of(&e.name) {
            crate::model::derived::derive(model, i);
        }
    }
    if out.relocated {
        model.generation.fetch_add(1, Ordering::AcqRel);
    }
    let out_unswappable = out.unswappable;
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
            Outcome::Refused
                if out_unswappable
                    .iter()
                    .any(|&i| model.tensors.at(i).name == e.name) =>
            {
                crate::log_warn!("{line}");
                crate::log_warn!(
                    "hotswap: tensor '{}' cannot be hot-swapped: {}",
                    e.name,
                    e.reason
                );
            }
            Outcome::Refused | Outcome::Failed => crate::log_warn!("{line}"),
            Outcome::CpuFallback => crate::log_warn!("{line}"),
            _ => crate::log_info!("{line}"),
        }
    }
    *lock(&hs.report) = Arc::clone(&report);
    report
}

impl Outcomes {
    pub(super) fn push(
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

    /// [`Outcomes::refuse`] for a tensor no file can ever swap (see `unswappable`).
    pub(super) fn refuse_for_good(
        &mut self,
        model: &Model,
        i: usize,
        new_type: Option<GgmlType>,
        reason: String,
    ) {
        self.unswappable.push(i);
        self.refuse(model, i, new_type, reason);
    }

    pub(super) fn refuse(
        &mut self,
        model: &Model,
        i: usize,
        new_type: Option<GgmlType>,
        reason: String,
    ) {
        self.push(model, i, Outcome::Refused, new_type, reason);
    }

    pub(super) fn fail(
        &mut self,
        model: &Model,
        i: usize,
        new_type: Option<GgmlType>,
        reason: String,
    ) {
        self.push(model, i, Outcome::Failed, new_type, reason);
    }

    /// A failure that may pass (I/O, allocation): reported, and retried by the next call.
    pub(super) fn fail_transient(
        &mut self,
        model: &Model,
        i: usize,
        new_type: Option<GgmlType>,
        reason: String,
    ) {
        self.retry = true;
        self.fail(model, i, new_type, reason);
    }
}

/// "CPU", "VGPU0", "VGPU0,VGPU1" for a row split, or "RPC0[host:port]" on an rpc-server
/// (upstream's name for the device, with the host the swap went to).
pub(super) fn device_label(model: &Model, state: &TensorState) -> String {
    let cpu = model.cpu_index();
    match &state.data {
        TensorData::Device(a) if a.rpc_buffer().is_some() => format!(
            "{}[{}]",
            model.device_name(a.device_index()),
            a.rpc_buffer().map_or("?", |b| b.server().endpoint())
        ),
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
