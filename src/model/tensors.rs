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
    /// The plain bytes were given back to the OS: `derived` holds the only copy (an owned
    /// load keeps a repacked weight once, as upstream's `CPU_REPACK` buffer does). `data` is
    /// still the tensor's arena range, with undefined contents; readers get the bytes by
    /// un-repacking ([`TensorState::read_into`], [`TensorState::plain_bytes`]), and
    /// [`Tensor::write`] puts them back before a writer sees the storage.
    pub plain_released: bool,
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
            plain_released: false,
        }
    }

    /// The bytes when they can be borrowed in place (CPU memory), else None (also when
    /// only the repacked layout holds them: see [`Self::plain_bytes`]).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        if self.plain_released {
            return None;
        }
        data_host_bytes(&self.data, self.layout.nbytes)
    }

    /// The bytes in CPU memory: borrowed in place, or un-repacked into a copy when only the
    /// repacked layout holds them; None when they are not in CPU memory.
    pub fn plain_bytes(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
        if let Some(b) = self.host_bytes() {
            return Some(std::borrow::Cow::Borrowed(b));
        }
        let rp = self.released_copy()?;
        let mut b = vec![0u8; rp.plain_nbytes()];
        rp.unrepack_into(&mut b);
        Some(std::borrow::Cow::Owned(b))
    }

    /// The repacked layout holding the only copy of the bytes, when it does.
    fn released_copy(&self) -> Option<&Repacked> {
        if !self.plain_released {
            return None;
        }
        self.derived.get().and_then(|d| d.as_ref())
    }

    /// Copies the tensor's whole bytes into `dst` (`dst.len() == nbytes`), gathering row
    /// slices or un-repacking. Fails for unallocated tensors and device read errors.
    pub fn read_into(&self, dst: &mut [u8]) -> std::io::Result<()> {
        if let Some(rp) = self.released_copy() {
            if dst.len() as u64 != self.layout.nbytes || rp.plain_nbytes() != dst.len() {
                return Err(std::io::Error::other(format!(
                    "destination holds {} bytes, the tensor {}",
                    dst.len(),
                    self.layout.nbytes
                )));
            }
            rp.unrepack_into(dst);
            return Ok(());
        }
        read_data(&self.layout, &self.data, dst)
    }

    /// Bytes of the plain storage resident in memory (`mincore`), for owned arena ranges;
    /// None for other storage. Lets tests see that a repacked weight is not held twice.
    pub fn resident_plain_bytes(&self) -> Option<usize> {
        match &self.data {
            TensorData::Host(range) => range.resident_bytes(),
            _ => None,
        }
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
    /// When the derived layout held the only copy, the plain bytes are put back first.
    pub fn write(&self) -> RwLockWriteGuard<'_, TensorState> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if state.plain_released {
            let st = &mut *state;
            let nbytes = st.layout.nbytes;
            if let (Some(Some(rp)), TensorData::Host(range)) = (st.derived.get(), &mut st.data) {
                if let Some(dst) = range.bytes_mut().get_mut(..nbytes as usize) {
                    rp.unrepack_into(dst);
                }
            }
            st.plain_released = false;
        }
        state.derived.take();
        state
    }

    /// Gives the plain bytes of an owned (arena) tensor back to the OS when its repacked
    /// layout is made and holds them all, so an owned load keeps one copy, as upstream.
    /// Returns the bytes released.
    pub fn release_plain(&self) -> usize {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let st = &mut *state;
        if st.plain_released || st.lost || st.swap != SwapState::OnOriginal {
            return 0;
        }
        let Some(Some(rp)) = st.derived.get() else {
            return 0;
        };
        if rp.plain_nbytes() as u64 != st.layout.nbytes {
            return 0;
        }
        let TensorData::Host(range) = &mut st.data else {
            return 0;
        };
        st.plain_released = true;
        range.release_pages()
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
