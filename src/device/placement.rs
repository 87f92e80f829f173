//! Which device each layer of a model lives on: upstream's rules from
//! `llama_prepare_model_devices` (split mode NONE and `main_gpu`) and
//! `llama_model_base::load_tensors` (split points, `n_gpu_layers`), as a pure function.
//!
//! Layers are numbered `0..=n_layer`, where `n_layer` is the block count (`%s.block_count`,
//! including appended NextN/MTP blocks) and layer `n_layer` is the **output** layer. The input
//! layer (token embeddings) is always on the CPU and has no number.
//!
//! Floating point follows upstream exactly: weights are `f32`, summed in order into an
//! inclusive prefix sum, each divided by the total; layer `il` goes to the first device whose
//! split point is strictly greater than `f32(il - i_gpu_start) / f32(act_gpu_layers)` (a
//! `std::upper_bound`, reproduced step for step, so even unsorted split points from negative
//! weights give upstream's answer).

use thiserror::Error;

/// `llama_max_devices()`: the length of `tensor_split` and the most devices a model can use.
pub const MAX_DEVICES: usize = 16;

/// Free and total bytes of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: u64,
    pub total: u64,
}

/// `enum llama_split_mode`, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitMode {
    /// One device: `main_gpu` picks it (negative: CPU only).
    None = 0,
    /// Whole layers split across the devices (`main_gpu` is ignored).
    Layer = 1,
    /// Layers as LAYER, and 2-D weights split by rows across the devices ([`row_split`]).
    Row = 2,
    /// Tensor parallelism over a meta device: not supported by llama-hotswap.
    Tensor = 3,
}

impl SplitMode {
    /// The split mode for a raw `llama_split_mode` value.
    pub fn from_raw(raw: i32) -> Result<SplitMode, PlacementError> {
        Ok(match raw {
            0 => SplitMode::None,
            1 => SplitMode::Layer,
            2 => SplitMode::Row,
            3 => SplitMode::Tensor,
            _ => return Err(PlacementError::InvalidSplitMode(raw)),
        })
    }

    pub fn as_raw(self) -> i32 {
        self as i32
    }
}

/// Why no placement could be computed (upstream: the load fails, `llama_model_load_*` returns
/// NULL).
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PlacementError {
    #[error("invalid split mode {0}")]
    InvalidSplitMode(i32),
    #[error("split mode TENSOR (tensor parallelism) is not supported by llama-hotswap")]
    TensorSplitUnsupported,
    /// Upstream's message, word for word.
    #[error("invalid value for main_gpu: {main_gpu} (available devices: {available})")]
    InvalidMainGpu { main_gpu: i32, available: usize },
    #[error("too many devices for a model: {0} (at most {MAX_DEVICES})")]
    TooManyDevices(usize),
    #[error("invalid block count {0}")]
    InvalidLayerCount(u32),
    /// The split points leave a fraction uncovered: all weights zero (e.g. every device
    /// reports 0 bytes free), negative or NaN. Upstream fails the load here too
    /// (`devices.at()` out of range).
    #[error("no device for layer {layer}: split points {splits:?} do not cover {fraction}")]
    NoDeviceForLayer {
        layer: u32,
        fraction: f32,
        splits: Vec<f32>,
    },
}

/// What the placement depends on.
#[derive(Clone, Copy, Debug)]
pub struct PlacementRequest<'a> {
    /// The block count (`n_layer_all` upstream); the output layer is number `n_layer`.
    pub n_layer: u32,
    /// `llama_model_params.n_gpu_layers`; negative means all `n_layer + 1`.
    pub n_gpu_layers: i32,
    pub split_mode: SplitMode,
    /// `llama_model_params.main_gpu`; used by split mode NONE only, as upstream.
    pub main_gpu: i32,
    /// `llama_model_params.tensor_split` (NULL → None).
    pub tensor_split: Option<[f32; MAX_DEVICES]>,
    /// The candidate devices with their memory now, in order: the user's `devices` list, or
    /// upstream's default list ([`crate::device::Registry::default_model_devices`]). The CPU
    /// is never in it.
    pub devices: &'a [MemoryInfo],
    /// The CPU device's memory, used as the weight of a device that reports 0 free and 0
    /// total (upstream #18577).
    pub cpu_memory: MemoryInfo,
}

/// Where one layer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerDevice {
    Cpu,
    /// An index into [`PlacementRequest::devices`].
    Gpu(usize),
}

