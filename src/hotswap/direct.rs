//! The direct path of a job: when the tensor lives on one device whose memory the host can
//! write (the CPU, a virtual GPU), a relocation reads its new bytes straight into its new
//! private buffer (one kept in the model's pool when one of that size is there), and a return
//! to the original reads them straight into the original storage. No staging buffer, no
//! copy, and with a pooled buffer no page faults: the cost is the read.
//!
//! An in-place reload (same type) of a tensor in an owned arena reads into a page stage laid
//! out at the tensor's in-page offset; the commit moves its whole pages into the tensor and
//! the tensor's old pages into the stage (`mremap`, no copy; see
//! [`crate::storage::HostRange::replace_from_stage`]). The stage is made the second time in
//! a row that a tensor of its geometry is reloaded (before that, and for smaller tensors, the
//! staged path copies).
//!
//! Nothing live is touched until the commit: the new private buffer is the job's own, and
//! the original is not live while the tensor is detached (readers use the private buffer,
//! and a return always rewrites the original in full). It is taken out of the tensor's state
//! while it is filled (reload calls are serialized by the model's hot-swap lock, the only
//! other users of the original) and put back if the read or the validation fails.

use crate::device::DeviceAllocation;
use crate::model::swap::lock;
use crate::model::tensors::{Original, SwapState};
use crate::model::Model;
use crate::storage::data::data_host_bytes_mut;
use crate::storage::{read_exact_at_parallel, Home, ModelDevices, TensorData, TensorLayout};

use super::commit::commit;
use super::job::{Bytes, Job};
use super::outcomes::Outcomes;
use super::staged::{give_page_stage, same_as_current, take_page_stage, Action, Staged};
use crate::model::swap::report::Outcome;

/// Where the new bytes go.
enum Target {
    /// Back into the original storage (the tensor returns to it).
    Original,
    /// Into a new private buffer on this registry device.
    NewBuffer(usize),
    /// Into a page stage whose whole pages then move into the tensor's arena range (same
    /// type); the range starts at this page offset.
    InPlace(usize),
}

/// Fills `dst` with the job's bytes (the same messages as the staged path).
pub(super) fn fill(source: &Bytes<'_>, dst: &mut [u8]) -> Result<(), String> {
    match source {
        Bytes::Memory(data) => {
            if data.len() != dst.len() {
                return Err(format!(
                    "{} bytes given for a {}-byte tensor",
                    data.len(),
                    dst.len()
                ));
            }
            dst.copy_from_slice(data);
            Ok(())
        }
        Bytes::File { file, offset } => read_exact_at_parallel(file, dst, *offset)
            .map_err(|e| read_error(e, *offset, dst.len())),
    }
}

pub(super) fn read_error(e: std::io::Error, offset: u64, len: usize) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        format!("short read: the file ends inside the tensor's data (offset {offset}, {len} bytes)")
    } else {
        format!("read error at offset {offset}: {e}")
    }
}

/// Why filled bytes cannot be committed.
enum Rejected {
    /// Reading failed: transient, retried by the next call.
    Read(String),
    /// check_tensors found invalid data: refused.
    Invalid(String),
}

fn fill_checked(model: &Model, job: &Job<'_>, dst: &mut [u8]) -> Result<(), Rejected> {
    fill(&job.source, dst).map_err(Rejected::Read)?;
    if model.hotswap.as_ref().is_some_and(|hs| hs.check_tensors) {
        if let Some(why) = crate::gguf::validate::find_invalid(job.new_type, dst) {
            return Err(Rejected::Invalid(format!(
                "invalid data (the model was loaded with check_tensors): {why}"
            )));
        }
    }
    Ok(())
}

fn report_rejected(model: &Model, job: &Job<'_>, rejected: Rejected, out: &mut Outcomes) {
    match rejected {
        Rejected::Read(reason) => out.fail_transient(model, job.tensor, Some(job.new_type), reason),
        Rejected::Invalid(reason) => out.refuse(model, job.tensor, Some(job.new_type), reason),
    }
}

/// Whether the host can write this device's memory in place.
fn host_writable_device(devices: &ModelDevices, device: usize) -> bool {
    device == devices.cpu() || devices.registry.get(device).is_some_and(|d| d.is_virtual())
}

