//! Loading a model from GGUF files: split discovery, metadata, hyperparameters, vocabulary,
//! tensor registry and tensor data in every load mode, with progress and cancellation.
#![forbid(unsafe_code)]

mod error;
pub mod file;
pub mod place;
pub use crate::gguf::validate;

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::gguf::{ArrayValue, GgmlType, Gguf, GgufHeader, GgufValueType, Value};
use crate::model::meta::{FloatWidth, KvOverride, MetaArray, MetaValue, Metadata};
use crate::model::tensors::{
    role_of, Tensor, TensorData, TensorLayout, TensorSource, TensorState, TensorStore,
};
use crate::model::{arch, ftype, hparams, split, vocab::Vocab, LoadMode, Model};
use error::file_error;
pub use error::LoadError;
use file::SourceFile;
use place::{
    granularity_for, AllocFailure, Home, ModelDevices, PlacementParams, StoreFromFileError,
};

/// Where the model comes from.
pub enum ModelSource {
    /// One path; split shards are discovered from its name and `split.count`.
    Path(PathBuf),
    /// Explicit shard paths, first shard first.
    Splits(Vec<PathBuf>),
    /// An already-open file (from a host's `FILE *`), GGUF starting at `base`.
    File { file: std::fs::File, base: u64 },
}

/// What the C parameters ask for, validated.
pub struct LoadOptions<'a> {
    pub load_mode: LoadMode,
    pub vocab_only: bool,
    pub no_alloc: bool,
    pub check_tensors: bool,
    pub overrides: Vec<KvOverride>,
    /// Called with progress in [0, 1]; returning false cancels. None: upstream's dots.
    pub progress: Option<&'a mut dyn FnMut(f32) -> bool>,
    /// Devices, layer offload, split mode and buffer-type overrides.
    pub placement: PlacementParams,
    /// Hot-swap on for this model (`LLAMA_HOTSWAP_ENABLED`, read by the caller).
    pub hotswap: bool,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        LoadOptions {
            load_mode: LoadMode::Auto,
            vocab_only: false,
            no_alloc: false,
            check_tensors: false,
            overrides: Vec::new(),
            progress: None,
            placement: PlacementParams::default(),
            hotswap: crate::model::swap::enabled_by_env(),
        }
    }
}

/// One opened GGUF file with its header bytes (read, and validated, when opened).
struct OpenedFile {
    source: SourceFile,
    header: GgufHeader,
}

impl OpenedFile {
    fn open(source: SourceFile) -> Result<OpenedFile, LoadError> {
        let header = file::read_header(&source).map_err(|e| file_error(&source, e))?;
        Ok(OpenedFile { source, header })
    }

    /// The parsed view. Parse once and keep it: `GgufHeader` owns the bytes, so the view
    /// cannot be stored beside them.
    fn gguf(&self) -> Gguf<'_> {
        // These bytes parsed when the file was opened; parsing them again cannot fail.
        self.header.gguf().expect("header parsed when opened")
    }
}

fn open_path(path: &Path) -> Result<OpenedFile, LoadError> {
    let source = SourceFile::open(path).map_err(|e| LoadError::File {
        file: path.display().to_string(),
        reason: format!("failed to open: {e}"),
    })?;
    OpenedFile::open(source)
}

/// `split.count`, `split.no` must be GGUF u16 (upstream's rule).
fn split_u16(gguf: &Gguf<'_>, key: &str) -> Result<Option<u16>, String> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::U16(v)) => Ok(Some(*v)),
        Some(other) => Err(format!(
            "key {key} has wrong type {} but expected type u16",
            other.type_name()
        )),
    }
}

