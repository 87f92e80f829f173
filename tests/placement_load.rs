//! Placement through real loads: every tensor of a model written here lands where upstream's
//! rules put it (layer placement, n_gpu_layers × split mode × main_gpu edges, params.devices,
//! tensor_split, buffer-type overrides, split mode ROW with block rounding and the MoE family
//! partition), falls back to the CPU when a virtual GPU is full, and reads back byte for byte
//! equal to the file in every load mode. The placement JSON is parsed and its per-device
//! `used` checked against the tensors. Each test builds its own registry
//! (`Registry::with_virtual_gpus`), so nothing depends on `LLAMA_VIRTUAL_GPUS`.

use std::path::PathBuf;
use std::sync::{Mutex, Once};

use llama::device::placement::MAX_DEVICES;
use llama::device::{Registry, SplitMode};
use llama::gguf::fixtures::{llama_tensor_specs, vocab_only, TinyLlamaOpts};
use llama::gguf::{GgmlType, Gguf};
use llama::loader::place::{Home, PlacementParams};
use llama::loader::{load, LoadError, LoadOptions, ModelSource};
use llama::model::report::TensorInfo;
use llama::model::tensors::BufferKind;
use llama::model::{LoadMode, Model};

const GIB: u64 = 1 << 30;

/// The load modes every placement is read back in.
const MODES: [LoadMode; 3] = [LoadMode::Auto, LoadMode::None, LoadMode::DirectIo];

// ---------------------------------------------------------------------------------------------
// Logging: the loader logs every load; keep the lines (the fallback test looks for its
// warning) instead of flooding stderr.

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn quiet_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        llama::log::set_sink(Some(Box::new(|_, line| {
            LOG.lock().unwrap().push(line.to_string());
        })));
    });
}

fn logged(needle_a: &str, needle_b: &str) -> bool {
    LOG.lock()
        .unwrap()
        .iter()
        .any(|l| l.contains(needle_a) && l.contains(needle_b))
}

// ---------------------------------------------------------------------------------------------
// Fixtures: llama-shaped models whose tensors hold arbitrary bytes of any type (check_tensors
// is off), written under the target directory, with each tensor's bytes taken back from the
// written file.

struct FileTensor {
    name: String,
    ggml_type: GgmlType,
    ne: [i64; 4],
    bytes: Vec<u8>,
}

struct Fixture {
    path: PathBuf,
    /// Every file written (the shards of a split model).
    files: Vec<PathBuf>,
    n_layer: u32,
    tensors: Vec<FileTensor>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Fixture {
    fn tensor(&self, name: &str) -> &FileTensor {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tensor {name} in the fixture"))
    }
}

fn opts(n_layer: u32, n_embd: u32, n_ff: u32) -> TinyLlamaOpts {
    TinyLlamaOpts {
        name: "placement".into(),
        n_layer,
        n_embd,
        n_head: 4,
        n_head_kv: 2,
        n_ff,
        n_vocab: 32,
        ..TinyLlamaOpts::default()
    }
}

fn moe_opts(n_layer: u32, n_embd: u32, n_ff: u32) -> TinyLlamaOpts {
    TinyLlamaOpts {
        n_expert: 4,
        n_expert_used: 2,
        ..opts(n_layer, n_embd, n_ff)
    }
}

/// Deterministic bytes for a tensor (a different stream per name).
fn pattern(name: &str, n: usize) -> Vec<u8> {
    let mut x = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Writes the tensors of `llama_tensor_specs(opts)` with the type `ty(name, default type)`.
fn build(tag: &str, opts: &TinyLlamaOpts, ty: impl Fn(&str, GgmlType) -> GgmlType) -> Fixture {
    let writer = writer_for(opts, ty);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("placement_load-{}-{tag}.gguf", std::process::id()));
    writer.write_to(&path).unwrap();
    let file = std::fs::read(&path).unwrap();
    Fixture {
        path: path.clone(),
        files: vec![path],
        n_layer: opts.n_layer,
        tensors: file_tensors(&file),
    }
}

/// The same model as shards of at most `max_tensors` tensors (gguf-split style); the bytes to
/// compare with come from the unsplit file.
fn build_split(tag: &str, opts: &TinyLlamaOpts, max_tensors: usize) -> Fixture {
    let writer = writer_for(opts, |_, t| t);
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("placement_load-{}-{tag}", std::process::id()));
    let files = writer
        .write_split(
            prefix.to_str().unwrap(),
            llama::gguf::SplitMode::MaxTensors(max_tensors),
        )
        .unwrap();
    assert!(files.len() > 2);
    Fixture {
        path: files[0].clone(),
        files,
        n_layer: opts.n_layer,
        tensors: file_tensors(&writer.to_bytes().unwrap()),
    }
}

fn file_tensors(file: &[u8]) -> Vec<FileTensor> {
    let gguf = Gguf::parse(file).unwrap();
    gguf.tensors()
        .iter()
        .map(|t| {
            let start = t.abs_offset(&gguf) as usize;
            FileTensor {
                name: t.name.to_string(),
                ggml_type: t.ggml_type,
                ne: t.ne,
                bytes: file[start..start + t.nbytes as usize].to_vec(),
            }
        })
        .collect()
}

fn writer_for(
    opts: &TinyLlamaOpts,
    ty: impl Fn(&str, GgmlType) -> GgmlType,
) -> llama::gguf::GgufWriter {
    let mut writer = vocab_only(opts);
    for spec in llama_tensor_specs(opts) {
        let t = ty(&spec.name, spec.ggml_type);
        let mut ne = [1i64; 4];
        ne[..spec.dims.len()].copy_from_slice(&spec.dims);
        let n = t
            .nbytes(ne)
            .unwrap_or_else(|| panic!("{}: bad shape for {t:?}", spec.name));
        writer
            .add_tensor(&spec.name, &spec.dims, t, pattern(&spec.name, n as usize))
            .unwrap();
    }
    writer
}

fn dense(tag: &str, n_layer: u32, n_embd: u32, n_ff: u32) -> Fixture {
    build(tag, &opts(n_layer, n_embd, n_ff), |_, t| t)
}

// ---------------------------------------------------------------------------------------------
// Loading.

fn registry(capacities: &[u64]) -> &'static Registry {
    Box::leak(Box::new(Registry::with_virtual_gpus(capacities)))
}

fn params(
    registry: &'static Registry,
    n_gpu_layers: i32,
    split_mode: SplitMode,
    main_gpu: i32,
) -> PlacementParams {
    PlacementParams {
        registry,
        devices: None,
        n_gpu_layers,
        split_mode,
        main_gpu,
        tensor_split: None,
        overrides: Vec::new(),
    }
}

fn split(weights: &[f32]) -> Option<[f32; MAX_DEVICES]> {
    let mut ts = [0.0f32; MAX_DEVICES];
    ts[..weights.len()].copy_from_slice(weights);
    Some(ts)
}

fn try_load(
    fx: &Fixture,
    placement: PlacementParams,
    load_mode: LoadMode,
    no_alloc: bool,
) -> Result<Model, LoadError> {
    quiet_log();
    load(
        ModelSource::Path(fx.path.clone()),
        LoadOptions {
            load_mode,
            no_alloc,
            placement,
            hotswap: false,
            ..Default::default()
        },
    )
}

/// Loads, then checks that every tensor reads back equal to the file's bytes.
fn load_checked(fx: &Fixture, placement: PlacementParams, mode: LoadMode, what: &str) -> Model {
    let model = try_load(fx, placement, mode, false)
        .unwrap_or_else(|e| panic!("{what} ({mode:?}): load failed: {e}"));
    check_readback(&model, fx, &format!("{what} ({mode:?})"));
    model
}

fn check_readback(model: &Model, fx: &Fixture, what: &str) {
    assert_eq!(
        model.tensors.len(),
        fx.tensors.len(),
        "{what}: tensor count"
    );
    for t in &fx.tensors {
        let tensor = model
            .tensors
            .get(&t.name)
            .unwrap_or_else(|| panic!("{what}: {} missing", t.name));
        let mut buf = vec![0xEEu8; t.bytes.len()];
        tensor
            .read()
            .read_into(&mut buf)
            .unwrap_or_else(|e| panic!("{what}: read_into({}) failed: {e}", t.name));
        assert!(
            buf == t.bytes,
            "{what}: {} reads back different bytes",
            t.name
        );
    }
}

