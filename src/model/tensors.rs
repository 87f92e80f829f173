//! The model's tensors: what each one is (type, shape, layer), where its bytes came from, and
//! where they live now. Hot-swap replaces a tensor's state under its lock, so readers never
//! see a torn tensor.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::device::DeviceAllocation;
use crate::gguf::GgmlType;
use crate::loader::place::Home;

/// Type and shape; the type may change on hot-swap (the shape never does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorLayout {
    pub ggml_type: GgmlType,
    pub ne: [i64; 4],
    pub nbytes: u64,
}

impl TensorLayout {
    /// ggml's byte strides `nb` for this type and shape.
    pub fn nb(&self) -> [u64; 4] {
        let type_size = self.ggml_type.type_size();
        let blck = self.ggml_type.block_size().max(1);
        let nb0 = type_size;
        let nb1 = type_size * (self.ne[0].max(0) as u64 / blck);
        let nb2 = nb1 * self.ne[1].max(0) as u64;
        let nb3 = nb2 * self.ne[2].max(0) as u64;
        [nb0, nb1, nb2, nb3]
    }
}

/// Where a tensor's bytes are in its file (GGUF-relative absolute offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSource {
    pub file_index: usize,
    pub offset: u64,
}

/// Which dimension a row-split tensor is cut along: 1 (rows) for matrices and the MoE
/// gate/up experts, 0 (columns, whole blocks) for the MoE down experts, so that the three
/// share one partition of the expert FFN dimension.
pub type SplitDim = usize;

/// One device's part of a row-split tensor: elements `first .. first + count` along the
/// split dimension, for every index of the other dimensions, stored contiguously.
#[derive(Debug)]
pub struct RowPiece {
    pub first: u64,
    pub count: u64,
    pub alloc: DeviceAllocation,
}

/// Where the bytes live now.
#[derive(Debug)]
pub enum TensorData {
    /// `no_alloc`: sizes only.
    Unallocated,
    /// Zero-copy view into a read-only file mapping (CPU).
    Mapped {
        map: Arc<memmap2::Mmap>,
        offset: usize,
    },
    /// A range of an owned arena (CPU, owned load modes).
    Host(crate::loader::file::HostRange),
    /// A buffer of its own on one device (a GPU, or the CPU after a fallback or a swap).
    Device(DeviceAllocation),
    /// Split by rows across devices (split mode ROW).
    RowSplit {
        dim: SplitDim,
        pieces: Vec<RowPiece>,
    },
}

impl TensorData {
    /// For row-split storage, each piece's (registry device, first, count); else None.
    pub fn row_partition(&self) -> Option<Vec<(usize, u64, u64)>> {
        match self {
            TensorData::RowSplit { pieces, .. } => Some(
                pieces
                    .iter()
                    .map(|p| (p.alloc.device_index(), p.first, p.count))
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// The buffer kinds of the placement report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    None,
    Mapped,
    Host,
    Device,
    RowSplit,
}

impl BufferKind {
    pub fn name(self) -> &'static str {
        match self {
            BufferKind::None => "none",
            BufferKind::Mapped => "mapped",
            BufferKind::Host => "host",
            BufferKind::Device => "device",
            BufferKind::RowSplit => "row_split",
        }
    }

    /// The value of `llama_ext_tensor_info.buffer`.
    pub fn as_raw(self) -> i32 {
        match self {
            BufferKind::None => 0,
            BufferKind::Mapped => 1,
            BufferKind::Host => 2,
            BufferKind::Device => 3,
            BufferKind::RowSplit => 4,
        }
    }
}

/// How the elements of a tensor are grouped along a split dimension: `outer` repetitions of
/// `units` units of `unit_bytes` bytes, a unit holding `elems_per_unit` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitGeometry {
    pub outer: u64,
    pub units: u64,
    pub unit_bytes: u64,
    pub elems_per_unit: u64,
}

impl SplitGeometry {
    /// The geometry of `layout` cut along `dim` (0 or 1), or None when the shape cannot be
    /// cut there (dim 0 with a row length that is not whole blocks).
    pub fn of(layout: &TensorLayout, dim: SplitDim) -> Option<SplitGeometry> {
        let ne: Vec<u64> = layout.ne.iter().map(|&n| n.max(0) as u64).collect();
        let blck = layout.ggml_type.block_size().max(1);
        match dim {
            1 => Some(SplitGeometry {
                outer: ne[2] * ne[3],
                units: ne[1],
                unit_bytes: layout.ggml_type.row_size(layout.ne[0])?,
                elems_per_unit: 1,
            }),
            0 if ne[0] % blck == 0 => Some(SplitGeometry {
                outer: ne[1] * ne[2] * ne[3],
                units: ne[0] / blck,
                unit_bytes: layout.ggml_type.type_size(),
                elems_per_unit: blck,
            }),
            _ => None,
        }
    }

