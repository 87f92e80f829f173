//! Devices and placement: upstream's layer → device rules (worked examples and every edge of
//! n_gpu_layers × split mode × main_gpu), tensor_split normalization, ROW row slices, virtual
//! GPU capacity accounting, the LLAMA_VIRTUAL_GPUS grammar and tensor_buft_overrides matching.
//!
//! Nothing here touches the process-global registry: registries are built with
//! `Registry::with_virtual_gpus`, and the parser is called directly.

use llama::device::placement::MAX_DEVICES;
use llama::device::{
    compute_placement, format_capacity, parse_capacity, parse_override_list, parse_virtual_gpus,
    row_split, BuftOverrides, DeviceError, DeviceType, LayerDevice, MemoryInfo, OverrideError,
    Placement, PlacementError, PlacementRequest, Registry, RowSlice, SplitMode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const CPU_MEMORY: MemoryInfo = MemoryInfo {
    free: 64 * GIB,
    total: 64 * GIB,
};

fn mem(free: u64, total: u64) -> MemoryInfo {
    MemoryInfo { free, total }
}

fn free_gib(gib: &[u64]) -> Vec<MemoryInfo> {
    gib.iter().map(|&g| mem(g * GIB, g * GIB)).collect()
}

fn split(weights: &[f32]) -> Option<[f32; MAX_DEVICES]> {
    let mut ts = [0.0f32; MAX_DEVICES];
    ts[..weights.len()].copy_from_slice(weights);
    Some(ts)
}

fn place(
    n_layer: u32,
    n_gpu_layers: i32,
    split_mode: SplitMode,
    main_gpu: i32,
    tensor_split: Option<[f32; MAX_DEVICES]>,
    devices: &[MemoryInfo],
) -> Result<Placement, PlacementError> {
    compute_placement(&PlacementRequest {
        n_layer,
        n_gpu_layers,
        split_mode,
        main_gpu,
        tensor_split,
        devices,
        cpu_memory: CPU_MEMORY,
    })
}

/// The layers `0..=n_layer` as runs: `[(first, last, device)]`.
fn runs(p: &Placement) -> Vec<(usize, usize, LayerDevice)> {
    let mut out: Vec<(usize, usize, LayerDevice)> = Vec::new();
    for (il, &d) in p.layers.iter().enumerate() {
        match out.last_mut() {
            Some(run) if run.2 == d => run.1 = il,
            _ => out.push((il, il, d)),
        }
    }
    out
}

use LayerDevice::{Cpu, Gpu};

// ---------------------------------------------------------------------------------------------
// Worked examples
// ---------------------------------------------------------------------------------------------

#[test]
fn one_gpu_32_layers_24_offloaded() {
    // ngl 24 of 33 (32 blocks + output): i_gpu_start = 33 - 24 = 9.
    let p = place(32, 24, SplitMode::Layer, 0, None, &free_gib(&[24])).unwrap();
    assert_eq!(p.i_gpu_start, 9);
    assert_eq!(p.act_gpu_layers, 24);
    assert_eq!(runs(&p), vec![(0, 8, Cpu), (9, 32, Gpu(0))]);
    assert_eq!(p.output(), Gpu(0));
    assert_eq!(p.input(), Cpu);
    assert_eq!(p.offloaded_layers(), 24);
    assert_eq!(p.n_layer(), 32);
}

#[test]
fn two_gpus_12_and_8_gib() {
    // 23 blocks + output = 24 offloaded layers with ngl -1, i.e. layers 0..=23 on GPUs.
    //
    // Upstream with 12 GiB / 8 GiB free: split points {0.6, 1.0}; layer il goes to the first
    // point strictly greater than il/24, so dev0 holds il/24 < 0.6, i.e. il <= 14: 15 layers,
    // not the 14 (0–13) that 24 * 0.6 = 14.4 rounded down would suggest.
    let p = place(23, -1, SplitMode::Layer, 0, None, &free_gib(&[12, 8])).unwrap();
    assert_eq!(p.splits, vec![0.6, 1.0]);
    assert_eq!(runs(&p), vec![(0, 14, Gpu(0)), (15, 23, Gpu(1))]);

    // The documented split 0–13 / 14–23 needs a first split point in (13/24, 14/24]:
    // 11 GiB / 9 GiB free gives 0.55 ...
    let p = place(23, -1, SplitMode::Layer, 0, None, &free_gib(&[11, 9])).unwrap();
    assert_eq!(runs(&p), vec![(0, 13, Gpu(0)), (14, 23, Gpu(1))]);
    // ... and tensor_split {7, 5} gives exactly 14/24 = 7/12: layer 14's fraction equals the
    // split point, and upper_bound's strict comparison sends it to dev1.
    let p = place(
        23,
        -1,
        SplitMode::Layer,
        0,
        split(&[7.0, 5.0]),
        &free_gib(&[12, 8]),
    )
    .unwrap();
    assert_eq!(p.splits[0], 14.0f32 / 24.0);
    assert_eq!(runs(&p), vec![(0, 13, Gpu(0)), (14, 23, Gpu(1))]);
}

#[test]
fn three_gpus_tensor_split_33_67_1() {
    // Upstream reads tensor_split as raw weights, not as cumulative points: {.33, .67, 1}
    // sums to 2, so the split points are {0.165, 0.5, 1.0}.
    let p = place(
        32,
        -1,
        SplitMode::Layer,
        0,
        split(&[0.33, 0.67, 1.0]),
        &free_gib(&[8, 8, 8]),
    )
    .unwrap();
    assert_eq!(p.splits, vec![0.165, 0.5, 1.0]);
    // 33 layers: il/33 < 0.165 → il <= 5; < 0.5 → il <= 16; the rest (and the output) dev2.
    assert_eq!(
        runs(&p),
        vec![(0, 5, Gpu(0)), (6, 16, Gpu(1)), (17, 32, Gpu(2))]
    );
}

#[test]
fn two_gpus_equal_split_from_notes() {
    // upstream-model-api.md 3.3: L = 32, ngl = -1, split {1,1} → 0–16 dev0, 17–31 + output dev1.
    let p = place(
        32,
        -1,
        SplitMode::Layer,
        0,
        split(&[1.0, 1.0]),
        &free_gib(&[8, 24]),
    )
    .unwrap();
    assert_eq!(runs(&p), vec![(0, 16, Gpu(0)), (17, 32, Gpu(1))]);
}

// ---------------------------------------------------------------------------------------------
// n_gpu_layers × split mode × main_gpu
// ---------------------------------------------------------------------------------------------

/// The expected placement for 2 equal GPUs and `n_layer` blocks, written from the rules as
/// counts: the last `c` layers are offloaded; the k-th of them goes to dev0 while 2k < c.
fn expected_two_equal(
    n_layer: usize,
    ngl: i32,
    mode: SplitMode,
    main_gpu: i32,
) -> Result<Vec<LayerDevice>, String> {
    let total = n_layer + 1;
    let ngl = if ngl < 0 { total } else { ngl as usize };
    let c = ngl.min(total);
    let devices: Vec<usize> = match mode {
        SplitMode::None if main_gpu < 0 => vec![],
        SplitMode::None if main_gpu >= 2 => {
            return Err(format!(
                "invalid value for main_gpu: {main_gpu} (available devices: 2)"
            ))
        }
        SplitMode::None => vec![main_gpu as usize],
        _ => vec![0, 1],
    };
    let mut layers = vec![Cpu; total];
    if devices.is_empty() {
        return Ok(layers);
    }
    for k in 0..c {
        let il = total - c + k;
        layers[il] = if devices.len() == 1 {
            Gpu(devices[0])
        } else if 2 * k < c {
            Gpu(0)
        } else {
            Gpu(1)
        };
    }
    Ok(layers)
}

#[test]
fn every_edge_of_ngl_split_mode_and_main_gpu() {
    let n_layer = 8u32;
    let nl = n_layer as i32;
    let devices = free_gib(&[8, 8]);
    let ngls = [-1, -7, 0, 1, 2, nl - 1, nl, nl + 1, nl + 2, 1000, i32::MAX];
    let modes = [SplitMode::None, SplitMode::Layer, SplitMode::Row];
    let main_gpus = [-1, 0, 1, 2, 100, i32::MIN];
    for &ngl in &ngls {
        for &mode in &modes {
            for &main_gpu in &main_gpus {
                let got = place(n_layer, ngl, mode, main_gpu, None, &devices);
                let want = expected_two_equal(n_layer as usize, ngl, mode, main_gpu);
                let what = format!("ngl {ngl}, {mode:?}, main_gpu {main_gpu}");
                match (got, want) {
                    (Ok(p), Ok(layers)) => {
                        assert_eq!(p.layers, layers, "{what}");
                        assert_eq!(p.input(), Cpu, "{what}");
                    }
                    (Err(e), Err(msg)) => {
                        assert!(
                            matches!(e, PlacementError::InvalidMainGpu { .. }),
                            "{what}: {e:?}"
                        );
                        assert_eq!(e.to_string(), msg, "{what}");
                    }
                    (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
                }
            }
        }
    }
}

#[test]
fn edges_spelled_out() {
    let d = free_gib(&[8, 8]);
    // ngl 0: nothing offloaded.
    let p = place(8, 0, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(runs(&p), vec![(0, 8, Cpu)]);
    assert_eq!(p.offloaded_layers(), 0);
    // ngl 1: only the output layer, and it goes to dev0 (fraction 0/1 = 0 < 0.5).
    let p = place(8, 1, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(runs(&p), vec![(0, 7, Cpu), (8, 8, Gpu(0))]);
    // ngl n_layer: every block but the first; 8 offloaded → 4 / 4.
    let p = place(8, 8, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(runs(&p), vec![(0, 0, Cpu), (1, 4, Gpu(0)), (5, 8, Gpu(1))]);
    // ngl n_layer + 1, -1 and anything larger: all 9 layers → 5 / 4.
    for ngl in [9, -1, 10, i32::MAX] {
        let p = place(8, ngl, SplitMode::Layer, 0, None, &d).unwrap();
        assert_eq!(runs(&p), vec![(0, 4, Gpu(0)), (5, 8, Gpu(1))], "ngl {ngl}");
        assert_eq!(p.act_gpu_layers, 9);
        assert_eq!(p.i_gpu_start, 0);
    }
    // NONE: main_gpu picks one device; negative → CPU only; out of range → upstream's error.
    let p = place(8, -1, SplitMode::None, 1, None, &d).unwrap();
    assert_eq!(p.devices, vec![1]);
    assert_eq!(runs(&p), vec![(0, 8, Gpu(1))]);
    let p = place(8, -1, SplitMode::None, -1, None, &d).unwrap();
    assert!(p.devices.is_empty());
    assert_eq!(p.act_gpu_layers, 0);
    assert_eq!(runs(&p), vec![(0, 8, Cpu)]);
    let e = place(8, -1, SplitMode::None, 2, None, &d).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid value for main_gpu: 2 (available devices: 2)"
    );
    // LAYER and ROW ignore main_gpu, even out of range.
    for mode in [SplitMode::Layer, SplitMode::Row] {
        for main_gpu in [-1, 5] {
            let p = place(8, -1, mode, main_gpu, None, &d).unwrap();
            assert_eq!(p.devices, vec![0, 1]);
        }
    }
}

#[test]
fn no_devices() {
    // NONE with an empty device list is fine for any main_gpu (CPU only), as the other modes.
    for mode in [SplitMode::None, SplitMode::Layer, SplitMode::Row] {
        for main_gpu in [-1, 0, 1, 7] {
            for ngl in [-1, 0, 5, 100] {
                let p = place(4, ngl, mode, main_gpu, None, &[]).unwrap();
                assert!(p.devices.is_empty());
                assert_eq!(p.act_gpu_layers, 0);
                assert_eq!(runs(&p), vec![(0, 4, Cpu)]);
            }
        }
    }
}

#[test]
fn split_mode_validation() {
    assert_eq!(SplitMode::from_raw(0), Ok(SplitMode::None));
    assert_eq!(SplitMode::from_raw(1), Ok(SplitMode::Layer));
    assert_eq!(SplitMode::from_raw(2), Ok(SplitMode::Row));
    assert_eq!(SplitMode::from_raw(3), Ok(SplitMode::Tensor));
    assert_eq!(
        SplitMode::from_raw(4),
        Err(PlacementError::InvalidSplitMode(4))
    );
    assert_eq!(
        SplitMode::from_raw(-1),
        Err(PlacementError::InvalidSplitMode(-1))
    );
    assert_eq!(SplitMode::Row.as_raw(), 2);
    let e = place(8, -1, SplitMode::Tensor, 0, None, &free_gib(&[8])).unwrap_err();
    assert_eq!(e, PlacementError::TensorSplitUnsupported);
    assert!(e.to_string().contains("not supported"), "{e}");
    // TENSOR is refused even without devices.
    assert!(place(8, -1, SplitMode::Tensor, 0, None, &[]).is_err());
}

#[test]
fn too_many_devices() {
    let devices = free_gib(&[1; 17]);
    assert_eq!(
        place(8, -1, SplitMode::Layer, 0, None, &devices).unwrap_err(),
        PlacementError::TooManyDevices(17)
    );
    // NONE keeps one of them, which is fine.
    assert!(place(8, -1, SplitMode::None, 16, None, &devices).is_ok());
    assert!(place(8, -1, SplitMode::Layer, 0, None, &devices[..16]).is_ok());
}

// ---------------------------------------------------------------------------------------------
// tensor_split normalization
// ---------------------------------------------------------------------------------------------

#[test]
fn tensor_split_normalization() {
    let d = free_gib(&[12, 8]);
    // NULL and all-zero: weights are the free memory.
    let by_memory = place(23, -1, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(by_memory.splits, vec![0.6, 1.0]);
    let zeros = place(23, -1, SplitMode::Layer, 0, split(&[]), &d).unwrap();
    assert_eq!(zeros, by_memory);
    // Only the first n_devices entries count: nonzero entries beyond them are ignored, so
    // {0, 0, 5, …} with two devices is still "all zero".
    let beyond = place(
        23,
        -1,
        SplitMode::Layer,
        0,
        split(&[0.0, 0.0, 5.0, 1.0]),
        &d,
    )
    .unwrap();
    assert_eq!(beyond, by_memory);
    // -0.0 == 0.0.
    let neg_zero = place(23, -1, SplitMode::Layer, 0, split(&[-0.0, 0.0]), &d).unwrap();
    assert_eq!(neg_zero.splits, vec![0.6, 1.0]);
    // A zero weight: that device gets no layers.
    let p = place(23, -1, SplitMode::Layer, 0, split(&[0.0, 1.0]), &d).unwrap();
    assert_eq!(p.splits, vec![0.0, 1.0]);
    assert_eq!(runs(&p), vec![(0, 23, Gpu(1))]);
    let p = place(
        23,
        -1,
        SplitMode::Layer,
        0,
        split(&[3.0, 0.0, 0.0]),
        &free_gib(&[1, 1, 1]),
    )
    .unwrap();
    assert_eq!(p.splits, vec![1.0, 1.0, 1.0]);
    assert_eq!(runs(&p), vec![(0, 23, Gpu(0))]);
    // Scale does not matter.
    let a = place(23, -1, SplitMode::Layer, 0, split(&[3.0, 1.0]), &d).unwrap();
    let b = place(23, -1, SplitMode::Layer, 0, split(&[300.0, 100.0]), &d).unwrap();
    assert_eq!(a.splits, vec![0.75, 1.0]);
    assert_eq!(a.layers, b.layers);
    // The split points' last entry is 1.0.
    for ts in [None, split(&[0.1, 0.2, 0.3]), split(&[0.33, 0.67, 1.0])] {
        let p = place(23, -1, SplitMode::Layer, 0, ts, &free_gib(&[3, 5, 7])).unwrap();
        assert_eq!(*p.splits.last().unwrap(), 1.0);
        assert!(p.splits.windows(2).all(|w| w[0] <= w[1]));
    }
}

#[test]
fn tensor_split_after_main_gpu_filter() {
    // NONE keeps devices[main_gpu]; tensor_split is then indexed by the *filtered* list, so
    // only tensor_split[0] counts: {0, 1} is "all zero" for the one device left.
    let d = free_gib(&[12, 8]);
    let p = place(8, -1, SplitMode::None, 1, split(&[0.0, 1.0]), &d).unwrap();
    assert_eq!(p.devices, vec![1]);
    assert_eq!(p.splits, vec![1.0]);
    assert_eq!(runs(&p), vec![(0, 8, Gpu(1))]);
}

#[test]
fn device_without_memory_report_uses_cpu_memory() {
    // free == 0 && total == 0 → the CPU's memory (64 GiB here) is the weight.
    let d = [mem(0, 0), mem(64 * GIB, 64 * GIB)];
    let p = place(9, -1, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(p.splits, vec![0.5, 1.0]);
    assert_eq!(runs(&p), vec![(0, 4, Gpu(0)), (5, 9, Gpu(1))]);
    // A device that is merely full (free 0, total > 0) weighs 0.
    let d = [mem(0, 8 * GIB), mem(8 * GIB, 8 * GIB)];
    let p = place(9, -1, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(runs(&p), vec![(0, 9, Gpu(1))]);
}

#[test]
fn all_weights_zero_is_an_error_when_layers_are_offloaded() {
    // Every device full: 0/0 split points (NaN) cover nothing; upstream's devices.at() throws.
    let d = [mem(0, 8 * GIB), mem(0, 8 * GIB)];
    let e = place(4, -1, SplitMode::Layer, 0, None, &d).unwrap_err();
    assert!(
        matches!(e, PlacementError::NoDeviceForLayer { layer: 0, .. }),
        "{e:?}"
    );
    // Nothing offloaded: no layer needs a split point.
    let p = place(4, 0, SplitMode::Layer, 0, None, &d).unwrap();
    assert_eq!(runs(&p), vec![(0, 4, Cpu)]);
}

// ---------------------------------------------------------------------------------------------
// ROW: row slices
// ---------------------------------------------------------------------------------------------

/// Slices are contiguous, in device order, cover 0..nrows exactly once, and every interior
/// boundary is a multiple of the granularity.
fn check_cover(slices: &[RowSlice], nrows: u64, granularity: u64) {
    let mut next = 0;
    let mut last_device = None;
    for s in slices {
        assert!(s.n_rows > 0, "empty slice kept: {slices:?}");
        assert_eq!(s.first_row, next, "gap or overlap: {slices:?}");
        assert_eq!(s.first_row % granularity, 0, "unrounded start: {slices:?}");
        if let Some(d) = last_device {
            assert!(s.device > d, "device order: {slices:?}");
        }
        last_device = Some(s.device);
        next = s.first_row + s.n_rows;
    }
    assert_eq!(next, nrows, "rows not covered: {slices:?}");
}

fn slice(device: usize, first_row: u64, n_rows: u64) -> RowSlice {
    RowSlice {
        device,
        first_row,
        n_rows,
    }
}

#[test]
fn row_split_rounding_block_32_and_256() {
    let splits = [0.6f32, 1.0];
    // 4096 rows: 4096 * 0.6 = 2457.6 → 2457 → down to a multiple of 32: 2432; of 256: 2304.
    assert_eq!(
        row_split(4096, 32, &splits),
        vec![slice(0, 0, 2432), slice(1, 2432, 1664)]
    );
    assert_eq!(
        row_split(4096, 256, &splits),
        vec![slice(0, 0, 2304), slice(1, 2304, 1792)]
    );
    // Granularity 1 (F32/F16): just the truncation.
    assert_eq!(
        row_split(4096, 1, &splits),
        vec![slice(0, 0, 2457), slice(1, 2457, 1639)]
    );
    // 0 is treated as 1.
    assert_eq!(row_split(4096, 0, &splits), row_split(4096, 1, &splits));
    // 3:1 of 11008 rows: 8256 is a multiple of 32 but not of 256 (→ 8192).
    assert_eq!(
        row_split(11008, 32, &[0.75, 1.0]),
        vec![slice(0, 0, 8256), slice(1, 8256, 2752)]
    );
    assert_eq!(
        row_split(11008, 256, &[0.75, 1.0]),
        vec![slice(0, 0, 8192), slice(1, 8192, 2816)]
    );
    // Three devices {0.165, 0.5, 1.0} of 4096 rows, 256: 675 → 512, 2048 → 2048.
    assert_eq!(
        row_split(4096, 256, &[0.165, 0.5, 1.0]),
        vec![slice(0, 0, 512), slice(1, 512, 1536), slice(2, 2048, 2048)]
    );
}

#[test]
fn row_split_drops_empty_slices() {
    // A zero-weight device gets nothing.
    assert_eq!(row_split(1024, 32, &[0.0, 1.0]), vec![slice(1, 0, 1024)]);
    assert_eq!(
        row_split(1024, 32, &[0.5, 0.5, 1.0]),
        vec![slice(0, 0, 512), slice(2, 512, 512)]
    );
    // Fewer rows than the granularity: the first boundary rounds down to 0, the last device
    // takes everything.
    assert_eq!(row_split(100, 256, &[0.5, 1.0]), vec![slice(1, 0, 100)]);
    // Single device, no devices, no rows.
    assert_eq!(row_split(77, 32, &[1.0]), vec![slice(0, 0, 77)]);
    assert!(row_split(77, 32, &[]).is_empty());
    assert!(row_split(0, 32, &[0.5, 1.0]).is_empty());
}

#[test]
fn row_split_covers_every_row_once() {
    let split_sets: [&[f32]; 6] = [
        &[1.0],
        &[0.6, 1.0],
        &[0.165, 0.5, 1.0],
        &[0.1, 0.2, 0.3, 1.0],
        &[0.0, 0.0, 1.0],
        &[0.25, 0.5, 0.75, 1.0],
    ];
    for splits in split_sets {
        for granularity in [1u64, 32, 64, 128, 256] {
            for nrows in (0..600).chain([4096, 4097, 11008, 32000, 152064, 1 << 24]) {
                check_cover(&row_split(nrows, granularity, splits), nrows, granularity);
            }
        }
    }
    // Split points from negative weights are unsorted; the slices still cover every row once.
    check_cover(&row_split(1000, 32, &[0.9, 0.2, 1.0]), 1000, 32);
    check_cover(&row_split(1000, 32, &[f32::NAN, 1.0]), 1000, 32);
}

#[test]
fn placement_row_split_maps_to_request_devices() {
    let d = free_gib(&[12, 8]);
    let p = place(23, -1, SplitMode::Row, 0, None, &d).unwrap();
    assert_eq!(p.row_split(4096, 32), row_split(4096, 32, &[0.6, 1.0]));
    // NONE with main_gpu 1: one model device, which is request device 1.
    let p = place(23, -1, SplitMode::None, 1, None, &d).unwrap();
    assert_eq!(p.row_split(4096, 256), vec![slice(1, 0, 4096)]);
}

// ---------------------------------------------------------------------------------------------
// Registry and virtual GPU capacity accounting
// ---------------------------------------------------------------------------------------------

#[test]
fn registry_order_names_types() {
    let r = Registry::with_virtual_gpus(&[24 * GIB, 8 * GIB]);
    let names: Vec<&str> = r.devices().iter().map(|d| d.name()).collect();
    assert_eq!(names, ["VGPU0", "VGPU1", "CPU"]);
    for (i, d) in r.devices().iter().enumerate() {
        assert_eq!(d.index(), i);
    }
    assert_eq!(r.len(), 3);
    assert!(r.any_gpu());
    assert_eq!(r.cpu().name(), "CPU");
    assert_eq!(r.cpu().device_type(), DeviceType::Cpu);
    assert!(!r.cpu().description().is_empty());
    assert!(!r.cpu().is_virtual());
    let v0 = r.get(0).unwrap();
    assert_eq!(v0.device_type(), DeviceType::Gpu);
    assert!(v0.is_gpu() && v0.is_virtual());
    assert_eq!(v0.description(), "llama-hotswap virtual GPU (24 GiB)");
    assert_eq!(v0.device_id(), None);
    assert_eq!(v0.memory(), mem(24 * GIB, 24 * GIB));
    assert_eq!(r.get(1).unwrap().memory(), mem(8 * GIB, 8 * GIB));
    assert!(r.get(3).is_none());
    // Names are compared case-insensitively, as upstream.
    assert_eq!(r.by_name("vgpu1").unwrap().index(), 1);
    assert_eq!(r.by_name("cpu").unwrap().index(), 2);
    assert!(r.by_name("VGPU2").is_none());
    assert_eq!(r.by_type(DeviceType::Gpu).unwrap().name(), "VGPU0");
    assert_eq!(r.by_type(DeviceType::Cpu).unwrap().name(), "CPU");
    assert!(r.by_type(DeviceType::Accel).is_none());
    let default: Vec<usize> = r
        .default_model_devices()
        .iter()
        .map(|d| d.index())
        .collect();
    assert_eq!(default, [0, 1]);
    // The CPU reports its memory as all free, as upstream.
    let cpu = r.cpu().memory();
    assert_eq!(cpu.free, cpu.total);

    let cpu_only = Registry::with_virtual_gpus(&[]);
    assert_eq!(cpu_only.len(), 1);
    assert!(!cpu_only.any_gpu());
    assert!(cpu_only.default_model_devices().is_empty());
    assert_eq!(DeviceType::from_raw(1), Some(DeviceType::Gpu));
    assert_eq!(DeviceType::from_raw(5), None);
}

#[test]
fn virtual_gpu_capacity_accounting() {
    let r = Registry::with_virtual_gpus(&[1000, 4096]);
    let v0 = r.get(0).unwrap();
    let v1 = r.get(1).unwrap();

    let a = v0.allocate(600).unwrap();
    assert_eq!(a.len(), 600);
    assert_eq!(a.device_index(), 0);
    assert!(a.host_slice().unwrap().iter().all(|&b| b == 0));
    assert_eq!(v0.memory(), mem(400, 1000));
    assert_eq!(v0.used(), 600);
    // The other device is independent.
    assert_eq!(v1.memory(), mem(4096, 4096));

    // used + bytes > capacity fails, naming the device, the request and the free bytes.
    let e = v0.allocate(401).unwrap_err();
    assert_eq!(
        e,
        DeviceError::OutOfMemory {
            device: "VGPU0".into(),
            requested: 401,
            free: 400,
            capacity: 1000
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("VGPU0") && msg.contains("401") && msg.contains("400"),
        "{msg}"
    );
    assert_eq!(
        v0.memory(),
        mem(400, 1000),
        "a failed allocation reserves nothing"
    );

    // used + bytes == capacity succeeds; then even 1 byte fails, 0 bytes still succeeds.
    let mut b = v0.allocate(400).unwrap();
    assert_eq!(v0.memory(), mem(0, 1000));
    assert!(v0.allocate(1).is_err());
    let empty = v0.allocate(0).unwrap();
    assert!(empty.is_empty());

    // Allocations own writable memory of their own.
    b.write(399, &[7]).unwrap();
    assert_eq!(b.host_slice().unwrap()[399], 7);
    assert_eq!(a.host_slice().unwrap()[0], 0);

    // Freeing restores the capacity.
    drop(a);
    assert_eq!(v0.memory(), mem(600, 1000));
    assert!(v0.allocate(601).is_err());
    let c = v0.allocate(600).unwrap();
    drop(b);
    drop(c);
    drop(empty);
    assert_eq!(v0.memory(), mem(1000, 1000));
    assert!(v0.allocate(1001).is_err());
    assert!(v0.allocate(u64::MAX).is_err());

    // allocate_copy: the same rule, the data copied.
    let data: Vec<u8> = (0..=255).collect();
    let copy = v1.allocate_copy(&data).unwrap();
    assert_eq!(copy.host_slice().unwrap(), &data[..]);
    assert_eq!(v1.memory(), mem(4096 - 256, 4096));
    assert!(v1.allocate_copy(&vec![1u8; 4096 - 255]).is_err());
    drop(copy);
    assert_eq!(v1.memory(), mem(4096, 4096));

    // The CPU is not accounted.
    let cpu = r.cpu();
    let big = cpu.allocate(MIB).unwrap();
    assert_eq!(big.len() as u64, MIB);
    assert_eq!(cpu.used(), 0);
}

#[test]
fn virtual_gpu_accounting_is_thread_safe() {
    let r = Registry::with_virtual_gpus(&[1000]);
    let v0 = r.get(0).unwrap();
    let successes = std::sync::atomic::AtomicUsize::new(0);
    let held = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..400 {
                    if let Ok(a) = v0.allocate(1) {
                        successes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        held.lock().unwrap().push(a);
                    }
                    // Churn: allocate and free at once.
                    let _ = v0.allocate(3);
                }
            });
        }
    });
    assert_eq!(successes.into_inner(), 1000);
    assert_eq!(v0.memory(), mem(0, 1000));
    drop(held);
    assert_eq!(v0.memory(), mem(1000, 1000));
}

// ---------------------------------------------------------------------------------------------
// LLAMA_VIRTUAL_GPUS grammar
// ---------------------------------------------------------------------------------------------

#[test]
fn virtual_gpus_grammar() {
    let (caps, errors) = parse_virtual_gpus("24GiB,8GiB,512MiB,1000000");
    assert_eq!(caps, [24 * GIB, 8 * GIB, 512 * MIB, 1_000_000]);
    assert!(errors.is_empty());

    // Whitespace around entries, numbers and units; units in any case.
    let (caps, errors) = parse_virtual_gpus(" 24 GiB ,\t8gib,512 mib , 1000000 ,2 GIB");
    assert_eq!(caps, [24 * GIB, 8 * GIB, 512 * MIB, 1_000_000, 2 * GIB]);
    assert!(errors.is_empty());

    // Unset/empty: nothing.
    assert_eq!(parse_virtual_gpus(""), (vec![], vec![]));
    assert_eq!(parse_virtual_gpus("   "), (vec![], vec![]));

    // Every unit.
    assert_eq!(parse_capacity("7B"), Ok(7));
    assert_eq!(parse_capacity("7b"), Ok(7));
    assert_eq!(parse_capacity("7"), Ok(7));
    assert_eq!(parse_capacity("3KiB"), Ok(3 << 10));
    assert_eq!(parse_capacity("3MiB"), Ok(3 << 20));
    assert_eq!(parse_capacity("3GiB"), Ok(3 << 30));
    assert_eq!(parse_capacity("3TiB"), Ok(3 << 40));
    assert_eq!(parse_capacity("3KB"), Ok(3_000));
    assert_eq!(parse_capacity("3kb"), Ok(3_000));
    assert_eq!(parse_capacity("3MB"), Ok(3_000_000));
    assert_eq!(parse_capacity("3GB"), Ok(3_000_000_000));
    assert_eq!(parse_capacity("3TB"), Ok(3_000_000_000_000));
    // Fractions, rounded down to whole bytes.
    assert_eq!(parse_capacity("1.5GiB"), Ok(3 << 29));
    assert_eq!(parse_capacity(".5KiB"), Ok(512));
    assert_eq!(parse_capacity("2.KiB"), Ok(2048));
    assert_eq!(parse_capacity("0.1KiB"), Ok(102));
    assert_eq!(parse_capacity("007MiB"), Ok(7 << 20));
}

#[test]
fn virtual_gpus_malformed_entries_are_skipped() {
    let (caps, errors) = parse_virtual_gpus("24GiB, bogus ,8GiB");
    assert_eq!(caps, [24 * GIB, 8 * GIB]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].entry, "bogus");
    assert!(errors[0].to_string().contains("\"bogus\""), "{}", errors[0]);

    for bad in [
        "",
        "GiB",
        "-1",
        "+1",
        "1.2.3",
        "12XB",
        "12 G",
        "12 GiBs",
        "1 2",
        "0",
        "0GiB",
        "0.0001B",
        "18446744073709551616",
        "99999999999TiB",
        ".",
    ] {
        let (caps, errors) = parse_virtual_gpus(&format!("1MiB,{bad},2MiB"));
        assert!(!errors.is_empty(), "{bad:?} accepted");
        assert_eq!(caps[0], MIB, "{bad:?}");
        assert_eq!(*caps.last().unwrap(), 2 * MIB, "{bad:?}");
    }
    // Empty entries between commas are malformed too.
    let (caps, errors) = parse_virtual_gpus("8GiB,,4GiB,");
    assert_eq!(caps, [8 * GIB, 4 * GIB]);
    assert_eq!(errors.len(), 2);
    // The largest value that fits.
    assert_eq!(parse_capacity("18446744073709551615"), Ok(u64::MAX));
}

#[test]
fn capacity_formatting() {
    assert_eq!(format_capacity(24 * GIB), "24 GiB");
    assert_eq!(format_capacity(512 * MIB), "512 MiB");
    assert_eq!(format_capacity(3 << 29), "1536 MiB");
    assert_eq!(format_capacity(2 << 40), "2 TiB");
    assert_eq!(format_capacity(4096), "4 KiB");
    assert_eq!(format_capacity(1_000_000), "1000000 B");
    let r = Registry::with_virtual_gpus(&[1_000_000]);
    assert_eq!(
        r.get(0).unwrap().description(),
        "llama-hotswap virtual GPU (1000000 B)"
    );
}

// ---------------------------------------------------------------------------------------------
// tensor_buft_overrides
// ---------------------------------------------------------------------------------------------

#[test]
fn overrides_first_match_wins() {
    let rules =
        BuftOverrides::new([("exps", "CPU"), (r"blk\.1\.", "VGPU0"), ("ffn", "VGPU1")]).unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules.find("blk.0.ffn_up_exps.weight"), Some(&"CPU"));
    // Both rule 0 and rule 1 match: the first wins.
    assert_eq!(rules.find("blk.1.ffn_up_exps.weight"), Some(&"CPU"));
    assert_eq!(rules.find("blk.1.attn_q.weight"), Some(&"VGPU0"));
    assert_eq!(rules.find("blk.2.ffn_down.weight"), Some(&"VGPU1"));
    assert_eq!(rules.find("token_embd.weight"), None);
    assert_eq!(
        rules.find_rule("blk.11.ffn_gate.weight"),
        Some((2, "ffn", &"VGPU1"))
    );
    // `blk\.1\.` does not match blk.11.
    assert_eq!(rules.find("blk.11.attn_q.weight"), None);
}

#[test]
fn overrides_search_semantics() {
    // regex_search: anywhere in the name unless anchored.
    let rules = BuftOverrides::new([("^output", 1), (r"norm\.weight$", 2)]).unwrap();
    assert_eq!(rules.find("output.weight"), Some(&1));
    assert_eq!(rules.find("output_norm.weight"), Some(&1));
    assert_eq!(rules.find("blk.0.attn_norm.weight"), Some(&2));
    assert_eq!(rules.find("blk.0.attn_norm.weight.x"), None);
    assert_eq!(rules.find("blk.0.output"), None);

    // Upstream's --cpu-moe and --n-cpu-moe patterns (common/common.h).
    let exps = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";
    let n_cpu_moe = format!(r"blk\.{}{exps}", 1);
    let rules = BuftOverrides::new([(n_cpu_moe.as_str(), "CPU"), (exps, "VGPU0")]).unwrap();
    assert_eq!(rules.find("blk.1.ffn_gate_up_exps.weight"), Some(&"CPU"));
    assert_eq!(rules.find("blk.2.ffn_up_chexps.weight"), Some(&"VGPU0"));
    assert_eq!(rules.find("blk.2.ffn_down_exps.weight"), Some(&"VGPU0"));
    assert_eq!(rules.find("blk.2.ffn_down_shexp.weight"), None);
    assert_eq!(rules.find("blk.2.ffn_down.weight"), None);
    // Upstream's own patterns with \d.
    let rules = BuftOverrides::new([(r"blk\.\d*\.attn_q.weight", ())]).unwrap();
    assert!(rules.find("blk.12.attn_q.weight").is_some());

    let empty = BuftOverrides::<u8>::new(Vec::<(&str, u8)>::new()).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.find("anything"), None);
}