/// The result: the model's device list and each layer's device.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// The model's devices as indices into [`PlacementRequest::devices`]: all of them, or for
    /// split mode NONE just `main_gpu` (or none when `main_gpu < 0`).
    pub devices: Vec<usize>,
    /// The cumulative split point of each model device (last is 1.0 when the weights are
    /// sane), parallel to `devices`.
    pub splits: Vec<f32>,
    /// The effective `n_gpu_layers` (negative replaced by `n_layer + 1`).
    pub n_gpu_layers: i64,
    /// The first offloaded layer: `max(n_layer + 1 - n_gpu_layers, 0)`.
    pub i_gpu_start: i64,
    /// How many layers are offloaded: 0 without devices, else `min(n_gpu_layers, n_layer + 1)`.
    pub act_gpu_layers: i64,
    /// The device of layers `0..=n_layer` (the last entry is the output layer).
    pub layers: Vec<LayerDevice>,
}

impl Placement {
    /// The block count this placement was computed for.
    pub fn n_layer(&self) -> usize {
        self.layers.len() - 1
    }

    /// The input layer (token embeddings): always the CPU.
    pub fn input(&self) -> LayerDevice {
        LayerDevice::Cpu
    }

    /// The device of repeating layer `il` (`il < n_layer`), or of the output layer
    /// (`il == n_layer`).
    pub fn layer(&self, il: usize) -> Option<LayerDevice> {
        self.layers.get(il).copied()
    }

    /// The output layer's device.
    pub fn output(&self) -> LayerDevice {
        self.layers[self.layers.len() - 1]
    }

    /// How many layers (output included) are on a GPU.
    pub fn offloaded_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|d| matches!(d, LayerDevice::Gpu(_)))
            .count()
    }

    /// [`row_split`] over this placement's devices and split points; each slice's `device`
    /// is an index into [`PlacementRequest::devices`].
    pub fn row_split(&self, nrows: u64, row_granularity: u64) -> Vec<RowSlice> {
        row_split(nrows, row_granularity, &self.splits)
            .into_iter()
            .map(|s| RowSlice {
                device: self.devices[s.device],
                ..s
            })
            .collect()
    }
}

/// libstdc++'s `std::upper_bound` on `f32` with `<`, step for step.
fn upper_bound(splits: &[f32], value: f32) -> usize {
    let mut first = 0usize;
    let mut len = splits.len();
    while len > 0 {
        let half = len / 2;
        let middle = first + half;
        if value < splits[middle] {
            len = half;
        } else {
            first = middle + 1;
            len = len - half - 1;
        }
    }
    first
}

/// The cumulative, normalized split points for `n` model devices (upstream's `splits`).
fn split_points(
    tensor_split: Option<&[f32; MAX_DEVICES]>,
    memory: impl Iterator<Item = MemoryInfo>,
    n: usize,
    cpu_memory: MemoryInfo,
) -> Vec<f32> {
    let all_zero = match tensor_split {
        None => true,
        Some(ts) => ts[..n].iter().all(|&x| x == 0.0),
    };
    let mut splits: Vec<f32> = match tensor_split {
        Some(ts) if !all_zero => ts[..n].to_vec(),
        _ => memory
            .map(|m| {
                let m = if m.free == 0 && m.total == 0 {
                    cpu_memory
                } else {
                    m
                };
                m.free as f32
            })
            .collect(),
    };
    let mut sum = 0.0f32;
    for s in splits.iter_mut() {
        sum += *s;
        *s = sum;
    }
    for s in splits.iter_mut() {
        *s /= sum;
    }
    splits
}

