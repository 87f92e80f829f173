//! The model's pools a reload draws from and gives back to (staging buffers, page stages,
//! freed private buffers) and the staged actions the commit carries out.

use crate::gguf::GgmlType;
use crate::model::swap::lock;
use crate::model::swap::report::Outcome;
use crate::model::tensors::{Original, SwapState, TensorState};
use crate::model::Model;
use crate::storage::host::MOVE_MIN;
use crate::storage::{read_exact_at_parallel, ModelDevices, PageStage, TensorData, TensorLayout};

/// Gives storage a tensor no longer uses to the model's pool of private buffers: a buffer on
/// the CPU is kept for the next relocation of its size (within the pool's bounds); anything
/// else is freed. A buffer kept on a GPU would shrink the free memory that other models and
/// contexts see (and that placement reads), so only the CPU's are kept.
pub(super) fn release(model: &Model, data: TensorData) {
    if let (Some(hs), TensorData::Device(buffer)) = (&model.hotswap, data) {
        if buffer.device_index() == model.cpu_index() && buffer.host_slice().is_some() {
            lock(&hs.buffers).give(buffer);
        }
    }
}

/// Gives a staging buffer back to the model's pool (the larger one is kept).
pub(super) fn recycle(model: &Model, buf: Vec<u8>) {
    if let Some(hs) = &model.hotswap {
        let mut pool = lock(&hs.staging);
        if buf.capacity() > pool.capacity() {
            *pool = buf;
        }
    }
}

/// The page stage for an in-place reload of `len` bytes at page offset `head`, when one is
/// due: the stage made for that geometry, or a new one the second time in a row that a
/// geometry finds none (a tensor reloaded again and again; its first reload copies, as do
/// one-off reloads of tensors of other shapes, so the stage's fresh pages are paid only for
/// a tensor that comes back). None: stage and copy as usual.
pub(super) fn take_page_stage(model: &Model, head: usize, len: usize) -> Option<PageStage> {
    let hs = model.hotswap.as_ref()?;
    if len < MOVE_MIN {
        return None;
    }
    let mut slot = lock(&hs.page_stage);
    if slot.off {
        return None;
    }
    if slot
        .stage
        .as_ref()
        .is_some_and(|s| s.geometry() == (head, len))
    {
        return slot.stage.take();
    }
    if slot.missed == Some((head, len)) {
        slot.missed = None;
        slot.stage = None;
        return PageStage::new(head, len).ok();
    }
    slot.missed = Some((head, len));
    None
}

/// Gives the page stage back to the model; `refused`: the kernel would not move pages (see
/// [`crate::storage::HostRange::replace_from_stage`]), so in-place reloads copy from now on.
pub(super) fn give_page_stage(model: &Model, stage: PageStage, refused: Option<std::io::Error>) {
    if let Some(hs) = &model.hotswap {
        let mut slot = lock(&hs.page_stage);
        if let Some(e) = refused {
            crate::log_info!(
                "hot-swap: in-place reloads copy from now on (moving pages failed: {e})"
            );
            slot.off = true;
            slot.stage = None;
            return;
        }
        slot.stage = Some(stage);
    }
}

/// What the commit does to one member of a job's family.
pub(super) enum Action {
    /// Write these bytes into the current storage (same type and layout).
    WriteCurrent(Vec<u8>),
    /// Put the stage's bytes into the current storage, an arena range the stage was made for
    /// (same type and layout): its whole pages move in (`direct.rs`).
    MovePages(PageStage),
    /// Return to the original storage and write these bytes there; `fresh` replaces an
    /// original that cannot be written (a file mapping, or dropped) with owned CPU memory.
    Reattach {
        bytes: Vec<u8>,
        fresh: Option<TensorData>,
    },
    /// Return to the original, already filled with the new bytes (the direct path).
    Restore(Original),
    /// Move to new storage.
    Replace {
        layout: TensorLayout,
        data: TensorData,
        swap: SwapState,
    },
}

pub(super) struct Staged {
    pub(super) tensor: usize,
    pub(super) action: Action,
    pub(super) outcome: Option<Outcome>,
    pub(super) reason: String,
    pub(super) new_type: GgmlType,
}

/// A copy of `bytes` in CPU memory.
pub(super) fn cpu_copy(devices: &ModelDevices, bytes: &[u8]) -> Result<TensorData, String> {
    devices
        .store_on(devices.cpu(), bytes)
        .map(TensorData::Device)
        .map_err(|e| e.reason)
}

/// A tensor's current bytes without touching a file mapping: a mapped tensor is read through
/// the descriptor opened at load (a file that shrank gives a short read, never a fault).
pub(super) fn current_bytes_safe(
    model: &Model,
    m: usize,
    state: &TensorState,
) -> Result<Vec<u8>, String> {
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
pub(super) fn same_as_current(model: &Model, m: usize, state: &TensorState, bytes: &[u8]) -> bool {
    if !matches!(state.data, TensorData::Mapped { .. }) {
        if let Some(current) = state.host_bytes() {
            return current == bytes;
        }
    }
    current_bytes_safe(model, m, state).is_ok_and(|c| c == bytes)
}
