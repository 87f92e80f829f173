//! The model's tensors: what each one is (type, shape, layer), where its bytes came from, and
//! where they live now. Hot-swap replaces a tensor's state under its lock, so readers never
//! see a torn tensor.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::gguf::GgmlType;

/// Type and shape; may change on hot-swap (shape never does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorLayout {
    pub ggml_type: GgmlType,
    pub ne: [i64; 4],
    pub nbytes: u64,
}

/// Where a tensor's bytes are in its file (GGUF-relative absolute offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSource {
    pub file_index: usize,
    pub offset: u64,
}

/// Owned host memory shared by several tensors (one per file in owned load modes).
pub type Arena = Arc<memmap2::MmapMut>;

/// Where the bytes live now.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// `no_alloc`: sizes only.
    Unallocated,
    /// Zero-copy view into a read-only file mapping.
    Mapped {
        map: Arc<memmap2::Mmap>,
        offset: usize,
    },
    /// A range of an owned arena.
    Host { arena: Arena, offset: usize },
}

#[derive(Clone, Debug)]
pub struct TensorState {
    pub layout: TensorLayout,
    pub data: TensorData,
}

impl TensorState {
    /// The tensor's bytes, or None when unallocated.
    pub fn bytes(&self) -> Option<&[u8]> {
        let len = usize::try_from(self.layout.nbytes).ok()?;
        match &self.data {
            TensorData::Unallocated => None,
            TensorData::Mapped { map, offset } => map.get(*offset..offset.checked_add(len)?),
            TensorData::Host { arena, offset } => arena.get(*offset..offset.checked_add(len)?),
        }
    }
}

#[derive(Debug)]
pub struct Tensor {
    pub name: String,
    /// `blk.N.` → N; -1 for input, output and global tensors.
    pub layer: i32,
    pub source: TensorSource,
    state: RwLock<TensorState>,
}

impl Tensor {
    pub fn new(name: String, source: TensorSource, state: TensorState) -> Tensor {
        Tensor {
            layer: layer_of(&name),
            name,
            source,
            state: RwLock::new(state),
        }
    }

    /// A consistent view of the tensor (held while reading its bytes).
    pub fn read(&self) -> RwLockReadGuard<'_, TensorState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The layer index of a `blk.N.` tensor name.
pub fn layer_of(name: &str) -> i32 {
    name.strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
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
}