/// Computes the model's device list and every layer's device, with upstream's rules:
///
/// * split mode TENSOR: an error (not supported);
/// * split mode NONE with a non-empty device list: `main_gpu < 0` clears the list (CPU only),
///   `main_gpu >= n` is the error "invalid value for main_gpu: …", otherwise only
///   `devices[main_gpu]` is kept; with an empty list any `main_gpu` is fine;
/// * split points from the first `n` entries of `tensor_split`, or from each device's free
///   memory when it is None or those entries are all zero;
/// * `ngl = n_gpu_layers < 0 ? n_layer + 1 : n_gpu_layers`,
///   `i_gpu_start = max(n_layer + 1 - ngl, 0)`,
///   `act_gpu_layers = devices empty ? 0 : min(ngl, n_layer + 1)`;
/// * layer `il` is on the CPU when `il < i_gpu_start` or `il - i_gpu_start >= act_gpu_layers`,
///   otherwise on the device `upper_bound(splits, f32(il - i_gpu_start) / f32(act_gpu_layers))`.
pub fn compute_placement(request: &PlacementRequest<'_>) -> Result<Placement, PlacementError> {
    if request.split_mode == SplitMode::Tensor {
        return Err(PlacementError::TensorSplitUnsupported);
    }
    if i32::try_from(request.n_layer).map_or(true, |n| n == i32::MAX) {
        return Err(PlacementError::InvalidLayerCount(request.n_layer));
    }

    let mut devices: Vec<usize> = (0..request.devices.len()).collect();
    if request.split_mode == SplitMode::None && !devices.is_empty() {
        if request.main_gpu < 0 {
            devices.clear();
        } else {
            let main = request.main_gpu as usize;
            if main >= devices.len() {
                return Err(PlacementError::InvalidMainGpu {
                    main_gpu: request.main_gpu,
                    available: devices.len(),
                });
            }
            devices = vec![main];
        }
    }
    if devices.len() > MAX_DEVICES {
        return Err(PlacementError::TooManyDevices(devices.len()));
    }

    let splits = split_points(
        request.tensor_split.as_ref(),
        devices.iter().map(|&i| request.devices[i]),
        devices.len(),
        request.cpu_memory,
    );

    let n_layer = i64::from(request.n_layer);
    let ngl = if request.n_gpu_layers >= 0 {
        i64::from(request.n_gpu_layers)
    } else {
        n_layer + 1
    };
    let i_gpu_start = (n_layer + 1 - ngl).max(0);
    let act_gpu_layers = if devices.is_empty() {
        0
    } else {
        ngl.min(n_layer + 1)
    };

    let mut layers = Vec::with_capacity(request.n_layer as usize + 1);
    for il in 0..=n_layer {
        if il < i_gpu_start || il - i_gpu_start >= act_gpu_layers {
            layers.push(LayerDevice::Cpu);
            continue;
        }
        // Both operands are below 2^31, so these conversions are the ones C++ makes.
        let fraction = (il - i_gpu_start) as f32 / act_gpu_layers as f32;
        let k = upper_bound(&splits, fraction);
        match devices.get(k) {
            Some(&device) => layers.push(LayerDevice::Gpu(device)),
            None => {
                return Err(PlacementError::NoDeviceForLayer {
                    layer: il as u32,
                    fraction,
                    splits,
                })
            }
        }
    }

    Ok(Placement {
        devices,
        splits,
        n_gpu_layers: ngl,
        i_gpu_start,
        act_gpu_layers,
        layers,
    })
}

/// One device's rows of a row-split weight: rows `first_row .. first_row + n_rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSlice {
    /// For [`row_split`]: the position in `splits`; for [`Placement::row_split`]: an index
    /// into [`PlacementRequest::devices`].
    pub device: usize,
    pub first_row: u64,
    pub n_rows: u64,
}

/// Splits the `nrows` rows of a 2-D weight (split mode ROW) across devices with cumulative
/// split points `splits` (as in [`Placement::splits`]), the way ggml-cuda's split buffer did
/// (`get_row_split`, removed from CUDA upstream in 2026-07 and still used by SYCL):
///
/// * device `id` starts at row `0` for `id == 0`, else at `trunc(f32(nrows) * splits[id-1])`
///   rounded **down** to a multiple of `row_granularity`;
/// * it ends where the next device starts, the last device at `nrows`.
///
/// ggml-cuda rounds every boundary to one value, the largest MMQ tile height of the devices
/// taking part (64 or 128 rows; older versions and SYCL pick it per weight type), so that a
/// quantized matrix-multiply tile never straddles two devices. Here the caller chooses the
/// granularity: a weight type's block size (32 for Q4_0/Q8_0, 256 for K-quants, 1 for
/// F32/F16), or a kernel's tile height. 0 is treated as 1.
///
/// Empty slices are dropped; the slices are in device order and cover `0..nrows` exactly
/// once. (Boundaries are also clamped to be non-decreasing and at most `nrows`, which only
/// matters for split points from negative or NaN weights, where upstream misbehaves.)
pub fn row_split(nrows: u64, row_granularity: u64, splits: &[f32]) -> Vec<RowSlice> {
    let granularity = row_granularity.max(1);
    let n = splits.len();
    let mut slices = Vec::with_capacity(n);
    if n == 0 || nrows == 0 {
        return slices;
    }
    let boundary = |id: usize, previous: u64| -> u64 {
        if id == 0 {
            return 0;
        }
        if id == n {
            return nrows;
        }
        // C++: int64_t * float is computed in float, then truncated to int64_t.
        let raw = (nrows as f32 * splits[id - 1]) as u64;
        let rounded = raw - raw % granularity;
        rounded.clamp(previous, nrows)
    };
    let mut low = 0;
    for id in 0..n {
        let high = boundary(id + 1, low);
        if high > low {
            slices.push(RowSlice {
                device: id,
                first_row: low,
                n_rows: high - low,
            });
        }
        low = high;
    }
    slices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_bound_matches_std() {
        let s = [0.25f32, 0.5, 1.0];
        assert_eq!(upper_bound(&s, 0.0), 0);
        assert_eq!(upper_bound(&s, 0.25), 1);
        assert_eq!(upper_bound(&s, 0.49), 1);
        assert_eq!(upper_bound(&s, 0.5), 2);
        assert_eq!(upper_bound(&s, 1.0), 3);
        assert_eq!(upper_bound(&[f32::NAN, f32::NAN], 0.0), 2);
        assert_eq!(upper_bound(&[], 0.0), 0);
    }
}