fn info(model: &Model, name: &str) -> TensorInfo {
    model
        .tensor_info(name)
        .unwrap_or_else(|| panic!("no tensor info for {name}"))
}

/// The buffer a CPU tensor is in for a load mode (no fallback involved).
fn cpu_buffer(mode: LoadMode) -> BufferKind {
    if mode.uses_mmap() {
        BufferKind::Mapped
    } else {
        BufferKind::Host
    }
}

/// Bytes of one row slice: `count` elements along `dim` for every index of the others.
fn slice_bytes(t: &FileTensor, dim: usize, count: u64) -> u64 {
    let ty = t.ggml_type;
    match dim {
        1 => count * ty.row_size(t.ne[0]).unwrap() * (t.ne[2] * t.ne[3]) as u64,
        0 => count / ty.block_size() * ty.type_size() * (t.ne[1] * t.ne[2] * t.ne[3]) as u64,
        _ => unreachable!(),
    }
}

/// The split dimension as the issue states it: matrices and MoE gate/up along dim 1, MoE
/// down along dim 0; 1-D tensors are never split.
fn split_dim(name: &str, ne: [i64; 4]) -> Option<usize> {
    let expert_rows = name.contains("ffn_gate_exps") || name.contains("ffn_up_exps");
    if name.contains("ffn_down_exps") {
        Some(0)
    } else if expert_rows || (ne[1] > 1 && ne[2] == 1 && ne[3] == 1) {
        Some(1)
    } else {
        None
    }
}

/// Bytes each registry device holds for this model, from the tensor infos.
fn bytes_per_device(model: &Model, fx: &Fixture, n_devices: usize) -> Vec<u64> {
    let mut used = vec![0u64; n_devices];
    for t in &fx.tensors {
        let i = info(model, &t.name);
        match i.buffer {
            BufferKind::None => {}
            BufferKind::RowSplit => {
                let dim = split_dim(&t.name, t.ne).expect("a row-split tensor has a split dim");
                for &(d, _, count) in &i.rows {
                    used[d] += slice_bytes(t, dim, count);
                }
            }
            _ => used[i.device as usize] += t.bytes.len() as u64,
        }
    }
    used
}

/// Every virtual GPU's accounted usage equals the bytes of the model's tensors on it
/// (nothing leaked by a failed allocation, nothing double-counted).
fn check_accounting(model: &Model, fx: &Fixture, registry: &Registry, what: &str) {
    let per_device = bytes_per_device(model, fx, registry.len());
    for d in registry.devices() {
        if d.is_virtual() {
            assert_eq!(
                d.used(),
                per_device[d.index()],
                "{what}: {} used bytes vs the bytes of its tensors",
                d.name()
            );
        }
    }
}

