//! Moving tensors off the mapping of a file that changed, into owned memory.

use crate::model::Model;
use crate::storage::{read_exact_at_parallel, TensorData};

use super::outcomes::Outcomes;
use super::staged::cpu_copy;

/// After a file changed: every tensor of it still reading through its (now stale) mapping
/// moves to owned memory, read through the descriptor opened at load (a read past a shrunken
/// end is a short read, never a fault).
pub(super) fn migrate_off_mapping(model: &Model, fi: usize, ours: &[usize], out: &mut Outcomes) {
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