/// Runs `job` on the direct path when it applies (see the module doc); returns false when it
/// does not, and the caller stages the job as usual. `layout` is the job's new layout.
pub(super) fn try_run(
    model: &Model,
    devices: &ModelDevices,
    job: &Job<'_>,
    layout: TensorLayout,
    out: &mut Outcomes,
) -> bool {
    let Some(hs) = model.hotswap.as_ref() else {
        return false;
    };
    let tensor = model.tensors.at(job.tensor);
    let device = match tensor.home {
        Home::Cpu => devices.cpu(),
        Home::Device(d) => d,
        Home::Rows(_) => return false,
    };
    let Ok(len) = usize::try_from(layout.nbytes) else {
        return false;
    };
    // The same decisions as `stage_member` for a one-device tensor, for the two cases that
    // write no live storage: a return to a writable original, and a type change.
    let target = {
        let state = tensor.read();
        let original_type = state.original.as_ref().map(|o| o.layout.ggml_type);
        if state.swap != SwapState::OnOriginal && original_type == Some(job.new_type) {
            let writable = state.original.as_ref().is_some_and(|o| {
                matches!(o.data, TensorData::Host(_) | TensorData::Device(_))
                    && o.layout.nbytes == layout.nbytes
                    && original_host_len(o) == Some(len)
            });
            if !writable {
                return false;
            }
            Target::Original
        } else if state.layout.ggml_type != job.new_type && !state.lost {
            if !host_writable_device(devices, device) {
                return false;
            }
            Target::NewBuffer(device)
        } else if state.layout.ggml_type == job.new_type && !state.lost {
            match &state.data {
                TensorData::Host(range) if range.len() == len => {
                    Target::InPlace(range.in_page_offset())
                }
                _ => return false,
            }
        } else {
            return false;
        }
    };
    match target {
        Target::Original => {
            let Some(mut original) = tensor.write().original.take() else {
                return false;
            };
            let filled = match data_host_bytes_mut(&mut original.data, layout.nbytes) {
                Some(dst) => fill_checked(model, job, dst),
                None => Err(Rejected::Read(
                    "the original storage is not host memory".into(),
                )),
            };
            if let Err(rejected) = filled {
                // Put it back: the tensor stays detached, on its private buffer, as it was.
                tensor.write().original = Some(original);
                report_rejected(model, job, rejected, out);
                return true;
            }
            commit(
                model,
                vec![Staged {
                    tensor: job.tensor,
                    action: Action::Restore(original),
                    outcome: Some(Outcome::ReturnedToOriginal),
                    reason: String::new(),
                    new_type: job.new_type,
                }],
                out,
            );
            true
        }
        Target::InPlace(head) => {
            let Some(mut stage) = take_page_stage(model, head, len) else {
                return false;
            };
            if let Err(rejected) = fill_checked(model, job, stage.bytes_mut()) {
                give_page_stage(model, stage, None);
                report_rejected(model, job, rejected, out);
                return true;
            }
            // The same bytes as now: nothing to do (as on the staged path).
            if same_as_current(model, job.tensor, &tensor.read(), stage.bytes()) {
                give_page_stage(model, stage, None);
                return true;
            }
            commit(
                model,
                vec![Staged {
                    tensor: job.tensor,
                    action: Action::MovePages(stage),
                    outcome: Some(Outcome::ReloadedInPlace),
                    reason: String::new(),
                    new_type: job.new_type,
                }],
                out,
            );
            true
        }
        Target::NewBuffer(device) => {
            let pooled = lock(&hs.buffers).take(device, len);
            let mut buffer: DeviceAllocation = match pooled {
                Some(b) => b,
                None => match devices.registry.get(device).map(|d| d.allocate(len as u64)) {
                    Some(Ok(b)) => b,
                    // No room: the staged path allocates again and falls back to the CPU
                    // when the device stays full.
                    _ => return false,
                },
            };
            let filled = match buffer.host_slice_mut() {
                Some(dst) => fill_checked(model, job, dst),
                None => Err(Rejected::Read("the new buffer is not host memory".into())),
            };
            if let Err(rejected) = filled {
                lock(&hs.buffers).give(buffer);
                report_rejected(model, job, rejected, out);
                return true;
            }
            commit(
                model,
                vec![Staged {
                    tensor: job.tensor,
                    action: Action::Replace {
                        layout,
                        data: TensorData::Device(buffer),
                        swap: SwapState::Detached,
                    },
                    outcome: Some(Outcome::Relocated),
                    reason: String::new(),
                    new_type: job.new_type,
                }],
                out,
            );
            true
        }
    }
}

/// The length of the original's bytes when they are host memory the host can write.
fn original_host_len(original: &Original) -> Option<usize> {
    match &original.data {
        TensorData::Host(r) => Some(r.len()),
        TensorData::Device(a) => a.host_slice().map(|s| s.len()),
        _ => None,
    }
}