    /// Elements along the split dimension.
    pub fn len(&self) -> u64 {
        self.units * self.elems_per_unit
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the slice `first .. first + count` (elements along the split dimension).
    pub fn slice_bytes(&self, count: u64) -> u64 {
        self.outer * (count / self.elems_per_unit) * self.unit_bytes
    }

    /// Calls `f(offset in the full tensor, offset in the slice, len)` for each contiguous run
    /// of the slice `first .. first + count`.
    pub fn for_each_run(&self, first: u64, count: u64, mut f: impl FnMut(usize, usize, usize)) {
        let run = (count / self.elems_per_unit * self.unit_bytes) as usize;
        let start = (first / self.elems_per_unit * self.unit_bytes) as usize;
        let stride = (self.units * self.unit_bytes) as usize;
        if run == 0 {
            return;
        }
        for o in 0..self.outer as usize {
            f(o * stride + start, o * run, run);
        }
    }

    /// The bytes of one slice, gathered from the whole tensor's bytes.
    pub fn gather(&self, full: &[u8], first: u64, count: u64) -> Vec<u8> {
        let mut out = vec![0u8; self.slice_bytes(count) as usize];
        self.for_each_run(first, count, |src, dst, len| {
            out[dst..dst + len].copy_from_slice(&full[src..src + len]);
        });
        out
    }
}

/// Where a tensor stands with respect to hot-swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapState {
    /// Its bytes are in the buffer it was loaded into.
    OnOriginal,
    /// Its bytes are in a private buffer on its own device; the original is kept aside.
    Detached,
    /// Like `Detached`, but its device had no room, so the private buffer is on the CPU.
    FallbackCpu,
}

impl SwapState {
    pub fn name(self) -> &'static str {
        match self {
            SwapState::OnOriginal => "on_original",
            SwapState::Detached => "detached",
            SwapState::FallbackCpu => "fallback_cpu",
        }
    }
}

/// The buffer a tensor was loaded into, kept while it is detached.
#[derive(Debug)]
pub struct Original {
    pub layout: TensorLayout,
    pub data: TensorData,
}

#[derive(Debug)]
pub struct TensorState {
    pub layout: TensorLayout,
    pub data: TensorData,
    pub swap: SwapState,
    /// Set while `swap != OnOriginal`.
    pub original: Option<Original>,
    /// The device the placement asked for, when the tensor had to fall back to the CPU at
    /// load (registry index).
    pub load_fallback_from: Option<usize>,
    /// The bytes were destroyed: the tensor read through a file mapping whose file was
    /// truncated in place, and they could not be read back. `data` is `Unallocated`; reads
    /// fail until a reload brings complete bytes.
    pub lost: bool,
}

impl TensorState {
    pub fn new(layout: TensorLayout, data: TensorData) -> TensorState {
        TensorState {
            layout,
            data,
            swap: SwapState::OnOriginal,
            original: None,
            load_fallback_from: None,
            lost: false,
        }
    }

    /// The bytes when they can be borrowed in place (CPU memory), else None.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        data_host_bytes(&self.data, self.layout.nbytes)
    }

    /// Copies the tensor's whole bytes into `dst` (`dst.len() == nbytes`), gathering row
    /// slices. Fails for unallocated tensors and device read errors.
    pub fn read_into(&self, dst: &mut [u8]) -> std::io::Result<()> {
        read_data(&self.layout, &self.data, dst)
    }

    /// The kind of buffer the bytes are in.
    pub fn buffer_kind(&self, cpu_index: usize) -> BufferKind {
        match &self.data {
            TensorData::Unallocated => BufferKind::None,
            TensorData::Mapped { .. } => BufferKind::Mapped,
            TensorData::Host(_) => BufferKind::Host,
            TensorData::Device(a) if a.device_index() == cpu_index => BufferKind::Host,
            TensorData::Device(_) => BufferKind::Device,
            TensorData::RowSplit { .. } => BufferKind::RowSplit,
        }
    }

    /// The registry index of the device holding the bytes (the first piece's device for a
    /// row split); `cpu_index` for mapped and arena memory; None when unallocated.
    pub fn device_index(&self, cpu_index: usize) -> Option<usize> {
        match &self.data {
            TensorData::Unallocated => None,
            TensorData::Mapped { .. } | TensorData::Host(_) => Some(cpu_index),
            TensorData::Device(a) => Some(a.device_index()),
            TensorData::RowSplit { pieces, .. } => pieces.first().map(|p| p.alloc.device_index()),
        }
    }
}

pub(crate) fn data_host_bytes(data: &TensorData, nbytes: u64) -> Option<&[u8]> {
    let len = usize::try_from(nbytes).ok()?;
    match data {
        TensorData::Mapped { map, offset } => map.get(*offset..offset.checked_add(len)?),
        TensorData::Host(range) => range.bytes().get(..len),
        TensorData::Device(a) => a.host_slice().and_then(|s| s.get(..len)),
        TensorData::Unallocated | TensorData::RowSplit { .. } => None,
    }
}

