//! Where each tensor of a model goes: upstream's layer placement ([`compute_placement`]),
//! buffer-type overrides, split mode ROW, and the home of every tensor that hot-swap returns
//! to later. The rules that name a tensor's layer and split dimension live here too: they
//! decide where its bytes go.

use crate::device::placement::{PlacementError, MAX_DEVICES};
use crate::device::{
    compute_placement, LayerDevice, MemoryInfo, PlacementRequest, Registry, SplitMode,
};
use crate::device::{Device, DeviceAllocation, DeviceError};
use crate::gguf::GgmlType;

use super::data::{RowPiece, SplitDim, SplitGeometry, TensorData, TensorLayout};

/// What `llama_model_params` says about devices, validated and resolved to registry indices.
#[derive(Clone, Debug)]
pub struct PlacementParams {
    /// The device registry to place on (the process-wide one, or a test's).
    pub registry: &'static Registry,
    /// `params.devices` as registry indices; None → upstream's default list (the GPUs).
    pub devices: Option<Vec<usize>>,
    pub n_gpu_layers: i32,
    pub split_mode: SplitMode,
    pub main_gpu: i32,
    pub tensor_split: Option<[f32; MAX_DEVICES]>,
    /// `tensor_buft_overrides`: (pattern, registry index of the buffer type's device).
    pub overrides: Vec<(String, usize)>,
}

impl Default for PlacementParams {
    fn default() -> Self {
        PlacementParams {
            registry: Registry::global(),
            devices: None,
            n_gpu_layers: -1,
            split_mode: SplitMode::Layer,
            main_gpu: 0,
            tensor_split: None,
            overrides: Vec::new(),
        }
    }
}

/// Where a tensor belongs (its home: where it was loaded, and where hot-swap allocates it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    Cpu,
    /// A registry index (never the CPU's).
    Device(usize),
    /// Split by rows across the model's devices along this dimension.
    Rows(SplitDim),
}

/// The model's devices and split points, kept for hot-swap (row partitions are recomputed
/// from them when a tensor's type changes).
#[derive(Clone, Debug)]
pub struct ModelDevices {
    pub registry: &'static Registry,
    pub split_mode: SplitMode,
    /// The model's devices, as registry indices.
    pub devices: Vec<usize>,
    /// Cumulative split points, parallel to `devices`.
    pub splits: Vec<f32>,
    /// The device of layers `0..=n_layer` (last: output); None is the CPU.
    pub layers: Vec<Option<usize>>,
    pub n_layer: u32,
    pub i_gpu_start: i64,
    pub act_gpu_layers: i64,
}

/// One device's share of a row-split tensor: elements `first .. first + count` along the
/// split dimension, on registry device `device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub device: usize,
    pub first: u64,
    pub count: u64,
}

impl ModelDevices {
    /// Computes the placement (upstream's rules) for a model with `n_layer` blocks.
    pub fn compute(params: &PlacementParams, n_layer: u32) -> Result<ModelDevices, PlacementError> {
        let registry = params.registry;
        let candidates: Vec<usize> = match &params.devices {
            Some(list) => list.clone(),
            None => registry
                .default_model_devices()
                .iter()
                .map(|d| d.index())
                .collect(),
        };
        let memory: Vec<MemoryInfo> = candidates
            .iter()
            .map(|&i| registry.get(i).map(|d| d.memory()).unwrap_or_default())
            .collect();
        let placement = compute_placement(&PlacementRequest {
            n_layer,
            n_gpu_layers: params.n_gpu_layers,
            split_mode: params.split_mode,
            main_gpu: params.main_gpu,
            tensor_split: params.tensor_split,
            devices: &memory,
            cpu_memory: registry.cpu().memory(),
        })?;
        let devices: Vec<usize> = placement.devices.iter().map(|&i| candidates[i]).collect();
        let layers = placement
            .layers
            .iter()
            .map(|l| match l {
                LayerDevice::Cpu => None,
                LayerDevice::Gpu(i) => Some(candidates[*i]),
            })
            .collect();
        Ok(ModelDevices {
            registry,
            split_mode: params.split_mode,
            devices,
            splits: placement.splits,
            layers,
            n_layer,
            i_gpu_start: placement.i_gpu_start,
            act_gpu_layers: placement.act_gpu_layers,
        })
    }

