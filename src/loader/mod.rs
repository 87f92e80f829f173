//! Loading a model from GGUF files: split discovery, metadata, hyperparameters, vocabulary,
//! tensor registry and tensor data in every load mode, with progress and cancellation.

pub mod file;
pub mod validate;

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::gguf::{ArrayValue, GgmlType, Gguf, GgufHeader, GgufValueType, Value};
use crate::model::meta::{FloatWidth, KvOverride, MetaArray, MetaValue, Metadata};
use crate::model::tensors::{
    Tensor, TensorData, TensorLayout, TensorSource, TensorState, TensorStore,
};
use crate::model::{arch, ftype, hparams, split, vocab::Vocab, LoadMode, Model};
use file::SourceFile;

/// Why a load failed. The text names the file, tensor and reason.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    #[error("{0}")]
    Model(String),
    #[error("tensor '{tensor}' in {file}: {reason}")]
    Tensor {
        file: String,
        tensor: String,
        reason: String,
    },
    #[error("cancelled model load")]
    Cancelled,
}

fn file_error(source: &SourceFile, reason: impl std::fmt::Display) -> LoadError {
    LoadError::File {
        file: source.display_name(),
        reason: reason.to_string(),
    }
}

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
            let first = paths
                .first()
                .ok_or_else(|| LoadError::Model("list of splits is empty".into()))?;
            (open_path(first)?, Some(paths))
        }
        ModelSource::File { file, base } => {
            let source = SourceFile::from_file(file, base)
                .map_err(|e| LoadError::Model(format!("<FILE *>: failed to stat: {e}")))?;
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

fn meta_value(value: &Value<'_>) -> MetaValue {
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
    let datas = if options.no_alloc {
        vec![TensorData::Unallocated; infos.len()]
    } else {
        load_data(&sources, &infos, &mut options)?
    };
    for ((name, layout, source), data) in infos.into_iter().zip(datas) {
        model
            .tensors
            .push(Tensor::new(name, source, TensorState { layout, data }))
            .map_err(LoadError::Model)?;
    }
    model.files = sources;
    Ok(model)
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
    Arena(usize, usize),
}

/// Reads (or maps) every tensor's bytes according to the load mode.
fn load_data(
    sources: &[SourceFile],
    infos: &[(String, TensorLayout, TensorSource)],
    options: &mut LoadOptions<'_>,
) -> Result<Vec<TensorData>, LoadError> {
    let total = infos.iter().map(|(_, l, _)| l.nbytes).sum();
    let mode = options.load_mode;
    let check = options.check_tensors;
    let mut progress = Progress {
        callback: &mut options.progress,
        done: 0,
        total,
        dots: 0,
    };

    // One backing store per file: a read-only mapping, or an owned arena mirroring the file.
    let mut maps: Vec<Option<Arc<memmap2::Mmap>>> = Vec::with_capacity(sources.len());
    let mut readers: Vec<Option<reader::ArenaReader>> = Vec::with_capacity(sources.len());
    for s in sources {
        if mode.uses_mmap() {
            let map = file::map_file(&s.file, true)
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
            readers.push(Some(reader::ArenaReader::new(
                s,
                mode == LoadMode::DirectIo,
            )?));
        }
    }

    let mut placed = Vec::with_capacity(infos.len());
    for (name, layout, source) in infos {
        progress.before_tensor(layout.nbytes)?;
        let s = &sources[source.file_index];
        let start = source.offset + s.base;
        let offset = usize::try_from(start)
            .map_err(|_| file_error(s, format!("tensor '{name}' offset out of range")))?;
        let len = layout.nbytes as usize;
        let bytes: &[u8] = match (&maps[source.file_index], &mut readers[source.file_index]) {
            (Some(map), _) => {
                placed.push(Placed::Mapped(source.file_index, offset));
                &map[offset..offset + len]
            }
            (None, Some(reader)) => {
                reader.read_through(s, start + layout.nbytes)?;
                placed.push(Placed::Arena(source.file_index, offset));
                reader.bytes(offset, len)
            }
            (None, None) => unreachable!("every file has a mapping or a reader"),
        };
        if check {
            if let Some(reason) = validate::find_invalid(layout.ggml_type, bytes) {
                return Err(LoadError::Tensor {
                    file: s.display_name(),
                    tensor: name.clone(),
                    reason: format!("tensor has invalid data: {reason}"),
                });
            }
        }
    }
    let mut arenas = Vec::with_capacity(sources.len());
    for (s, r) in sources.iter().zip(readers) {
        arenas.push(match r {
            Some(r) => Some(Arc::new(r.finish(mode.uses_mlock(), s))),
            None => None,
        });
    }
    progress.report(1.0)?;
    Ok(placed
        .into_iter()
        .map(|p| match p {
            Placed::Mapped(f, offset) => TensorData::Mapped {
                map: maps[f].clone().expect("mapped file"),
                offset,
            },
            Placed::Arena(f, offset) => TensorData::Host {
                arena: arenas[f].clone().expect("arena file"),
                offset,
            },
        })
        .collect())
}

mod reader;