/// Copies the bytes of `data` (laid out as `layout`) into `dst`.
pub(crate) fn read_data(
    layout: &TensorLayout,
    data: &TensorData,
    dst: &mut [u8],
) -> std::io::Result<()> {
    let len = dst.len();
    if len as u64 != layout.nbytes {
        return Err(std::io::Error::other(format!(
            "destination holds {len} bytes, the tensor {}",
            layout.nbytes
        )));
    }
    if let Some(bytes) = data_host_bytes(data, layout.nbytes) {
        dst.copy_from_slice(bytes);
        return Ok(());
    }
    match data {
        TensorData::Device(a) => a.read(0, dst),
        TensorData::RowSplit { dim, pieces } => {
            let geometry = SplitGeometry::of(layout, *dim)
                .ok_or_else(|| std::io::Error::other("row split of an unsplittable shape"))?;
            for piece in pieces {
                let mut slice = vec![0u8; piece.alloc.len()];
                piece.alloc.read(0, &mut slice)?;
                geometry.for_each_run(piece.first, piece.count, |full, part, n| {
                    dst[full..full + n].copy_from_slice(&slice[part..part + n]);
                });
            }
            Ok(())
        }
        _ => Err(std::io::Error::other("the tensor holds no data (no_alloc)")),
    }
}

/// What a tensor is for placement: input layer, a repeating layer, or the output layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerRole {
    Input,
    Repeating(u32),
    Output,
}

#[derive(Debug)]
pub struct Tensor {
    pub name: String,
    /// `blk.N.` → N; -1 for input, output and global tensors.
    pub layer: i32,
    /// Where the bytes were at load (hot-swap keeps its own, current, record).
    pub source: TensorSource,
    /// Where the placement put it (hot-swap allocates there again).
    pub home: Home,
    state: RwLock<TensorState>,
}

impl Tensor {
    pub fn new(name: String, source: TensorSource, home: Home, state: TensorState) -> Tensor {
        Tensor {
            layer: layer_of(&name),
            name,
            source,
            home,
            state: RwLock::new(state),
        }
    }

    /// A consistent view of the tensor (held while reading its bytes).
    pub fn read(&self) -> RwLockReadGuard<'_, TensorState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive access (hot-swap's commit step).
    pub fn write(&self) -> RwLockWriteGuard<'_, TensorState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
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

/// All tensors, in file order, with a name index.
#[derive(Debug, Default)]
pub struct TensorStore {
    tensors: Vec<Tensor>,
    by_name: HashMap<String, usize>,
}

impl TensorStore {
    /// Adds a tensor; a duplicate name is an error (as upstream).
    pub fn push(&mut self, tensor: Tensor) -> Result<(), String> {
        if self.by_name.contains_key(&tensor.name) {
            return Err(format!("tensor '{}' is duplicated", tensor.name));
        }
        self.by_name.insert(tensor.name.clone(), self.tensors.len());
        self.tensors.push(tensor);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn at(&self, index: usize) -> &Tensor {
        &self.tensors[index]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors.iter()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_index_comes_from_blk_prefix() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), 12);
        assert_eq!(layer_of("token_embd.weight"), -1);
        assert_eq!(layer_of("blk.x.attn_q.weight"), -1);
    }

    #[test]
    fn moe_family_names() {
        assert_eq!(moe_member("blk.3.ffn_down_exps.weight"), Some(2));
        assert_eq!(moe_member("blk.3.ffn_down.weight"), None);
        assert_eq!(
            moe_siblings("blk.3.ffn_up_exps.weight"),
            vec!["blk.3.ffn_gate_exps.weight", "blk.3.ffn_down_exps.weight"]
        );
    }

    #[test]
    fn split_geometry_gathers_rows_and_blocks() {
        let layout = TensorLayout {
            ggml_type: GgmlType::F32,
            ne: [2, 3, 2, 1],
            nbytes: 48,
        };
        let full: Vec<u8> = (0..48).collect();
        let g = SplitGeometry::of(&layout, 1).unwrap();
        assert_eq!((g.outer, g.units, g.unit_bytes), (2, 3, 8));
        // rows 1..3 of both matrices
        let part = g.gather(&full, 1, 2);
        let want: Vec<u8> = (8..24).chain(32..48).collect();
        assert_eq!(part, want);
        let g0 = SplitGeometry::of(&layout, 0).unwrap();
        assert_eq!(
            g0.gather(&full, 1, 1),
            (0..6)
                .flat_map(|r| 4 * (2 * r + 1)..4 * (2 * r + 1) + 4)
                .map(|b| b as u8)
                .collect::<Vec<_>>()
        );
    }
}