    /// The device of a layer role (None: CPU).
    pub fn layer_device(&self, role: LayerRole) -> Option<usize> {
        match role {
            LayerRole::Input => None,
            LayerRole::Repeating(il) => self.layers.get(il as usize).copied().flatten(),
            LayerRole::Output => self.layers.last().copied().flatten(),
        }
    }

    /// A tensor's home before overrides: its layer's device, or a row split for the
    /// matrices of offloaded repeating layers in split mode ROW.
    pub fn home(&self, name: &str, role: LayerRole, ne: [i64; 4]) -> Home {
        let cpu = self.registry.cpu().index();
        match self.layer_device(role) {
            None => Home::Cpu,
            Some(d) if d == cpu => Home::Cpu,
            Some(d) => {
                let splittable = matches!(role, LayerRole::Repeating(_))
                    && self.split_mode == SplitMode::Row
                    && self.devices.len() > 1;
                match row_split_dim(name, ne) {
                    Some(dim) if splittable => Home::Rows(dim),
                    _ => Home::Device(d),
                }
            }
        }
    }

    /// The slices of `len` elements along the split dimension, each boundary rounded down to
    /// a multiple of `granularity` (empty slices dropped; they cover `0..len` exactly).
    pub fn row_slices(&self, len: u64, granularity: u64) -> Vec<Slice> {
        crate::device::row_split(len, granularity, &self.splits)
            .into_iter()
            .map(|s| Slice {
                device: self.devices[s.device],
                first: s.first_row,
                count: s.n_rows,
            })
            .collect()
    }

    /// The registry index of the CPU.
    pub fn cpu(&self) -> usize {
        self.registry.cpu().index()
    }

    /// The row partition of a tensor laid out as `layout`, cut along `dim`, as
    /// (device, first, count) — the form [`TensorData::row_partition`] reports.
    pub fn partition(
        &self,
        layout: &TensorLayout,
        dim: SplitDim,
        granularity: u64,
    ) -> Option<Vec<(usize, u64, u64)>> {
        let geometry = SplitGeometry::of(layout, dim)?;
        Some(
            self.row_slices(geometry.len(), granularity)
                .into_iter()
                .map(|s| (s.device, s.first, s.count))
                .collect(),
        )
    }

    /// A copy of `bytes` on registry device `device`.
    pub fn store_on(&self, device: usize, bytes: &[u8]) -> Result<DeviceAllocation, AllocFailure> {
        self.allocate_on(device, |target| target.allocate_copy(bytes))
    }

    /// `allocate` on registry device `device`, its failure (or a missing device) as an
    /// [`AllocFailure`].
    fn allocate_on(
        &self,
        device: usize,
        allocate: impl FnOnce(&Device) -> Result<DeviceAllocation, DeviceError>,
    ) -> Result<DeviceAllocation, AllocFailure> {
        let target = self.registry.get(device).ok_or_else(|| AllocFailure {
            device,
            reason: "no such device".to_string(),
        })?;
        allocate(target).map_err(|e| AllocFailure {
            device,
            reason: e.to_string(),
        })
    }

    /// New storage of `len` bytes on device `device`, filled straight from `file` at
    /// `offset`: no host copy of the bytes (a CUDA device stages them through its page-locked
    /// buffers, and a mapping of the file is never touched).
    pub fn store_from_file(
        &self,
        device: usize,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Result<TensorData, StoreFromFileError> {
        let mut alloc = self
            .allocate_on(device, |target| target.allocate_for_overwrite(len as u64))
            .map_err(StoreFromFileError::Alloc)?;
        alloc
            .fill_from_file(file, offset, 0, len)
            .map_err(StoreFromFileError::Read)?;
        Ok(TensorData::Device(alloc))
    }

    /// New storage holding a copy of `bytes` (laid out as `layout`) at `home`: on the CPU, on
    /// one device, or as row slices rounded to `granularity`. Used by loading and hot-swap.
    pub fn store(
        &self,
        home: Home,
        layout: &TensorLayout,
        granularity: u64,
        bytes: &[u8],
    ) -> Result<TensorData, AllocFailure> {
        let copy_on = |d: usize, part: &[u8]| self.store_on(d, part);
        match home {
            Home::Cpu => copy_on(self.cpu(), bytes).map(TensorData::Device),
            Home::Device(d) => copy_on(d, bytes).map(TensorData::Device),
            Home::Rows(dim) => {
                let geometry = SplitGeometry::of(layout, dim).ok_or_else(|| AllocFailure {
                    device: self.cpu(),
                    reason: format!("shape cannot be split as {}", layout.ggml_type.name()),
                })?;
                let mut pieces = Vec::new();
                for slice in self.row_slices(geometry.len(), granularity) {
                    let part = geometry.gather(bytes, slice.first, slice.count);
                    pieces.push(RowPiece {
                        first: slice.first,
                        count: slice.count,
                        alloc: copy_on(slice.device, &part)?,
                    });
                }
                Ok(TensorData::RowSplit { dim, pieces })
            }
        }
    }
}

/// Why [`ModelDevices::store_from_file`] failed: no room on the device, or the read.
#[derive(Debug)]
pub enum StoreFromFileError {
    Alloc(AllocFailure),
    Read(std::io::Error),
}

/// Why [`ModelDevices::store`] failed: the device that had no room (or was missing), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocFailure {
    pub device: usize,
    pub reason: String,
}

