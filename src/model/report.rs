//! Reports for humans and tools: the placement of every tensor, as JSON, and the per-tensor
//! facts behind `llama_ext_tensor_info`.

use std::fmt::Write;

pub use super::json::json_string;
use super::tensors::{BufferKind, Tensor, TensorData};
use super::Model;
use crate::device::DeviceType;

fn device_type_name(t: DeviceType) -> &'static str {
    match t {
        DeviceType::Cpu => "CPU",
        DeviceType::Gpu => "GPU",
        DeviceType::Igpu => "IGPU",
        DeviceType::Accel => "ACCEL",
        DeviceType::Meta => "META",
    }
}

/// One tensor's placement facts (a consistent snapshot taken under its lock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub layer: i32,
    pub ggml_type: u32,
    pub type_name: &'static str,
    pub ne: [i64; 4],
    pub nbytes: u64,
    /// Registry index of the device holding the bytes (first slice's for a row split);
    /// -1 when unallocated.
    pub device: i32,
    pub buffer: BufferKind,
    /// Row slices: (registry device index, first, count) along the split dimension.
    pub rows: Vec<(usize, u64, u64)>,
    /// The device the placement wanted when the tensor fell back to the CPU at load.
    pub fallback_from: Option<usize>,
    pub swap_state: &'static str,
}

impl TensorInfo {
    pub fn of(tensor: &Tensor, cpu_index: usize) -> TensorInfo {
        let state = tensor.read();
        let rows = state.data.row_partition().unwrap_or_default();
        TensorInfo {
            name: tensor.name.clone(),
            layer: tensor.layer,
            ggml_type: state.layout.ggml_type.id(),
            type_name: state.layout.ggml_type.name(),
            ne: state.layout.ne,
            nbytes: state.layout.nbytes,
            // Without storage (no_alloc: a dry run) the device is where the placement put it.
            device: state
                .device_index(cpu_index)
                .or(match tensor.home {
                    crate::storage::Home::Cpu => Some(cpu_index),
                    crate::storage::Home::Device(d) => Some(d),
                    crate::storage::Home::Rows(_) => None,
                })
                .map_or(-1, |d| i32::try_from(d).unwrap_or(-1)),
            buffer: state.buffer_kind(cpu_index),
            rows,
            fallback_from: state.load_fallback_from,
            swap_state: state.swap.name(),
        }
    }
}

impl Model {
    /// The CPU's registry index for this model (the global registry's for vocab-only models).
    pub fn cpu_index(&self) -> usize {
        match &self.devices {
            Some(d) => d.cpu(),
            None => crate::device::Registry::global().cpu().index(),
        }
    }

    fn registry(&self) -> &'static crate::device::Registry {
        self.devices
            .as_ref()
            .map_or_else(crate::device::Registry::global, |d| d.registry)
    }

    /// The name of a registry device ("?" if unknown).
    pub fn device_name(&self, index: usize) -> &'static str {
        self.registry().get(index).map_or("?", |d| d.name())
    }

    pub fn tensor_info(&self, name: &str) -> Option<TensorInfo> {
        self.tensors
            .get(name)
            .map(|t| TensorInfo::of(t, self.cpu_index()))
    }

    /// The placement report (see `llama_ext_model_placement_json` for the format).
    pub fn placement_json(&self) -> String {
        let registry = self.registry();
        let cpu = self.cpu_index();
        let infos: Vec<TensorInfo> = self
            .tensors
            .iter()
            .map(|t| TensorInfo::of(t, cpu))
            .collect();
        let mut used = vec![0u64; registry.len()];
        for t in self.tensors.iter() {
            let state = t.read();
            match &state.data {
                TensorData::Unallocated => {}
                TensorData::Mapped { .. } | TensorData::Host(_) => used[cpu] += state.layout.nbytes,
                TensorData::Device(a) => used[a.device_index()] += a.len() as u64,
                TensorData::RowSplit { pieces, .. } => {
                    for p in pieces {
                        used[p.alloc.device_index()] += p.alloc.len() as u64;
                    }
                }
            }
        }
        let mut out = String::from("{\"devices\":[");
        for (i, d) in registry.devices().iter().enumerate() {
            let m = d.memory();
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"index\":{},\"name\":{},\"type\":\"{}\",\"total\":{},\"free\":{},\"used\":{}}}",
                d.index(),
                json_string(d.name()),
                device_type_name(d.device_type()),
                m.total,
                m.free,
                used[i]
            );
        }
        out.push_str("],\"tensors\":[");
        for (i, t) in infos.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let device = if t.device < 0 {
                "null".to_string()
            } else {
                json_string(self.device_name(t.device as usize))
            };
            let _ = write!(
                out,
                "{{\"name\":{},\"layer\":{},\"type\":\"{}\",\"ne\":[{},{},{},{}],\"nbytes\":{},\"device\":{},\"buffer\":\"{}\",\"swap_state\":\"{}\"",
                json_string(&t.name),
                t.layer,
                t.type_name,
                t.ne[0],
                t.ne[1],
                t.ne[2],
                t.ne[3],
                t.nbytes,
                device,
                t.buffer.name(),
                t.swap_state
            );
            if let Some(f) = t.fallback_from {
                let _ = write!(
                    out,
                    ",\"fallback_from\":{}",
                    json_string(self.device_name(f))
                );
            }
            if t.buffer == BufferKind::RowSplit {
                out.push_str(",\"rows\":[");
                for (j, (d, first, count)) in t.rows.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    let _ = write!(
                        out,
                        "{{\"device\":{},\"first\":{first},\"count\":{count}}}",
                        json_string(self.device_name(*d))
                    );
                }
                out.push(']');
            }
            out.push('}');
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }
}