fn check_released(registry: &Registry, what: &str) {
    for d in registry.devices() {
        assert_eq!(
            d.used(),
            0,
            "{what}: {} still holds bytes after the model was dropped",
            d.name()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// An independent statement of upstream's placement rules (llama_prepare_model_devices and
// load_tensors), to compare whole loads against.

struct Expected {
    /// The model's devices (registry indices).
    devices: Vec<usize>,
    splits: Vec<f32>,
    /// Registry index of layers 0..=n_layer (last: output); None is the CPU.
    layers: Vec<Option<usize>>,
}

/// `candidates`: registry indices offered; `free`: their free bytes. None: the load must fail
/// (main_gpu out of range in split mode NONE).
fn expected(
    n_layer: u32,
    ngl: i32,
    mode: SplitMode,
    main_gpu: i32,
    tensor_split: Option<&[f32]>,
    candidates: &[usize],
    free: &[u64],
) -> Option<Expected> {
    let mut model_devices: Vec<usize> = (0..candidates.len()).collect();
    if mode == SplitMode::None && !model_devices.is_empty() {
        if main_gpu < 0 {
            model_devices.clear();
        } else if main_gpu as usize >= model_devices.len() {
            return None;
        } else {
            model_devices = vec![main_gpu as usize];
        }
    }
    let n = model_devices.len();
    let weights: Vec<f32> = match tensor_split {
        Some(ts) if ts.iter().take(n).any(|&w| w != 0.0) => {
            (0..n).map(|i| ts.get(i).copied().unwrap_or(0.0)).collect()
        }
        _ => model_devices.iter().map(|&i| free[i] as f32).collect(),
    };
    let mut splits = Vec::with_capacity(n);
    let mut sum = 0.0f32;
    for w in &weights {
        sum += w;
        splits.push(sum);
    }
    for s in &mut splits {
        *s /= sum;
    }
    let n_layer = i64::from(n_layer);
    let ngl = if ngl < 0 { n_layer + 1 } else { i64::from(ngl) };
    let start = (n_layer + 1 - ngl).max(0);
    let act = if n == 0 { 0 } else { ngl.min(n_layer + 1) };
    let layers = (0..=n_layer)
        .map(|il| {
            if il < start || il - start >= act {
                return None;
            }
            let f = (il - start) as f32 / act as f32;
            let k = splits
                .iter()
                .position(|&s| f < s)
                .expect("a device for every layer");
            Some(candidates[model_devices[k]])
        })
        .collect();
    Some(Expected {
        devices: model_devices.iter().map(|&i| candidates[i]).collect(),
        splits,
        layers,
    })
}

/// The row slices of `len` elements: boundary k at `trunc(f32(len) * splits[k-1])`, rounded
/// down to `granularity`; empty slices dropped.
fn expected_slices(
    len: u64,
    granularity: u64,
    devices: &[usize],
    splits: &[f32],
) -> Vec<(usize, u64, u64)> {
    let mut out = Vec::new();
    let mut low = 0u64;
    for (i, &d) in devices.iter().enumerate() {
        let high = if i + 1 == devices.len() {
            len
        } else {
            let raw = (len as f32 * splits[i]) as u64;
            (raw - raw % granularity).clamp(low, len)
        };
        if high > low {
            out.push((d, low, high - low));
        }
        low = high;
    }
    out
}

/// The layer a tensor belongs to: None for the input layer, n_layer for the output layer.
fn layer_index(name: &str, n_layer: u32) -> Option<usize> {
    if name.starts_with("token_embd") {
        return None;
    }
    match name.strip_prefix("blk.") {
        Some(rest) => Some(rest.split('.').next().unwrap().parse().unwrap()),
        None => Some(n_layer as usize),
    }
}

/// Checks every tensor's device, buffer and row slices against `want` (no overrides, no
/// fallback: every device has room).
fn check_placement(
    model: &Model,
    fx: &Fixture,
    want: &Expected,
    mode: SplitMode,
    load_mode: LoadMode,
    what: &str,
) {
    let cpu = model.cpu_index();
    let devices = model.devices.as_ref().expect("model devices");
    assert_eq!(devices.devices, want.devices, "{what}: model devices");
    assert_eq!(devices.splits, want.splits, "{what}: split points");
    assert_eq!(devices.layers, want.layers, "{what}: layer devices");
    for t in &fx.tensors {
        let i = info(model, &t.name);
        let layer_dev = layer_index(&t.name, fx.n_layer).and_then(|l| want.layers[l]);
        let repeating = t.name.starts_with("blk.");
        assert_eq!(i.fallback_from, None, "{what}: {} fell back", t.name);
        match layer_dev {
            None => {
                assert_eq!(
                    i.device, cpu as i32,
                    "{what}: {} should be on the CPU",
                    t.name
                );
                assert_eq!(i.buffer, cpu_buffer(load_mode), "{what}: {} buffer", t.name);
            }
            Some(d) => {
                let row_dim = split_dim(&t.name, t.ne)
                    .filter(|_| mode == SplitMode::Row && repeating && want.devices.len() > 1);
                if let Some(dim) = row_dim {
                    let len = if dim == 1 { t.ne[1] } else { t.ne[0] } as u64;
                    let slices =
                        expected_slices(len, t.ggml_type.block_size(), &want.devices, &want.splits);
                    assert_eq!(i.buffer, BufferKind::RowSplit, "{what}: {} buffer", t.name);
                    assert_eq!(i.rows, slices, "{what}: {} row slices", t.name);
                    assert_eq!(i.device, slices[0].0 as i32, "{what}: {} device", t.name);
                } else {
                    assert_eq!(i.device, d as i32, "{what}: {} device", t.name);
                    assert_eq!(i.buffer, BufferKind::Device, "{what}: {} buffer", t.name);
                    assert!(i.rows.is_empty(), "{what}: {} has row slices", t.name);
                }
            }
        }
    }
}

/// Layer runs `[(first, last, device)]` of `layers` (None = CPU), for readable asserts.
fn runs(layers: &[Option<usize>]) -> Vec<(usize, usize, Option<usize>)> {
    let mut out: Vec<(usize, usize, Option<usize>)> = Vec::new();
    for (il, &d) in layers.iter().enumerate() {
        match out.last_mut() {
            Some(run) if run.2 == d => run.1 = il,
            _ => out.push((il, il, d)),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 1. Worked examples.

#[test]
fn worked_example_32_layers_24_offloaded_one_gpu() {
    let fx = dense("we1", 32, 32, 32);
    let reg = registry(&[24 * GIB]);
    let cpu = reg.cpu().index();
    for mode in MODES {
        let model = load_checked(&fx, params(reg, 24, SplitMode::Layer, 0), mode, "32/24");
        let d = model.devices.as_ref().unwrap();
        assert_eq!(runs(&d.layers), vec![(0, 8, None), (9, 32, Some(0))]);
        assert_eq!((d.i_gpu_start, d.act_gpu_layers), (9, 24));
        // Upstream's log lines.
        assert!(logged(
            "load_tensors: offloading 23 repeating layers to GPU",
            ""
        ));
        assert!(logged("load_tensors: offloading output layer to GPU", ""));
        assert!(logged("load_tensors: offloaded 24/33 layers to GPU", ""));
        assert_eq!(info(&model, "token_embd.weight").device, cpu as i32);
        for il in 0..32 {
            let want = if il < 9 { cpu as i32 } else { 0 };
            for suffix in ["attn_norm.weight", "attn_q.weight", "ffn_down.weight"] {
                assert_eq!(
                    info(&model, &format!("blk.{il}.{suffix}")).device,
                    want,
                    "blk.{il}.{suffix}"
                );
            }
        }
        assert_eq!(info(&model, "output.weight").device, 0);
        assert_eq!(info(&model, "output_norm.weight").device, 0);
        check_accounting(&model, &fx, reg, "32/24");
        drop(model);
        check_released(reg, "32/24");
    }
}

#[test]
fn worked_example_two_gpus_12_and_8_gib() {
    let fx = dense("we2", 24, 32, 32);
    let reg = registry(&[12 * GIB, 8 * GIB]);
    let cpu = reg.cpu().index();
    // n_gpu_layers = 24 of 25 layers (24 blocks + output): i_gpu_start = 1, so block 0 stays
    // on the CPU; splits 0.6 / 1.0 over 24 offloaded layers: blocks 1-15 | 16-23 + output.
    for mode in MODES {
        let model = load_checked(
            &fx,
            params(reg, 24, SplitMode::Layer, 0),
            mode,
            "12/8 ngl 24",
        );
        let d = model.devices.as_ref().unwrap();
        assert_eq!(d.splits, vec![0.6f32, 1.0]);
        assert_eq!(
            runs(&d.layers),
            vec![(0, 0, None), (1, 15, Some(0)), (16, 24, Some(1))]
        );
        assert_eq!(info(&model, "blk.0.attn_q.weight").device, cpu as i32);
        assert_eq!(info(&model, "blk.15.attn_q.weight").device, 0);
        assert_eq!(info(&model, "blk.16.attn_q.weight").device, 1);
        assert_eq!(info(&model, "output.weight").device, 1);
        check_accounting(&model, &fx, reg, "12/8");
    }
    // Every layer offloaded (-1 or 25): blocks 0-14 on VGPU0, 15-23 + output on VGPU1
    // (fraction 15/25 == 0.6 is not below the split point 0.6). The issue text's 0-13 / 14-23
    // does not follow from upstream's formula.
    for ngl in [-1, 25] {
        let model = load_checked(
            &fx,
            params(reg, ngl, SplitMode::Layer, 0),
            LoadMode::Auto,
            "12/8 all",
        );
        let d = model.devices.as_ref().unwrap();
        assert_eq!(
            runs(&d.layers),
            vec![(0, 14, Some(0)), (15, 24, Some(1))],
            "ngl {ngl}"
        );
        assert_eq!(info(&model, "blk.14.ffn_up.weight").device, 0);
        assert_eq!(info(&model, "blk.15.ffn_up.weight").device, 1);
        assert_eq!(info(&model, "token_embd.weight").device, cpu as i32);
    }
}

#[test]
fn worked_example_three_devices_tensor_split_proportions() {
    // tensor_split entries are proportions, not cumulative: [.33, .67, 1] normalizes to the
    // split points [.165, .5, 1].
    let fx = dense("we3", 32, 32, 32);
    let reg = registry(&[8 * GIB, 8 * GIB, 8 * GIB]);
    let mut p = params(reg, -1, SplitMode::Layer, 0);
    p.tensor_split = split(&[0.33, 0.67, 1.0]);
    for mode in MODES {
        let model = load_checked(&fx, p.clone(), mode, "three devices");
        let d = model.devices.as_ref().unwrap();
        assert!(
            (d.splits[0] - 0.165).abs() < 1e-6 && (d.splits[1] - 0.5).abs() < 1e-6,
            "{:?}",
            d.splits
        );
        assert_eq!(d.splits[2], 1.0);
        assert_eq!(
            runs(&d.layers),
            vec![(0, 5, Some(0)), (6, 16, Some(1)), (17, 32, Some(2))]
        );
        let want = expected(
            32,
            -1,
            SplitMode::Layer,
            0,
            Some(&[0.33, 0.67, 1.0]),
            &[0, 1, 2],
            &[8 * GIB; 3],
        )
        .unwrap();
        check_placement(&model, &fx, &want, SplitMode::Layer, mode, "three devices");
        check_accounting(&model, &fx, reg, "three devices");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Every edge of n_gpu_layers × split mode × main_gpu, through real loads on two VGPUs.

#[test]
fn every_edge_of_ngl_split_mode_and_main_gpu() {
    let n_layer = 4;
    let fx = dense("edges", n_layer, 32, 64);
    // Unequal capacities, so the split point (0.75) is not the midpoint.
    let caps = [3 * GIB, GIB];
    let reg = registry(&caps);
    let free = [3 * GIB, GIB];
    let nl = n_layer as i32;
    for ngl in [i32::MIN, -1, 0, 1, nl, nl + 1, nl + 2, 1000] {
        for mode in [SplitMode::None, SplitMode::Layer, SplitMode::Row] {
            for main_gpu in [-1, 0, 1, 2, 7] {
                let what = format!("ngl {ngl} {mode:?} main_gpu {main_gpu}");
                let want = expected(n_layer, ngl, mode, main_gpu, None, &[0, 1], &free);
                for load_mode in MODES {
                    let result = try_load(&fx, params(reg, ngl, mode, main_gpu), load_mode, false);
                    let Some(want) = &want else {
                        let err = result.err().unwrap_or_else(|| panic!("{what}: loaded"));
                        assert!(
                            err.to_string().contains("invalid value for main_gpu"),
                            "{what}: {err}"
                        );
                        continue;
                    };
                    let model = result.unwrap_or_else(|e| panic!("{what} ({load_mode:?}): {e}"));
                    let what = format!("{what} ({load_mode:?})");
                    // The fixed facts, stated directly as well.
                    let layers = &model.devices.as_ref().unwrap().layers;
                    let offloaded = layers.iter().filter(|l| l.is_some()).count();
                    let no_devices = mode == SplitMode::None && main_gpu < 0;
                    let ngl_eff = if ngl < 0 { nl + 1 } else { ngl.min(nl + 1) };
                    assert_eq!(
                        offloaded,
                        if no_devices { 0 } else { ngl_eff as usize },
                        "{what}"
                    );
                    if ngl == 1 && !no_devices {
                        assert!(
                            layers[..n_layer as usize].iter().all(|l| l.is_none()),
                            "{what}: only output"
                        );
                        assert!(
                            layers[n_layer as usize].is_some(),
                            "{what}: output offloaded"
                        );
                    }
                    if mode == SplitMode::None && main_gpu >= 0 {
                        assert!(
                            layers.iter().flatten().all(|&d| d == main_gpu as usize),
                            "{what}"
                        );
                    }
                    assert_eq!(
                        info(&model, "token_embd.weight").device,
                        model.cpu_index() as i32
                    );
                    check_placement(&model, &fx, want, mode, load_mode, &what);
                    check_readback(&model, &fx, &what);
                    check_accounting(&model, &fx, reg, &what);
                    drop(model);
                    check_released(reg, &what);
                }
            }
        }
    }
}

#[test]
fn params_devices_choose_and_order_the_gpus() {
    let fx = dense("devlist", 4, 32, 64);
    let reg = registry(&[GIB, GIB, GIB]);
    // Only VGPU2.
    let mut p = params(reg, -1, SplitMode::Layer, 0);
    p.devices = Some(vec![2]);
    let model = load_checked(&fx, p.clone(), LoadMode::Auto, "devices [2]");
    let want = expected(4, -1, SplitMode::Layer, 0, None, &[2], &[GIB, GIB, GIB]).unwrap();
    assert!(want.layers.iter().all(|l| *l == Some(2)));
    check_placement(
        &model,
        &fx,
        &want,
        SplitMode::Layer,
        LoadMode::Auto,
        "devices [2]",
    );
    drop(model);
    // Reversed order: the first listed device takes the first layers.
    p.devices = Some(vec![1, 0]);
    p.tensor_split = split(&[1.0, 1.0]);
    let model = load_checked(&fx, p.clone(), LoadMode::None, "devices [1, 0]");
    let d = model.devices.as_ref().unwrap();
    assert_eq!(d.devices, vec![1, 0]);
    assert_eq!(runs(&d.layers), vec![(0, 2, Some(1)), (3, 4, Some(0))]);
    drop(model);
    // Split mode NONE picks main_gpu within params.devices.
    let mut p = params(reg, -1, SplitMode::None, 1);
    p.devices = Some(vec![2, 0]);
    let model = load_checked(&fx, p.clone(), LoadMode::Auto, "NONE within devices");
    assert!(model
        .devices
        .as_ref()
        .unwrap()
        .layers
        .iter()
        .all(|l| *l == Some(0)));
    drop(model);
    p.main_gpu = 2;
    let err = try_load(&fx, p, LoadMode::Auto, false).expect_err("main_gpu 2 of 2 devices");
    assert!(
        err.to_string()
            .contains("invalid value for main_gpu: 2 (available devices: 2)"),
        "{err}"
    );
    // An empty device list: everything on the CPU, any main_gpu accepted.
    let mut p = params(reg, -1, SplitMode::None, 5);
    p.devices = Some(vec![]);
    let model = load_checked(&fx, p, LoadMode::Auto, "no devices");
    assert!(model
        .devices
        .as_ref()
        .unwrap()
        .layers
        .iter()
        .all(|l| l.is_none()));
    check_released(reg, "no devices");
}

#[test]
fn split_points_use_free_memory_at_load_time() {
    // A model already on VGPU0 shrinks its free memory, and the next load's split points
    // follow (upstream reads ggml_backend_dev_memory when it loads).
    let fx = dense("freemem", 4, 32, 64);
    let reg = registry(&[300_000, 300_000]);
    let first = load_checked(
        &fx,
        params(reg, -1, SplitMode::None, 0),
        LoadMode::Auto,
        "first",
    );
    let used0 = reg.get(0).unwrap().used();
    assert!(used0 > 100_000, "{used0}");
    let (free0, free1) = ((300_000 - used0) as f32, 300_000f32);
    let second = load_checked(
        &fx,
        params(reg, -1, SplitMode::Layer, 0),
        LoadMode::Auto,
        "second",
    );
    let d = second.devices.as_ref().unwrap();
    assert_eq!(d.splits, vec![free0 / (free0 + free1), 1.0]);
    let want = expected(
        4,
        -1,
        SplitMode::Layer,
        0,
        None,
        &[0, 1],
        &[300_000 - used0, 300_000],
    )
    .unwrap();
    assert_eq!(d.layers, want.layers);
    assert_ne!(
        runs(&d.layers),
        vec![(0, 2, Some(0)), (3, 4, Some(1))],
        "equal free memory would give this"
    );
    drop((first, second));
    check_released(reg, "free memory");
}

// ---------------------------------------------------------------------------------------------
// 3. tensor_split normalization.

#[test]
fn tensor_split_is_normalized_and_zero_means_free_memory() {
    let fx = dense("tsplit", 7, 32, 64);
    let reg = registry(&[GIB, 3 * GIB]);
    let load_split = |ts: Option<[f32; MAX_DEVICES]>, mode: SplitMode| {
        let mut p = params(reg, -1, mode, 0);
        p.tensor_split = ts;
        load_checked(&fx, p, LoadMode::Auto, &format!("tensor_split {ts:?}"))
    };
    for mode in [SplitMode::Layer, SplitMode::Row] {
        let a = load_split(split(&[3.0, 1.0]), mode);
        let b = load_split(split(&[0.75, 0.25]), mode);
        let (da, db) = (a.devices.as_ref().unwrap(), b.devices.as_ref().unwrap());
        assert_eq!(da.splits, vec![0.75, 1.0]);
        assert_eq!(da.splits, db.splits);
        assert_eq!(da.layers, db.layers);
        // 8 layers: fraction il/8 < 0.75 → layers 0-5 on VGPU0.
        assert_eq!(runs(&da.layers), vec![(0, 5, Some(0)), (6, 7, Some(1))]);
        for t in &fx.tensors {
            let (ia, ib) = (info(&a, &t.name), info(&b, &t.name));
            assert_eq!(
                (ia.device, ia.buffer, &ia.rows),
                (ib.device, ib.buffer, &ib.rows),
                "{}",
                t.name
            );
        }
        if mode == SplitMode::Row {
            // 32 rows of F32: 24 | 8.
            assert_eq!(
                info(&a, "blk.0.attn_q.weight").rows,
                vec![(0, 0, 24), (1, 24, 8)]
            );
        }
        drop((a, b));
        // Entries past the model's device count are ignored.
        let c = load_split(split(&[1.0, 1.0, 50.0, 7.0]), mode);
        assert_eq!(c.devices.as_ref().unwrap().splits, vec![0.5, 1.0]);
        drop(c);
        // All zero (and NULL): weights from free memory, 1 GiB : 3 GiB.
        for ts in [split(&[]), None] {
            let z = load_split(ts, mode);
            let d = z.devices.as_ref().unwrap();
            assert_eq!(d.splits, vec![0.25, 1.0], "{ts:?}");
            assert_eq!(runs(&d.layers), vec![(0, 1, Some(0)), (2, 7, Some(1))]);
        }
        // A zero weight gives that device nothing.
        let z = load_split(split(&[0.0, 1.0]), mode);
        let d = z.devices.as_ref().unwrap();
        assert!(d.layers.iter().all(|l| *l == Some(1)), "{:?}", d.layers);
        if mode == SplitMode::Row {
            assert_eq!(info(&z, "blk.0.attn_q.weight").rows, vec![(1, 0, 32)]);
        }
    }
    check_released(reg, "tensor_split");
}

// ---------------------------------------------------------------------------------------------
// 4. A full virtual GPU: the tensors that do not fit fall back to the CPU.

#[test]
fn capacity_overflow_falls_back_to_cpu() {
    let fx = dense("overflow", 4, 32, 64);
    // Room for about two layers (one layer is 36 KiB).
    let capacity = 80_000u64;
    let reg = registry(&[capacity]);
    let cpu = reg.cpu().index();
    for mode in MODES {
        let what = format!("overflow ({mode:?})");
        let model = load_checked(&fx, params(reg, -1, SplitMode::Layer, 0), mode, &what);
        // Allocation in file order: a tensor fits when used + size <= capacity.
        let mut used = 0u64;
        let mut fell_back = Vec::new();
        for t in &fx.tensors {
            let i = info(&model, &t.name);
            if t.name.starts_with("token_embd") {
                assert_eq!(i.device, cpu as i32);
                assert_eq!(i.fallback_from, None);
                continue;
            }
            let size = t.bytes.len() as u64;
            if used + size <= capacity {
                used += size;
                assert_eq!(
                    (i.device, i.buffer, i.fallback_from),
                    (0, BufferKind::Device, None),
                    "{what}: {}",
                    t.name
                );
            } else {
                fell_back.push(t.name.clone());
                assert_eq!(i.device, cpu as i32, "{what}: {}", t.name);
                assert_eq!(i.fallback_from, Some(0), "{what}: {}", t.name);
                assert_eq!(i.buffer, cpu_buffer(mode), "{what}: {}", t.name);
                assert!(
                    logged(&format!("tensor '{}'", t.name), "does not fit on VGPU0"),
                    "{what}: no warning for {}",
                    t.name
                );
            }
        }
        assert!(fell_back.len() > 5, "{what}: only {fell_back:?} fell back");
        assert_eq!(reg.get(0).unwrap().used(), used, "{what}");
        let json = json::parse(&model.placement_json()).expect("placement JSON parses");
        for t in json.get("tensors").unwrap().as_arr().unwrap() {
            let name = t.get("name").unwrap().as_str().unwrap();
            let fallback = t
                .get("fallback_from")
                .map(|f| f.as_str().unwrap().to_string());
            if fell_back.iter().any(|n| n == name) {
                assert_eq!(fallback.as_deref(), Some("VGPU0"), "{name}");
                assert_eq!(t.get("device").unwrap().as_str(), Some("CPU"), "{name}");
            } else {
                assert_eq!(fallback, None, "{name}");
            }
        }
        assert!(model
            .placement_json()
            .contains("\"fallback_from\":\"VGPU0\""));
        check_json(&model, &fx, reg);
        drop(model);
        check_released(reg, &what);
    }
}

#[test]
fn capacity_overflow_with_row_split_leaks_nothing() {
    // VGPU1 too small for most slices: a row split whose slice does not fit goes to the CPU
    // whole (its VGPU0 slice is given back); accounting matches what stays.
    let fx = dense("rowoverflow", 3, 32, 64);
    let reg = registry(&[GIB, 20_000]);
    let cpu = reg.cpu().index();
    for mode in MODES {
        let what = format!("row overflow ({mode:?})");
        let mut p = params(reg, -1, SplitMode::Row, 0);
        p.tensor_split = split(&[1.0, 1.0]);
        let model = load_checked(&fx, p, mode, &what);
        let mut split_ok = 0;
        let mut fallbacks = 0;
        for t in &fx.tensors {
            let i = info(&model, &t.name);
            if let Some(from) = i.fallback_from {
                fallbacks += 1;
                assert_eq!(
                    from, 1,
                    "{what}: {} fell back from VGPU0, which has room",
                    t.name
                );
                assert_eq!(i.device, cpu as i32, "{what}: {}", t.name);
                assert!(i.rows.is_empty());
            } else if i.buffer == BufferKind::RowSplit {
                split_ok += 1;
                assert_eq!(
                    i.rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                    vec![0, 1],
                    "{what}: {}",
                    t.name
                );
            }
        }
        assert!(
            split_ok > 0 && fallbacks > 0,
            "{what}: {split_ok} splits, {fallbacks} fallbacks"
        );
        check_accounting(&model, &fx, reg, &what);
        check_json(&model, &fx, reg);
        drop(model);
        check_released(reg, &what);
    }
}

#[test]
fn overflow_without_any_cpu_tensor_in_the_file() {
    // token_embd overridden to the GPU: no tensor of the file is a CPU tensor, so the owned
    // load modes read each tensor on its own (no host arena); the ones that do not fit get a
    // CPU buffer of their own ("host").
    let fx = dense("overflow-nocpu", 3, 32, 64);
    let capacity = 60_000u64;
    let reg = registry(&[capacity]);
    let cpu = reg.cpu().index();
    for mode in MODES {
        let what = format!("no CPU tensors ({mode:?})");
        let mut p = params(reg, -1, SplitMode::Layer, 0);
        p.overrides = vec![("token_embd".into(), 0)];
        let model = load_checked(&fx, p, mode, &what);
        let mut used = 0u64;
        let mut fallbacks = 0;
        for t in &fx.tensors {
            let i = info(&model, &t.name);
            let size = t.bytes.len() as u64;
            if used + size <= capacity {
                used += size;
                assert_eq!((i.device, i.fallback_from), (0, None), "{what}: {}", t.name);
            } else {
                fallbacks += 1;
                assert_eq!(
                    (i.device, i.fallback_from),
                    (cpu as i32, Some(0)),
                    "{what}: {}",
                    t.name
                );
                assert_eq!(i.buffer, cpu_buffer(mode), "{what}: {}", t.name);
            }
        }
        assert!(fallbacks > 0, "{what}");
        check_accounting(&model, &fx, reg, &what);
        check_json(&model, &fx, reg);
        drop(model);
        check_released(reg, &what);
    }
}

#[test]
fn split_files_place_and_read_back() {
    // Shards of 4 tensors: the later shards hold only offloaded tensors (or, with ngl 2, a mix).
    let fx = build_split("shards", &opts(4, 32, 64), 4);
    let reg = registry(&[GIB, GIB]);
    for (ngl, mode) in [
        (-1, SplitMode::Layer),
        (2, SplitMode::Layer),
        (-1, SplitMode::Row),
        (0, SplitMode::Layer),
    ] {
        for load_mode in MODES {
            let what = format!("shards ngl {ngl} {mode:?} ({load_mode:?})");
            let model = load_checked(&fx, params(reg, ngl, mode, 0), load_mode, &what);
            assert_eq!(model.files.len(), fx.files.len());
            let want = expected(4, ngl, mode, 0, None, &[0, 1], &[GIB, GIB]).unwrap();
            check_placement(&model, &fx, &want, mode, load_mode, &what);
            check_accounting(&model, &fx, reg, &what);
            check_json(&model, &fx, reg);
            drop(model);
            check_released(reg, &what);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Buffer-type overrides.

#[test]
fn overrides_keep_experts_on_cpu_and_first_match_wins() {
    let fx = build("moe-ot", &moe_opts(2, 32, 64), |_, t| t);
    let reg = registry(&[GIB, GIB]);
    let cpu = reg.cpu().index();
    for mode in MODES {
        // `exps=CPU`: the experts stay in host memory, the rest is offloaded.
        let mut p = params(reg, -1, SplitMode::Layer, 0);
        p.overrides = vec![("exps".into(), cpu)];
        let model = load_checked(&fx, p, mode, "exps=CPU");
        for t in &fx.tensors {
            let i = info(&model, &t.name);
            if t.name.contains("_exps") {
                assert_eq!(
                    (i.device, i.buffer),
                    (cpu as i32, cpu_buffer(mode)),
                    "{}",
                    t.name
                );
            } else if !t.name.starts_with("token_embd") {
                assert_eq!(i.buffer, BufferKind::Device, "{}", t.name);
                assert_ne!(i.device, cpu as i32, "{}", t.name);
            }
        }
        assert_eq!(
            info(&model, "blk.0.ffn_gate_inp.weight").buffer,
            BufferKind::Device
        );
        check_accounting(&model, &fx, reg, "exps=CPU");
        drop(model);

        // First match wins: blk.1's up experts go to VGPU1 before `exps` sends them to the CPU.
        let mut p = params(reg, -1, SplitMode::Layer, 0);
        p.overrides = vec![
            ("blk\\.1\\.ffn_up".into(), 1),
            ("exps".into(), cpu),
            ("blk\\.1\\.ffn_up_exps".into(), 0),
        ];
        let model = load_checked(&fx, p, mode, "first match");
        assert_eq!(info(&model, "blk.1.ffn_up_exps.weight").device, 1);
        assert_eq!(info(&model, "blk.0.ffn_up_exps.weight").device, cpu as i32);
        assert_eq!(
            info(&model, "blk.1.ffn_gate_exps.weight").device,
            cpu as i32
        );
        drop(model);

        // Overrides beat split mode ROW: the overridden tensor stays whole on its device.
        let mut p = params(reg, -1, SplitMode::Row, 0);
        p.overrides = vec![("exps".into(), cpu), ("blk\\.0\\.attn_q".into(), 1)];
        let model = load_checked(&fx, p, mode, "ROW + overrides");
        let q = info(&model, "blk.0.attn_q.weight");
        assert_eq!((q.device, q.buffer), (1, BufferKind::Device));
        assert_eq!(
            info(&model, "blk.1.attn_q.weight").buffer,
            BufferKind::RowSplit
        );
        assert_eq!(
            info(&model, "blk.0.ffn_down_exps.weight").device,
            cpu as i32
        );
        check_accounting(&model, &fx, reg, "ROW + overrides");
        drop(model);
        check_released(reg, "overrides");
    }
}

#[test]
fn override_moves_cpu_layer_tensors_to_a_gpu() {
    let fx = dense("ot-gpu", 3, 32, 64);
    let reg = registry(&[GIB, GIB]);
    let cpu = reg.cpu().index();
    let mut p = params(reg, 0, SplitMode::Layer, 0);
    // Unanchored search, as std::regex_search: "attn_q" matches blk.N.attn_q.weight.
    p.overrides = vec![
        ("blk\\.0\\.attn_q".into(), 1),
        ("^token_embd".into(), 0),
        ("^attn".into(), 0),
    ];
    for mode in MODES {
        let model = load_checked(&fx, p.clone(), mode, "override to GPU");
        assert!(model
            .devices
            .as_ref()
            .unwrap()
            .layers
            .iter()
            .all(|l| l.is_none()));
        assert_eq!(info(&model, "blk.0.attn_q.weight").device, 1);
        assert_eq!(
            info(&model, "blk.0.attn_q.weight").buffer,
            BufferKind::Device
        );
        assert_eq!(info(&model, "token_embd.weight").device, 0);
        assert_eq!(info(&model, "blk.1.attn_q.weight").device, cpu as i32);
        assert_eq!(info(&model, "blk.0.attn_k.weight").device, cpu as i32);
        check_accounting(&model, &fx, reg, "override to GPU");
    }
    // Split mode NONE with main_gpu -1 (no model devices) still honours an override.
    let mut p2 = params(reg, -1, SplitMode::None, -1);
    p2.overrides = vec![("output\\.weight".into(), 1)];
    let model = load_checked(&fx, p2, LoadMode::Auto, "override without devices");
    assert_eq!(info(&model, "output.weight").device, 1);
    assert_eq!(info(&model, "output_norm.weight").device, cpu as i32);
}

#[test]
fn invalid_override_pattern_fails_the_load() {
    let fx = dense("ot-bad", 2, 32, 64);
    let reg = registry(&[GIB]);
    for pattern in ["ffn_(up", "[", "a{2,1}"] {
        let mut p = params(reg, -1, SplitMode::Layer, 0);
        // Even behind a pattern that matches everything.
        p.overrides = vec![(".".into(), 0), (pattern.into(), reg.cpu().index())];
        let err = try_load(&fx, p, LoadMode::Auto, false)
            .err()
            .unwrap_or_else(|| panic!("{pattern} loaded"));
        let text = err.to_string();
        assert!(
            text.contains("invalid tensor_buft_overrides pattern") && text.contains(pattern),
            "{text}"
        );
    }
    check_released(reg, "invalid pattern");
}

// ---------------------------------------------------------------------------------------------
// 6. Split mode ROW: slices rounded to the block size, covering every row once; the MoE
// family on one partition; 1-D tensors never split.

/// Slices are contiguous, in device order, and cover 0..len exactly once.
fn assert_cover(rows: &[(usize, u64, u64)], len: u64, what: &str) {
    let mut next = 0;
    for &(_, first, count) in rows {
        assert_eq!(first, next, "{what}: {rows:?}");
        assert!(count > 0, "{what}: empty slice {rows:?}");
        next += count;
    }
    assert_eq!(next, len, "{what}: {rows:?}");
}

fn check_row_invariants(model: &Model, fx: &Fixture, what: &str) {
    for t in &fx.tensors {
        let i = info(model, &t.name);
        if i.buffer == BufferKind::RowSplit {
            let dim = split_dim(&t.name, t.ne).unwrap();
            let len = if dim == 1 { t.ne[1] } else { t.ne[0] } as u64;
            assert_cover(&i.rows, len, &format!("{what}: {}", t.name));
        } else if t.ne[1] == 1 {
            assert!(i.rows.is_empty());
            assert_ne!(
                i.buffer,
                BufferKind::RowSplit,
                "{what}: 1-D {} split",
                t.name
            );
        }
    }
}

#[test]
fn row_split_rounds_to_32_for_q4_0_and_q8_0() {
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        // 96 x 96 attention, 160-wide FFN, KV width 48.
        let fx = build(&format!("row-{}", ty.name()), &opts(2, 96, 160), |n, t| {
            if n.ends_with("_norm.weight") {
                t
            } else {
                ty
            }
        });
        for caps in [vec![GIB, GIB], vec![GIB, GIB, GIB]] {
            let reg = registry(&caps);
            let devs: Vec<usize> = (0..caps.len()).collect();
            for mode in MODES {
                let what = format!("{} on {} VGPUs ({mode:?})", ty.name(), caps.len());
                let model = load_checked(&fx, params(reg, -1, SplitMode::Row, 0), mode, &what);
                let rows = |n: &str| info(&model, n).rows;
                if caps.len() == 2 {
                    // 48 → 32; 80 → 64; 24 → 0 (the first slice is empty: VGPU1 takes all).
                    assert_eq!(
                        rows("blk.0.attn_q.weight"),
                        vec![(0, 0, 32), (1, 32, 64)],
                        "{what}"
                    );
                    assert_eq!(
                        rows("blk.1.ffn_gate.weight"),
                        vec![(0, 0, 64), (1, 64, 96)],
                        "{what}"
                    );
                    assert_eq!(rows("blk.0.attn_k.weight"), vec![(1, 0, 48)], "{what}");
                    assert_eq!(info(&model, "blk.0.attn_k.weight").device, 1);
                } else {
                    // 96/3 → 32, 64; 160/3 → 53 → 32, 106 → 96.
                    assert_eq!(
                        rows("blk.0.attn_q.weight"),
                        vec![(0, 0, 32), (1, 32, 32), (2, 64, 32)],
                        "{what}"
                    );
                    assert_eq!(
                        rows("blk.0.ffn_up.weight"),
                        vec![(0, 0, 32), (1, 32, 64), (2, 96, 64)],
                        "{what}"
                    );
                    assert_eq!(
                        rows("blk.1.ffn_down.weight"),
                        vec![(0, 0, 32), (1, 32, 32), (2, 64, 32)],
                        "{what}"
                    );
                }
                // Norms and the output layer are not split.
                assert_eq!(
                    info(&model, "blk.0.attn_norm.weight").buffer,
                    BufferKind::Device
                );
                assert_eq!(info(&model, "output.weight").buffer, BufferKind::Device);
                assert_eq!(
                    info(&model, "output_norm.weight").buffer,
                    BufferKind::Device
                );
                let want = expected(2, -1, SplitMode::Row, 0, None, &devs, &caps).unwrap();
                check_placement(&model, &fx, &want, SplitMode::Row, mode, &what);
                check_row_invariants(&model, &fx, &what);
                check_accounting(&model, &fx, reg, &what);
                check_json(&model, &fx, reg);
                drop(model);
                check_released(reg, &what);
            }
        }
    }
}

#[test]
fn row_split_rounds_to_256_for_q4_k() {
    // Q4_K with arbitrary bytes: 512-wide attention (KV 256), 768-wide FFN.
    let fx = build("row-q4k", &opts(2, 512, 768), |n, t| {
        if n.ends_with("_norm.weight") {
            t
        } else {
            GgmlType::Q4_K
        }
    });
    assert_eq!(fx.tensor("blk.0.attn_q.weight").ggml_type, GgmlType::Q4_K);
    for caps in [vec![GIB, GIB], vec![GIB, GIB, GIB]] {
        let reg = registry(&caps);
        for mode in MODES {
            let what = format!("q4_K on {} VGPUs ({mode:?})", caps.len());
            let model = load_checked(&fx, params(reg, -1, SplitMode::Row, 0), mode, &what);
            let rows = |n: &str| info(&model, n).rows;
            if caps.len() == 2 {
                assert_eq!(
                    rows("blk.0.attn_q.weight"),
                    vec![(0, 0, 256), (1, 256, 256)],
                    "{what}"
                );
                // 384 → 256.
                assert_eq!(
                    rows("blk.0.ffn_gate.weight"),
                    vec![(0, 0, 256), (1, 256, 512)],
                    "{what}"
                );
                // 128 → 0: one slice on VGPU1.
                assert_eq!(rows("blk.1.attn_v.weight"), vec![(1, 0, 256)], "{what}");
            } else {
                // 170 → 0, 341 → 256: VGPU0 gets nothing.
                assert_eq!(
                    rows("blk.0.attn_q.weight"),
                    vec![(1, 0, 256), (2, 256, 256)],
                    "{what}"
                );
                assert_eq!(info(&model, "blk.0.attn_q.weight").device, 1);
                assert_eq!(
                    rows("blk.1.ffn_up.weight"),
                    vec![(0, 0, 256), (1, 256, 256), (2, 512, 256)],
                    "{what}"
                );
            }
            check_row_invariants(&model, &fx, &what);
            check_accounting(&model, &fx, reg, &what);
            check_json(&model, &fx, reg);
            drop(model);
            check_released(reg, &what);
        }
    }
}

#[test]
fn row_split_moe_family_shares_one_partition() {
    // gate experts Q4_0, up experts Q8_0, down experts Q4_K: the family's granularity is
    // lcm(32, 32, 256) = 256, so the 768-wide expert FFN splits 256 | 512 on two equal GPUs
    // (Q4_0 alone would allow 384).
    let mixed = build("moe-mixed", &moe_opts(2, 64, 768), |n, t| {
        if n.contains("ffn_gate_exps") {
            GgmlType::Q4_0
        } else if n.contains("ffn_up_exps") {
            GgmlType::Q8_0
        } else if n.contains("ffn_down_exps") {
            GgmlType::Q4_K
        } else {
            t
        }
    });
    let uniform = build("moe-q4_0", &moe_opts(2, 64, 768), |n, t| {
        if n.contains("_exps") {
            GgmlType::Q4_0
        } else {
            t
        }
    });
    let reg = registry(&[GIB, GIB]);
    for (fx, boundary) in [(&mixed, 256u64), (&uniform, 384u64)] {
        for mode in MODES {
            let what = format!("MoE boundary {boundary} ({mode:?})");
            let model = load_checked(fx, params(reg, -1, SplitMode::Row, 0), mode, &what);
            for l in 0..2 {
                let want = vec![(0, 0, boundary), (1, boundary, 768 - boundary)];
                for member in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
                    let name = format!("blk.{l}.{member}.weight");
                    let i = info(&model, &name);
                    assert_eq!(i.buffer, BufferKind::RowSplit, "{what}: {name}");
                    assert_eq!(i.rows, want, "{what}: {name}");
                }
                // down experts [768, 64, 4] are cut along dim 0 (columns), gate/up along rows.
                assert_eq!(
                    info(&model, &format!("blk.{l}.ffn_down_exps.weight")).ne,
                    [768, 64, 4, 1]
                );
                // The router is an ordinary F32 matrix: its 4 rows split 2 | 2.
                assert_eq!(
                    info(&model, &format!("blk.{l}.ffn_gate_inp.weight")).rows,
                    vec![(0, 0, 2), (1, 2, 2)]
                );
                assert_eq!(
                    info(&model, &format!("blk.{l}.ffn_norm.weight")).buffer,
                    BufferKind::Device
                );
            }
            check_row_invariants(&model, fx, &what);
            check_accounting(&model, fx, reg, &what);
            check_json(&model, fx, reg);
            drop(model);
            check_released(reg, &what);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 8. The placement JSON.

/// Parses the placement JSON and checks it against the tensor infos and the registry.
fn check_json(model: &Model, fx: &Fixture, reg: &Registry) {
    let text = model.placement_json();
    let json =
        json::parse(&text).unwrap_or_else(|e| panic!("placement JSON does not parse: {e}\n{text}"));
    let per_device = bytes_per_device(model, fx, reg.len());
    let devices = json.get("devices").unwrap().as_arr().unwrap();
    assert_eq!(devices.len(), reg.len());
    for (i, (d, dev)) in devices.iter().zip(reg.devices()).enumerate() {
        assert_eq!(d.get("index").unwrap().as_u64(), Some(i as u64));
        assert_eq!(d.get("name").unwrap().as_str(), Some(dev.name()));
        assert_eq!(
            d.get("type").unwrap().as_str(),
            Some(if dev.is_gpu() { "GPU" } else { "CPU" })
        );
        let (total, free, used) = (
            d.get("total").unwrap().as_u64().unwrap(),
            d.get("free").unwrap().as_u64().unwrap(),
            d.get("used").unwrap().as_u64().unwrap(),
        );
        assert_eq!(
            used,
            per_device[i],
            "{}: used vs the sum of its tensors' bytes",
            dev.name()
        );
        if dev.is_virtual() {
            assert_eq!(total, dev.memory().total);
            assert_eq!(free + used, total, "{}: free + used", dev.name());
        }
    }
    let tensors = json.get("tensors").unwrap().as_arr().unwrap();
    assert_eq!(tensors.len(), fx.tensors.len());
    for (t, ft) in tensors.iter().zip(&fx.tensors) {
        let i = info(model, &ft.name);
        assert_eq!(t.get("name").unwrap().as_str(), Some(ft.name.as_str()));
        assert_eq!(
            t.get("nbytes").unwrap().as_u64(),
            Some(ft.bytes.len() as u64)
        );
        assert_eq!(t.get("type").unwrap().as_str(), Some(ft.ggml_type.name()));
        let ne: Vec<i64> = t
            .get("ne")
            .unwrap()
            .as_arr()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as i64)
            .collect();
        assert_eq!(ne, ft.ne.to_vec());
        assert_eq!(
            t.get("buffer").unwrap().as_str(),
            Some(i.buffer.name()),
            "{}",
            ft.name
        );
        let device = t.get("device").unwrap();
        if i.device < 0 {
            assert_eq!(device, &json::J::Null);
        } else {
            assert_eq!(
                device.as_str(),
                Some(reg.get(i.device as usize).unwrap().name())
            );
        }
        assert_eq!(
            t.get("fallback_from")
                .map(|f| f.as_str().unwrap().to_string()),
            i.fallback_from
                .map(|f| reg.get(f).unwrap().name().to_string()),
            "{}",
            ft.name
        );
        match t.get("rows") {
            None => assert!(i.rows.is_empty(), "{}", ft.name),
            Some(rows) => {
                let got: Vec<(String, u64, u64)> = rows
                    .as_arr()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        (
                            r.get("device").unwrap().as_str().unwrap().to_string(),
                            r.get("first").unwrap().as_u64().unwrap(),
                            r.get("count").unwrap().as_u64().unwrap(),
                        )
                    })
                    .collect();
                let want: Vec<(String, u64, u64)> = i
                    .rows
                    .iter()
                    .map(|&(d, f, c)| (reg.get(d).unwrap().name().to_string(), f, c))
                    .collect();
                assert_eq!(got, want, "{}", ft.name);
            }
        }
    }
}

#[test]
fn placement_json_parses_and_accounts_every_byte() {
    let fx = dense("json", 4, 32, 64);
    let reg = registry(&[GIB, 2 * GIB]);
    for mode in MODES {
        for (ngl, split_mode) in [
            (-1, SplitMode::Layer),
            (3, SplitMode::Layer),
            (-1, SplitMode::Row),
            (0, SplitMode::None),
        ] {
            let model = load_checked(&fx, params(reg, ngl, split_mode, 0), mode, "json");
            check_json(&model, &fx, reg);
            let json = json::parse(&model.placement_json()).unwrap();
            let cpu_used = json.get("devices").unwrap().as_arr().unwrap()[reg.cpu().index()]
                .get("used")
                .unwrap()
                .as_u64()
                .unwrap();
            let total: u64 = fx.tensors.iter().map(|t| t.bytes.len() as u64).sum();
            let gpu_used: u64 = reg.gpus().map(|d| d.used()).sum();
            assert_eq!(cpu_used + gpu_used, total, "every byte is somewhere, once");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 9. no_alloc with virtual GPUs: a dry run.

#[test]
fn no_alloc_dry_run_reports_planned_devices() {
    let fx = dense("dry", 4, 32, 64);
    let reg = registry(&[GIB, GIB]);
    let cpu = reg.cpu().index();
    for split_mode in [SplitMode::Layer, SplitMode::Row] {
        let model = try_load(&fx, params(reg, 3, split_mode, 0), LoadMode::Auto, true).unwrap();
        let d = model.devices.as_ref().unwrap();
        // The plan is computed: layers 2.. and the output offloaded.
        assert_eq!(
            runs(&d.layers),
            vec![(0, 1, None), (2, 3, Some(0)), (4, 4, Some(1))]
        );
        let json = json::parse(&model.placement_json()).unwrap();
        let json_tensors = json.get("tensors").unwrap().as_arr().unwrap();
        for (t, jt) in fx.tensors.iter().zip(json_tensors) {
            let tensor = model.tensors.get(&t.name).unwrap();
            let layer = layer_index(&t.name, 4).and_then(|l| d.layers[l]);
            let row_split =
                split_mode == SplitMode::Row && t.name.starts_with("blk.") && t.ne[1] > 1;
            let (want_home, want_device) = match layer {
                None => (Home::Cpu, cpu as i32),
                // A planned row split reports no device and no slices.
                Some(_) if row_split => (Home::Rows(1), -1),
                Some(dev) => (Home::Device(dev), dev as i32),
            };
            assert_eq!(tensor.home, want_home, "{}", t.name);
            let i = info(&model, &t.name);
            assert_eq!(
                (i.device, i.buffer),
                (want_device, BufferKind::None),
                "{split_mode:?} {}",
                t.name
            );
            assert!(i.rows.is_empty());
            assert_eq!(i.fallback_from, None);
            let mut buf = vec![0u8; t.bytes.len()];
            assert!(tensor.read().read_into(&mut buf).is_err());
            // The JSON agrees: the planned device's name (null for a row split), buffer "none".
            assert_eq!(jt.get("buffer").unwrap().as_str(), Some("none"));
            match want_device {
                -1 => assert_eq!(jt.get("device"), Some(&json::J::Null), "{}", t.name),
                dev => assert_eq!(
                    jt.get("device").unwrap().as_str(),
                    Some(reg.get(dev as usize).unwrap().name()),
                    "{}",
                    t.name
                ),
            }
            assert!(jt.get("rows").is_none());
        }
        // Nothing is allocated, and no device reports bytes used.
        assert!(reg.devices().iter().all(|dev| dev.used() == 0));
        for dv in json.get("devices").unwrap().as_arr().unwrap() {
            assert_eq!(dv.get("used").unwrap().as_u64(), Some(0));
        }
        check_json(&model, &fx, reg);
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal JSON parser (serde_json is not a dependency): enough to check the report's
// structure and values; rejects trailing garbage and malformed input.

mod json {
    #[derive(Clone, Debug, PartialEq)]
    pub enum J {
        Null,
        Bool(bool),
        /// The number's text, kept exact.
        Num(String),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    impl J {
        pub fn get(&self, key: &str) -> Option<&J> {
            match self {
                J::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn as_str(&self) -> Option<&str> {
            match self {
                J::Str(s) => Some(s),
                _ => None,
            }
        }
        pub fn as_u64(&self) -> Option<u64> {
            match self {
                J::Num(n) => n.parse().ok(),
                _ => None,
            }
        }
        pub fn as_arr(&self) -> Option<&[J]> {
            match self {
                J::Arr(a) => Some(a),
                _ => None,
            }
        }
    }

    pub fn parse(text: &str) -> Result<J, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing characters at {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            }
        }
        fn peek(&mut self) -> Option<u8> {
            self.ws();
            self.s.get(self.i).copied()
        }
        fn expect(&mut self, c: u8) -> Result<(), String> {
            if self.peek() == Some(c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected '{}' at {}", c as char, self.i))
            }
        }
        fn literal(&mut self, word: &str, v: J) -> Result<J, String> {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                Ok(v)
            } else {
                Err(format!("bad literal at {}", self.i))
            }
        }
        fn value(&mut self) -> Result<J, String> {
            match self.peek().ok_or("unexpected end")? {
                b'{' => {
                    self.i += 1;
                    let mut fields = Vec::new();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                        return Ok(J::Obj(fields));
                    }
                    loop {
                        self.ws();
                        let key = self.string()?;
                        if fields.iter().any(|(k, _): &(String, J)| *k == key) {
                            return Err(format!("duplicate key {key}"));
                        }
                        self.expect(b':')?;
                        fields.push((key, self.value()?));
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(J::Obj(fields));
                            }
                            _ => return Err(format!("expected ',' or '}}' at {}", self.i)),
                        }
                    }
                }
                b'[' => {
                    self.i += 1;
                    let mut items = Vec::new();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        return Ok(J::Arr(items));
                    }
                    loop {
                        items.push(self.value()?);
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(J::Arr(items));
                            }
                            _ => return Err(format!("expected ',' or ']' at {}", self.i)),
                        }
                    }
                }
                b'"' => Ok(J::Str(self.string()?)),
                b't' => self.literal("true", J::Bool(true)),
                b'f' => self.literal("false", J::Bool(false)),
                b'n' => self.literal("null", J::Null),
                b'-' | b'0'..=b'9' => {
                    let start = self.i;
                    self.i += 1;
                    while self.i < self.s.len()
                        && matches!(
                            self.s[self.i],
                            b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'
                        )
                    {
                        self.i += 1;
                    }
                    let n = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                    n.parse::<f64>().map_err(|_| format!("bad number {n}"))?;
                    Ok(J::Num(n.to_string()))
                }
                c => Err(format!("unexpected '{}' at {}", c as char, self.i)),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            if self.s.get(self.i) != Some(&b'"') {
                return Err(format!("expected a string at {}", self.i));
            }
            self.i += 1;
            let mut out = Vec::new();
            loop {
                let c = *self.s.get(self.i).ok_or("unterminated string")?;
                self.i += 1;
                match c {
                    b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                    b'\\' => {
                        let e = *self.s.get(self.i).ok_or("bad escape")?;
                        self.i += 1;
                        match e {
                            b'"' | b'\\' | b'/' => out.push(e),
                            b'n' => out.push(b'\n'),
                            b't' => out.push(b'\t'),
                            b'r' => out.push(b'\r'),
                            b'b' => out.push(8),
                            b'f' => out.push(12),
                            b'u' => {
                                let hex = std::str::from_utf8(
                                    self.s.get(self.i..self.i + 4).ok_or("bad \\u")?,
                                )
                                .map_err(|e| e.to_string())?;
                                let code =
                                    u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                                self.i += 4;
                                let ch = char::from_u32(code).ok_or("bad \\u code")?;
                                out.extend_from_slice(ch.to_string().as_bytes());
                            }
                            _ => return Err(format!("bad escape at {}", self.i)),
                        }
                    }
                    c if c < 0x20 => return Err("control character in string".into()),
                    c => out.push(c),
                }
            }
        }
    }

    #[test]
    fn parser_accepts_json_and_rejects_garbage() {
        let v = parse(r#" {"a":[1,-2.5e3,true,null,"x\"\u0041"],"b":{}} "#).unwrap();
        assert_eq!(
            v.get("a").unwrap().as_arr().unwrap()[4].as_str(),
            Some("x\"A")
        );
        for bad in [
            "{",
            "{\"a\":1,}",
            "[1 2]",
            "{\"a\":1}x",
            "\"\n\"",
            "{\"a\":1,\"a\":2}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