impl std::fmt::Display for AllocFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The least common multiple of the block sizes (a partition valid for every type).
pub fn lcm_block(types: impl IntoIterator<Item = GgmlType>) -> u64 {
    types.into_iter().fold(1u64, |acc, t| {
        let b = t.block_size().max(1);
        acc / gcd(acc, b) * b
    })
}

/// The row granularity for a tensor: its type's block size, or for an MoE expert tensor the
/// least common multiple over its family's current types (`type_of` looks siblings up).
pub fn granularity_for(
    name: &str,
    own: GgmlType,
    type_of: impl Fn(&str) -> Option<GgmlType>,
) -> u64 {
    if moe_member(name).is_none() {
        return own.block_size().max(1);
    }
    let siblings = moe_siblings(name);
    lcm_block(std::iter::once(own).chain(siblings.iter().filter_map(|s| type_of(s))))
}

/// What a tensor is for placement: input layer, a repeating layer, or the output layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerRole {
    Input,
    Repeating(u32),
    Output,
}

/// A tensor's role for placement, from its name: `blk.N.*` is repeating layer N; the token,
/// token type and position embeddings are the input layer; every other tensor belongs to the
/// output layer (`output.weight`, `output_norm.weight`, classifier heads, …).
pub fn role_of(name: &str) -> LayerRole {
    let layer = layer_of(name);
    if layer >= 0 {
        return LayerRole::Repeating(layer as u32);
    }
    const INPUT_PREFIXES: [&str; 5] = [
        "token_embd",
        "token_types",
        "position_embd",
        "pos_embd",
        "tok_embd",
    ];
    if INPUT_PREFIXES.iter().any(|p| name.starts_with(p)) {
        LayerRole::Input
    } else {
        LayerRole::Output
    }
}

/// The layer index of a `blk.N.` tensor name.
pub fn layer_of(name: &str) -> i32 {
    name.strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// The MoE expert tensors that must share one row partition: `blk.N.ffn_{gate,up,down}_exps.*`.
pub const MOE_FAMILY: [&str; 3] = ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"];

/// For an expert tensor name, its family member kind (index into [`MOE_FAMILY`]).
pub fn moe_member(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    let (_, tail) = rest.split_once('.')?;
    let kind = tail.split('.').next()?;
    MOE_FAMILY.iter().position(|k| *k == kind)
}

/// The names of the other members of an expert tensor's family (same layer, same suffix).
pub fn moe_siblings(name: &str) -> Vec<String> {
    let Some(member) = moe_member(name) else {
        return Vec::new();
    };
    let kind = MOE_FAMILY[member];
    MOE_FAMILY
        .iter()
        .filter(|k| **k != kind)
        .map(|k| name.replacen(kind, k, 1))
        .collect()
}

/// The dimension a tensor is cut along in split mode ROW, or None when it is not split:
/// matrices (2-D) along rows; MoE gate/up experts along rows (dim 1) and down experts along
/// columns (dim 0), the expert FFN dimension in both cases.
pub fn row_split_dim(name: &str, ne: [i64; 4]) -> Option<SplitDim> {
    match moe_member(name) {
        Some(2) => Some(0),
        Some(_) => Some(1),
        None if ne[1] > 1 && ne[2] == 1 && ne[3] == 1 => Some(1),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcm_of_block_sizes() {
        assert_eq!(lcm_block([GgmlType::F16, GgmlType::Q4_0]), 32);
        assert_eq!(lcm_block([GgmlType::Q4_0, GgmlType::Q4_K]), 256);
        assert_eq!(lcm_block([]), 1);
    }
}