/// Opens the main file and every shard, checking split numbering as upstream does.
fn open_files(source: ModelSource) -> Result<Vec<OpenedFile>, LoadError> {
    let (main, explicit) = match source {
        ModelSource::Path(path) => (open_path(&path)?, None),
        ModelSource::Splits(paths) => {
            let first = paths.first().ok_or(LoadError::NoSplits)?;
            (open_path(first)?, Some(paths))
        }
        ModelSource::File { file, base } => {
            let source = SourceFile::from_file(file, base).map_err(|source| LoadError::Stat {
                file: "<FILE *>".to_string(),
                source,
            })?;
            (OpenedFile::open(source)?, None)
        }
    };
    let gguf = main.gguf();
    let count = split_u16(&gguf, "split.count")
        .map_err(|e| file_error(&main.source, e))?
        .unwrap_or(0);
    if count <= 1 {
        return Ok(vec![main]);
    }
    let no = split_u16(&gguf, "split.no").map_err(|e| file_error(&main.source, e))?;
    if no != Some(0) {
        return Err(file_error(
            &main.source,
            "invalid split file idx: model must be loaded with the first split",
        ));
    }
    let paths = match explicit {
        Some(paths) => paths,
        None => {
            let main_path = main.source.path.clone().ok_or_else(|| {
                file_error(&main.source, "a split model cannot be discovered from a FILE *; use llama_model_load_from_splits")
            })?;
            let text = main_path.to_string_lossy().into_owned();
            let prefix = split::split_prefix(&text, 0, i32::from(count)).ok_or_else(|| {
                file_error(&main.source, format!("invalid split file name: {text}"))
            })?;
            (0..i32::from(count))
                .map(|i| PathBuf::from(split::split_path(prefix, i, i32::from(count))))
                .collect()
        }
    };
    if paths.len() != usize::from(count) {
        return Err(file_error(
            &main.source,
            format!(
                "invalid split count: {} paths given, split.count = {count}",
                paths.len()
            ),
        ));
    }
    let mut files = vec![main];
    for (i, path) in paths.iter().enumerate().skip(1) {
        let shard = open_path(path)?;
        let shard_no =
            split_u16(&shard.gguf(), "split.no").map_err(|e| file_error(&shard.source, e))?;
        if shard_no != Some(i as u16) {
            return Err(file_error(
                &shard.source,
                format!("invalid split file idx: {shard_no:?} (file: {i})"),
            ));
        }
        files.push(shard);
    }
    Ok(files)
}

pub(crate) fn meta_value(value: &Value<'_>) -> MetaValue {
    match value {
        Value::U8(v) => MetaValue::Int((*v).into()),
        Value::I8(v) => MetaValue::Int((*v).into()),
        Value::U16(v) => MetaValue::Int((*v).into()),
        Value::I16(v) => MetaValue::Int((*v).into()),
        Value::U32(v) => MetaValue::Int((*v).into()),
        Value::I32(v) => MetaValue::Int((*v).into()),
        Value::U64(v) => MetaValue::Int((*v).into()),
        Value::I64(v) => MetaValue::Int((*v).into()),
        Value::F32(v) => MetaValue::Float((*v).into(), FloatWidth::F32),
        Value::F64(v) => MetaValue::Float(*v, FloatWidth::F64),
        Value::Bool(v) => MetaValue::Bool(*v),
        Value::Str(bytes) => MetaValue::Str(String::from_utf8_lossy(bytes).into_owned()),
        Value::Array(array) => MetaValue::Array(meta_array(array)),
    }
}

fn meta_array(array: &ArrayValue<'_>) -> MetaArray {
    match array.elem_type() {
        GgufValueType::String => MetaArray::Strs(
            array
                .iter_str()
                .map(|it| {
                    it.map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect()
                })
                .unwrap_or_default(),
        ),
        GgufValueType::F32 | GgufValueType::F64 => {
            MetaArray::Floats(array.iter_f64().map(|it| it.collect()).unwrap_or_default())
        }
        GgufValueType::Bool => MetaArray::Bools(
            array
                .iter_i64()
                .map(|it| it.map(|v| v != 0).collect())
                .unwrap_or_default(),
        ),
        _ => MetaArray::Ints(
            array
                .iter_i64()
                .map(|it| it.map(i128::from).collect())
                .unwrap_or_default(),
        ),
    }
}

