//! The model's tensors: what each one is (type, shape, layer), where its bytes came from, and
//! where they live now. Hot-swap replaces a tensor's state under its lock, so readers never
//! see a torn tensor.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::kernels::cpu::Repacked;

pub use crate::storage::data::{
    data_host_bytes, read_data, RowPiece, SplitDim, SplitGeometry, TensorData, TensorLayout,
};
pub use crate::storage::place::{
    layer_of, moe_member, moe_siblings, role_of, row_split_dim, Home, LayerRole, MOE_FAMILY,
};

/// Where a tensor's bytes are in its file (GGUF-relative absolute offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSource {
    pub file_index: usize,
    pub offset: u64,
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
    /// A layout derived from the bytes for faster kernels (upstream's CPU repack), made on
    /// first need (or at load, see [`crate::model::derived`]); None inside when the tensor has
    /// none. Cleared by every [`Tensor::write`], so it never outlives the bytes it came from.
    pub derived: OnceLock<Option<Repacked>>,
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
            derived: OnceLock::new(),
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

    /// Exclusive access (hot-swap's commit step). Drops the derived layout: a writer may
    /// change the bytes, type or storage it was made from (it is made again on next need).
    pub fn write(&self) -> RwLockWriteGuard<'_, TensorState> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        state.derived.take();
        state
    }
}

/// All tensors, in file order, with a name index.
#[derive(Debug, Default)]
pub struct TensorStore {
    tensors: Vec<Tensor>,
    by_name: HashMap<String, usize>,
}

impl TensorStore {
    /// Adds a tensor; a duplicate name is an error (as upstream), which returns the name.
    pub fn push(&mut self, tensor: Tensor) -> Result<(), String> {
        if self.by_name.contains_key(&tensor.name) {
            return Err(tensor.name);
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
}
