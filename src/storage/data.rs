//! A tensor's bytes as they live now ([`TensorData`]): a file mapping, a range of an owned
//! arena, a buffer on one device, or row slices across devices; and the three operations on
//! them that loading, reading and hot-swap share: read whole ([`read_data`]), write whole in
//! place ([`write_storage`]), and the geometry of a row split ([`SplitGeometry`]).

use std::sync::Arc;

use crate::device::DeviceAllocation;
use crate::gguf::GgmlType;

use super::host::HostRange;

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
    Host(HostRange),
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

/// The bytes when they can be borrowed in place (CPU memory), else None.
pub fn data_host_bytes(data: &TensorData, nbytes: u64) -> Option<&[u8]> {
    let len = usize::try_from(nbytes).ok()?;
    match data {
        TensorData::Mapped { map, offset } => map.get(*offset..offset.checked_add(len)?),
        TensorData::Host(range) => range.bytes().get(..len),
        TensorData::Device(a) => a.host_slice().and_then(|s| s.get(..len)),
        TensorData::Unallocated | TensorData::RowSplit { .. } => None,
    }
}

/// The bytes, writable in place, when the storage is owned host memory (an arena range, or
/// a CPU or virtual-GPU buffer); None for mappings, CUDA and row splits.
pub fn data_host_bytes_mut(data: &mut TensorData, nbytes: u64) -> Option<&mut [u8]> {
    let len = usize::try_from(nbytes).ok()?;
    match data {
        TensorData::Host(range) => range.bytes_mut().get_mut(..len),
        TensorData::Device(a) => a.host_slice_mut().and_then(|s| s.get_mut(..len)),
        _ => None,
    }
}

/// Copies the bytes of `data` (laid out as `layout`) into `dst`.
pub fn read_data(layout: &TensorLayout, data: &TensorData, dst: &mut [u8]) -> std::io::Result<()> {
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

/// Whether storage can be written in place (it is ours, not a file mapping).
pub fn writable(data: &TensorData) -> bool {
    matches!(
        data,
        TensorData::Host(_) | TensorData::Device(_) | TensorData::RowSplit { .. }
    )
}

/// Writes the whole tensor's bytes into existing storage (hot-swap's in-place reload). The
/// caller holds the tensor's write lock.
pub fn write_storage(
    layout: &TensorLayout,
    data: &mut TensorData,
    bytes: &[u8],
) -> Result<(), String> {
    match data {
        TensorData::Host(range) => range.write(bytes).map_err(|e| e.to_string()),
        TensorData::Device(a) => a.write(0, bytes).map_err(|e| e.to_string()),
        TensorData::RowSplit { dim, pieces } => {
            let geometry =
                SplitGeometry::of(layout, *dim).ok_or_else(|| "unsplittable shape".to_string())?;
            for p in pieces.iter_mut() {
                let part = geometry.gather(bytes, p.first, p.count);
                p.alloc.write(0, &part).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        TensorData::Mapped { .. } | TensorData::Unallocated => {
            Err("storage is not writable".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