/// Upstream's guess of the file type: the type that first reaches the highest count while
/// walking the tensors in name order (upstream iterates a `std::map` keyed by name).
fn guess_ftype(infos: &[(String, TensorLayout, TensorSource)]) -> i32 {
    let mut by_name: Vec<(&str, GgmlType)> = infos
        .iter()
        .map(|(name, l, _)| (name.as_str(), l.ggml_type))
        .collect();
    by_name.sort_unstable_by_key(|&(name, _)| name);
    let mut counts: HashMap<GgmlType, u32> = HashMap::new();
    let (mut most, mut most_count) = (GgmlType::F32, 0);
    for (_, ty) in by_name {
        let count = counts.entry(ty).or_default();
        *count += 1;
        if *count > most_count {
            (most, most_count) = (ty, *count);
        }
    }
    let guessed = match most {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::BF16 => 32,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q8_0 => 7,
        GgmlType::Q2_K => 10,
        GgmlType::Q3_K => 12,
        GgmlType::Q4_K => 15,
        GgmlType::Q5_K => 17,
        GgmlType::Q6_K => 18,
        GgmlType::TQ1_0 => 36,
        GgmlType::TQ2_0 => 37,
        GgmlType::IQ2_XXS => 19,
        GgmlType::IQ2_XS => 20,
        GgmlType::IQ2_S => 28,
        GgmlType::IQ3_XXS => 23,
        GgmlType::IQ1_S => 24,
        GgmlType::IQ1_M => 31,
        GgmlType::IQ4_NL => 25,
        GgmlType::IQ4_XS => 30,
        GgmlType::IQ3_S => 26,
        GgmlType::NVFP4 => 39,
        GgmlType::Q1_0 => 40,
        GgmlType::Q2_0 => 41,
        other => {
            crate::log_warn!("unknown type {}; guessing file type all F32", other.name());
            0
        }
    };
    guessed | ftype::FTYPE_GUESSED
}

