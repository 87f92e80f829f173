//! Commit: applying staged actions under the members' write locks.

use crate::model::tensors::{Original, SwapState};
use crate::model::Model;
use crate::storage::data::write_storage;
use crate::storage::{Replaced, TensorData};

use super::outcomes::{device_label, Outcomes};
use super::staged::{give_page_stage, recycle, release, Action, Staged};
use crate::model::swap::report::{Outcome, ReportEntry};

/// Applies staged actions under the members' write locks (taken in index order). Private
/// buffers the tensors stop using go to the model's pool after the locks are released.
pub(super) fn commit(model: &Model, mut staged: Vec<Staged>, out: &mut Outcomes) {
    staged.sort_by_key(|s| s.tensor);
    let mut guards: Vec<_> = staged
        .iter()
        .map(|s| model.tensors.at(s.tensor).write())
        .collect();
    let mut results = Vec::with_capacity(staged.len());
    let mut freed: Vec<TensorData> = Vec::new();
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
            Action::MovePages(mut stage) => {
                let layout = state.layout;
                // The storage the stage was made for (reloads are serialized, so it cannot
                // change in between); replace_from_stage checks that it fits.
                let (written, refused) = match &mut state.data {
                    TensorData::Host(range) => match range.replace_from_stage(&mut stage) {
                        Ok(Replaced::Moved(_)) => (Ok(()), None),
                        Ok(Replaced::Copied(refused)) => (Ok(()), refused),
                        Err(e) => (Err(e.to_string()), None),
                    },
                    data => (write_storage(&layout, data, stage.bytes()), None),
                };
                give_page_stage(model, stage, refused);
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
                // The private buffer (if any) is replaced by the original.
                freed.push(std::mem::replace(&mut state.data, data));
                state.swap = SwapState::OnOriginal;
                written
            }
            Action::Restore(original) => {
                relocated = true;
                state.layout = original.layout;
                freed.push(std::mem::replace(&mut state.data, original.data));
                state.original = None;
                state.swap = SwapState::OnOriginal;
                Ok(())
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
                } else {
                    freed.push(previous);
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
    for data in freed {
        release(model, data);
    }
    for (m, outcome, reason, old_type, new_type, result) in results {
        let (outcome, reason) = match result {
            Ok(()) => match outcome {
                Some(o) => (o, reason),
                None => continue,
            },
            Err(e) => {
                out.retry = true;
                (Outcome::Failed, format!("write failed: {e}"))
            }
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