#[test]
fn overrides_invalid_pattern_is_an_error_naming_it() {
    let e = BuftOverrides::new([("exps", 0), ("blk.(", 1)]).unwrap_err();
    match &e {
        OverrideError::InvalidPattern { pattern, reason } => {
            assert_eq!(pattern, "blk.(");
            assert!(!reason.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("\"blk.(\""), "{e}");
    // ECMAScript backreferences are not supported: an error, not a silent mismatch.
    assert!(BuftOverrides::new([(r"(a)\1", 0)]).is_err());
    assert!(BuftOverrides::new([("[z-a]", 0)]).is_err());
}

#[test]
fn override_list_parsing() {
    assert_eq!(
        parse_override_list(r"exps=CPU,blk\.0\.=VGPU0").unwrap(),
        vec![
            ("exps".to_string(), "CPU".to_string()),
            (r"blk\.0\.".to_string(), "VGPU0".to_string())
        ]
    );
    // Split at the first '='.
    assert_eq!(
        parse_override_list("a=b=c").unwrap(),
        vec![("a".to_string(), "b=c".to_string())]
    );
    assert_eq!(
        parse_override_list("exps=CPU,noequals").unwrap_err(),
        OverrideError::MissingEquals("noequals".into())
    );
    assert!(parse_override_list("").is_err());
}