/// Every tensor of every file, in file order: name, type and shape, and where its bytes are.
fn tensor_infos(parsed: &[Gguf<'_>]) -> Vec<(String, TensorLayout, TensorSource)> {
    let mut infos = Vec::new();
    for (file_index, gguf) in parsed.iter().enumerate() {
        for t in gguf.tensors() {
            let layout = TensorLayout {
                ggml_type: t.ggml_type,
                ne: t.ne,
                nbytes: t.nbytes,
            };
            let source = TensorSource {
                file_index,
                offset: t.abs_offset(gguf),
            };
            infos.push((t.name.to_string(), layout, source));
        }
    }
    infos
}

/// A split set's first shard must say how many tensors the set holds (GGUF i32), and the
/// shards must hold exactly that many (upstream's "corrupted model" check).
fn check_split_tensor_count(parsed: &[Gguf<'_>], found: usize) -> Result<(), String> {
    if parsed.len() <= 1 {
        return Ok(());
    }
    match parsed[0].get("split.tensors.count") {
        Some(Value::I32(n)) if *n as i64 == found as i64 => Ok(()),
        Some(Value::I32(n)) => Err(format!(
            "corrupted model: {n} tensors expected but {found} found"
        )),
        Some(other) => Err(format!(
            "key split.tensors.count has wrong type {} but expected type i32",
            other.type_name()
        )),
        None => Err("key not found in model: split.tensors.count".to_string()),
    }
}

/// Loads a model. Every failure is returned; nothing is left allocated on error.
pub fn load(source: ModelSource, mut options: LoadOptions<'_>) -> Result<Model, LoadError> {
    let files = open_files(source)?;
    let parsed: Vec<Gguf<'_>> = files.iter().map(OpenedFile::gguf).collect();
    let entries = parsed[0]
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key).into_owned(),
                meta_value(&kv.value),
            )
        })
        .collect();
    let meta = Metadata::new(entries, std::mem::take(&mut options.overrides));
    let arch = meta.get_str("general.architecture").ok_or_else(|| {
        file_error(
            &files[0].source,
            "unknown model architecture: '' (general.architecture missing)",
        )
    })?;
    let infos = tensor_infos(&parsed);
    check_split_tensor_count(&parsed, infos.len()).map_err(|e| file_error(&files[0].source, e))?;
    drop(parsed);

    // Size and parameter count over every tensor of every file, as upstream.
    let size = infos
        .iter()
        .map(|(_, l, _)| l.nbytes)
        .fold(0u64, u64::saturating_add);
    let n_params = infos
        .iter()
        .map(|(_, l, _)| l.ne.iter().map(|&n| n as u64).product::<u64>())
        .fold(0u64, u64::saturating_add);

    let chat_templates = meta
        .listing()
        .iter()
        .filter(|(k, _)| {
            k == "tokenizer.chat_template" || k.starts_with("tokenizer.chat_template.")
        })
        .filter_map(|(k, v)| CString::new(v.as_bytes()).ok().map(|c| (k.clone(), c)))
        .collect();

    let vocab = Vocab::load(&meta).map_err(|e| file_error(&files[0].source, e))?;

    let mut model = Model {
        arch: arch.clone(),
        hparams: Default::default(),
        vocab,
        ftype: 0,
        desc: String::new(),
        size,
        n_params,
        chat_templates,
        cls_labels: Vec::new(),
        tensors: TensorStore::default(),
        files: Vec::new(),
        devices: None,
        generation: Default::default(),
        hotswap: None,
        use_extra_bufts: true,
        unused_tensors_logged: Default::default(),
        meta,
    };
    if options.vocab_only {
        model.files = files.into_iter().map(|f| f.source).collect();
        return Ok(model);
    }

    model.hparams =
        hparams::HParams::load(&model.meta, &arch).map_err(|e| file_error(&files[0].source, e))?;
    model.cls_labels = hparams::classifier_labels(&model.meta, &arch)
        .into_iter()
        .map(|l| CString::new(l.replace('\0', "")).unwrap_or_default())
        .collect();
    model.ftype = match model.meta.get_int("general.file_type") {
        Some(v) => v as i32,
        None => guess_ftype(&infos),
    };
    let h = &model.hparams;
    let label = arch::size_label(
        &arch,
        h.n_layer(),
        h.n_expert,
        model.vocab.tokens.len() as u32,
        h.n_head0(),
        h.n_head_kv0(),
    );
    model.desc = format!(
        "{arch} {label} {}",
        ftype::ftype_name(model.ftype).to_string_lossy()
    );

    let sources: Vec<SourceFile> = files.into_iter().map(|f| f.source).collect();
    let devices = ModelDevices::compute(&options.placement, model.hparams.n_layer_all)?;
    let homes = tensor_homes(&devices, &options.placement, &infos)?;
    log_offload(&devices);
    let loaded = if options.no_alloc {
        infos
            .iter()
            .map(|_| LoadedTensor {
                data: TensorData::Unallocated,
                fallback_from: None,
            })
            .collect()
    } else {
        load_data(&sources, &infos, &homes, &devices, &mut options)?
    };
    for (((name, layout, source), loaded), home) in infos.into_iter().zip(loaded).zip(homes) {
        let mut state = TensorState::new(layout, loaded.data);
        state.load_fallback_from = loaded.fallback_from;
        model
            .tensors
            .push(Tensor::new(name, source, home, state))
            .map_err(|tensor| LoadError::DuplicateTensor { tensor })?;
    }
    if !options.no_alloc {
        log_buffer_sizes(&model.tensors, &devices);
    }
    model.files = sources;
    model.devices = Some(devices);
    if options.hotswap {
        model.hotswap = Some(crate::model::swap::HotSwap::register(
            &model.files,
            &model.tensors,
            options.check_tensors,
        ));
    }
    Ok(model)
}

/// Every tensor's home: the first matching buffer-type override, else its layer's device.
fn tensor_homes(
    devices: &ModelDevices,
    params: &PlacementParams,
    infos: &[(String, TensorLayout, TensorSource)],
) -> Result<Vec<Home>, LoadError> {
    let overrides =
        crate::device::BuftOverrides::new(params.overrides.iter().map(|(p, d)| (p.as_str(), *d)))?;
    let cpu = devices.cpu();
    Ok(infos
        .iter()
        .map(|(name, layout, _)| match overrides.find(name) {
            Some(&d) if d == cpu => Home::Cpu,
            Some(&d) => Home::Device(d),
            None => devices.home(name, role_of(name), layout.ne),
        })
        .collect())
}

/// Upstream's "offloading" lines.
fn log_offload(devices: &ModelDevices) {
    let n_layer = i64::from(devices.n_layer);
    let gpu = |i: usize| devices.layers.get(i).copied().flatten().is_some();
    let repeating = (0..devices.n_layer as usize).filter(|&i| gpu(i)).count();
    if devices.act_gpu_layers > 0 {
        crate::log_info!("load_tensors: offloading {repeating} repeating layers to GPU");
        if gpu(devices.n_layer as usize) {
            crate::log_info!("load_tensors: offloading output layer to GPU");
        }
    }
    let offloaded = (0..=devices.n_layer as usize).filter(|&i| gpu(i)).count();
    crate::log_info!(
        "load_tensors: offloaded {offloaded}/{} layers to GPU",
        n_layer + 1
    );
}

/// Upstream's "<buffer> model buffer size = N MiB" lines, one per buffer kind and device.
fn log_buffer_sizes(tensors: &TensorStore, devices: &ModelDevices) {
    let mut sizes: Vec<(String, u64)> = Vec::new();
    let mut add = |name: String, bytes: u64| match sizes.iter_mut().find(|(n, _)| *n == name) {
        Some((_, total)) => *total += bytes,
        None => sizes.push((name, bytes)),
    };
    let device_name = |i: usize| {
        devices
            .registry
            .get(i)
            .map_or("?", |d| d.name())
            .to_string()
    };
    for t in tensors.iter() {
        let state = t.read();
        match &state.data {
            TensorData::Unallocated => {}
            TensorData::Mapped { .. } => add("CPU_Mapped".into(), state.layout.nbytes),
            TensorData::Host(_) => add("CPU".into(), state.layout.nbytes),
            TensorData::Device(a) => add(device_name(a.device_index()), a.len() as u64),
            TensorData::RowSplit { pieces, .. } => {
                for p in pieces {
                    add(
                        format!("{}_Split", device_name(p.alloc.device_index())),
                        p.alloc.len() as u64,
                    );
                }
            }
        }
    }
    for (name, bytes) in sizes {
        crate::log_info!(
            "load_tensors: {name:>12} model buffer size = {:8.2} MiB",
            bytes as f64 / 1024.0 / 1024.0
        );
    }
}

/// Progress reporting as upstream: before each tensor, then exactly 1.0 at the end; false
/// cancels. Without a callback, upstream's dots (one per percent).
struct Progress<'a, 'b> {
    callback: &'a mut Option<&'b mut dyn FnMut(f32) -> bool>,
    done: u64,
    total: u64,
    dots: u32,
}

impl Progress<'_, '_> {
    fn report(&mut self, fraction: f32) -> Result<(), LoadError> {
        match self.callback.as_mut() {
            Some(cb) => {
                if !cb(fraction) {
                    return Err(LoadError::Cancelled);
                }
            }
            None => {
                let percent = (fraction * 100.0) as u32;
                while self.dots < percent {
                    crate::log::emit(crate::log::Level::Cont, ".");
                    self.dots += 1;
                }
                if fraction >= 1.0 {
                    crate::log::emit(crate::log::Level::Cont, "\n");
                }
            }
        }
        Ok(())
    }

    fn before_tensor(&mut self, nbytes: u64) -> Result<(), LoadError> {
        let fraction = if self.total == 0 {
            0.0
        } else {
            self.done as f32 / self.total as f32
        };
        self.report(fraction)?;
        self.done += nbytes;
        Ok(())
    }
}

/// Where a tensor's bytes were put during loading (turned into `TensorData` at the end, once
/// the arenas are no longer written).
enum Placed {
    Mapped(usize, usize),
    Arena(usize),
    Owned(TensorData),
}

/// One tensor's loaded data and, when its device had no room, the device it was meant for.
pub(crate) struct LoadedTensor {
    pub data: TensorData,
    pub fallback_from: Option<usize>,
}

/// Reads (or maps) every tensor's bytes according to the load mode and puts them on their
/// home devices, falling back to the CPU (with a warning) when a device is full.
fn load_data(
    sources: &[SourceFile],
    infos: &[(String, TensorLayout, TensorSource)],
    homes: &[Home],
    devices: &ModelDevices,
    options: &mut LoadOptions<'_>,
) -> Result<Vec<LoadedTensor>, LoadError> {
    let total = infos.iter().map(|(_, l, _)| l.nbytes).sum();
    let mode = options.load_mode;
    let check = options.check_tensors;
    let mut progress = Progress {
        callback: &mut options.progress,
        done: 0,
        total,
        dots: 0,
    };
    let types: HashMap<&str, GgmlType> = infos
        .iter()
        .map(|(n, l, _)| (n.as_str(), l.ggml_type))
        .collect();
    // One backing store per file: a read-only mapping, or an owned arena mirroring the file
    // (only for files with CPU tensors; device tensors of other files are read directly).
    let mut maps: Vec<Option<Arc<memmap2::Mmap>>> = Vec::with_capacity(sources.len());
    let mut readers: Vec<Option<reader::ArenaReader>> = Vec::with_capacity(sources.len());
    for (fi, s) in sources.iter().enumerate() {
        if mode.uses_mmap() {
            // With several NUMA nodes, upstream neither prefetches nor reads ahead: each page
            // is placed on the node of the thread that first computes with it.
            let numa = crate::device::numa::is_numa();
            let map = file::map_file(&s.file, !numa, numa)
                .map_err(|e| file_error(s, format!("failed to mmap: {e}")))?;
            if mode.uses_mlock() {
                if let Err(e) = map.lock() {
                    crate::log_warn!("{}: failed to mlock the mapping: {e}", s.display_name());
                }
            }
            maps.push(Some(Arc::new(map)));
            readers.push(None);
        } else {
            maps.push(None);
            let has_cpu = infos
                .iter()
                .zip(homes)
                .any(|((_, _, src), h)| src.file_index == fi && *h == Home::Cpu);
            readers.push(if has_cpu {
                Some(reader::ArenaReader::new(s, mode == LoadMode::DirectIo)?)
            } else {
                None
            });
        }
    }

    let mut staging: Vec<u8> = Vec::new();
    let mut placed = Vec::with_capacity(infos.len());
    let mut fallbacks = Vec::with_capacity(infos.len());
    for ((name, layout, source), &home) in infos.iter().zip(homes) {
        progress.before_tensor(layout.nbytes)?;
        let fi = source.file_index;
        let s = &sources[fi];
        let start = source.offset + s.base;
        let offset = usize::try_from(start)
            .map_err(|_| file_error(s, format!("tensor '{name}' offset out of range")))?;
        let len = layout.nbytes as usize;
        let tensor_error = |reason: String| LoadError::Tensor {
            file: s.display_name(),
            tensor: name.clone(),
            reason,
        };
        let check_bytes = |bytes: &[u8]| {
            let invalid = check.then(|| validate::find_invalid(layout.ggml_type, bytes));
            match invalid.flatten() {
                Some(reason) => Err(tensor_error(format!("tensor has invalid data: {reason}"))),
                None => Ok(()),
            }
        };
        let has_arena = readers[fi].is_some();
        // The tensor's bytes in the file's mapping, if it is mapped.
        let mapped: Option<&[u8]> = match &maps[fi] {
            Some(map) => Some(
                map.get(offset..offset + len)
                    .ok_or_else(|| tensor_error("data extends past the end of the file".into()))?,
            ),
            None => None,
        };
        // A tensor for one CUDA device is read from the file straight into the device's
        // page-locked staging buffers: no host copy, and neither a mapping's nor an arena's
        // pages are touched (an arena skips them: the parser has checked that each file's
        // tensors lie back to back in list order, so no later tensor needs a skipped byte).
        // Not with O_DIRECT (the user asked to bypass the page cache), nor where
        // check_tensors needs the bytes and no mapping has them.
        let o_direct = readers[fi].as_ref().is_some_and(|r| r.is_direct());
        let direct_to = match home {
            Home::Device(d) if !o_direct && (mapped.is_some() || !check) => devices
                .registry
                .get(d)
                .is_some_and(|device| device.is_cuda())
                .then_some(d),
            _ => None,
        };
        if let Some(device) = direct_to {
            if let Some(bytes) = mapped {
                check_bytes(bytes)?;
            }
            match devices.store_from_file(device, &s.file, start, len) {
                Ok(data) => {
                    if let Some(reader) = &mut readers[fi] {
                        reader.skip_through(start + len as u64);
                    }
                    placed.push(Placed::Owned(data));
                    fallbacks.push(None);
                    continue;
                }
                Err(StoreFromFileError::Read(e)) => {
                    return Err(tensor_error(format!("read error: {e}")))
                }
                // The path below tries the device again and falls back to the CPU with
                // the warning.
                Err(StoreFromFileError::Alloc(_)) => {}
            }
        }
        // Where this tensor's bytes can be read in host memory.
        let bytes: &[u8] = match (mapped, &mut readers[fi]) {
            (Some(bytes), _) => bytes,
            (None, Some(reader)) => {
                reader.read_through(s, start + layout.nbytes)?;
                reader.bytes(offset, len)
            }
            (None, None) => {
                staging.clear();
                staging.resize(len, 0);
                crate::storage::read_exact_at_parallel(&s.file, &mut staging, start)
                    .map_err(|e| tensor_error(format!("read error: {e}")))?;
                &staging
            }
        };
        check_bytes(bytes)?;
        let cpu_placed = |maps: &[Option<Arc<memmap2::Mmap>>],
                          has_arena: bool,
                          bytes: &[u8]|
         -> Result<Placed, LoadError> {
            if maps[fi].is_some() {
                Ok(Placed::Mapped(fi, offset))
            } else if has_arena {
                Ok(Placed::Arena(fi))
            } else {
                let alloc = devices
                    .registry
                    .cpu()
                    .allocate_copy(bytes)
                    .map_err(|e| tensor_error(e.to_string()))?;
                Ok(Placed::Owned(TensorData::Device(alloc)))
            }
        };
        if home == Home::Cpu {
            placed.push(cpu_placed(&maps, has_arena, bytes)?);
            fallbacks.push(None);
            continue;
        }
        let granularity = granularity_for(name, layout.ggml_type, |n| types.get(n).copied());
        match devices.store(home, layout, granularity, bytes) {
            Ok(data) => {
                placed.push(Placed::Owned(data));
                fallbacks.push(None);
            }
            Err(AllocFailure { device, reason }) => {
                crate::log_warn!(
                    "tensor '{name}' ({} bytes) does not fit on {}: {reason}; falling back to CPU",
                    layout.nbytes,
                    devices.registry.get(device).map_or("?", |d| d.name())
                );
                placed.push(cpu_placed(&maps, has_arena, bytes)?);
                fallbacks.push(Some(device));
            }
        }
    }
    // Cut each arena into its CPU tensors' ranges; the pages of tensors that went to a
    // device are given back.
    let mut keep: Vec<Vec<(usize, usize)>> = vec![Vec::new(); sources.len()];
    let mut release: Vec<Vec<(usize, usize)>> = vec![Vec::new(); sources.len()];
    for ((_, layout, source), p) in infos.iter().zip(&placed) {
        let range = (
            (source.offset + sources[source.file_index].base) as usize,
            layout.nbytes as usize,
        );
        match p {
            Placed::Arena(f) => keep[*f].push(range),
            Placed::Owned(_) if readers[source.file_index].is_some() => {
                release[source.file_index].push(range)
            }
            _ => {}
        }
    }
    let mut ranges: Vec<std::vec::IntoIter<file::HostRange>> = Vec::with_capacity(sources.len());
    for (fi, (s, r)) in sources.iter().zip(readers).enumerate() {
        let cut = match r {
            Some(r) => {
                let arena = file::HostArena::new(r.finish(mode.uses_mlock(), s), mode.uses_mlock());
                file::split_arena(arena, &keep[fi], &release[fi]).map_err(|e| file_error(s, e))?
            }
            None => Vec::new(),
        };
        ranges.push(cut.into_iter());
    }
    progress.report(1.0)?;
    Ok(placed
        .into_iter()
        .zip(fallbacks)
        .map(|(p, fallback_from)| LoadedTensor {
            data: match p {
                Placed::Mapped(f, offset) => TensorData::Mapped {
                    map: maps[f].clone().expect("mapped file"),
                    offset,
                },
                // Ranges come back in the order they were kept: file order.
                Placed::Arena(f) => TensorData::Host(ranges[f].next().expect("a range per tensor")),
                Placed::Owned(data) => data,
            },
            fallback_from,
        })
        .collect())
}

mod reader;
