//! Model quantization (`llama_model_quantize`): reads a GGUF model tensor by tensor, chooses
//! each tensor's type with upstream's rules (`policy`), converts it with the weight
//! quantizers (`kernels::quant`) and writes a GGUF file byte-identical to what upstream's
//! `llama-quantize` writes for the same input and parameters.
//!
//! Differences from upstream, on purpose: every failure is an error (upstream aborts on some),
//! and no partial output is left behind (the file is written under a temporary name and
//! renamed when complete; a split output's files are renamed only once all are written).
//! A split model is read as upstream's loader reads it (the first file names the others).
//! NVFP4 is written where upstream's `llama-quantize` writes it: as a per-tensor override
//! (`--tensor-type ...=nvfp4`); as a file type (39) upstream's tool refuses it ("invalid ftype").

#![forbid(unsafe_code)]

pub mod imatrix;
pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::gguf::{GgmlType, GgufWriter, MetaValue};
use crate::kernels::quant as rowq;
use crate::model::hparams::HParams;
use crate::model::meta::{KvOverride, Metadata, OverrideValue};
use policy::{Choice, ModelFacts, State, TensorView};

/// `GGML_QNT_VERSION`.
const QNT_VERSION: u32 = 2;
/// `LLAMA_QUANT_MAX_BUF_SIZE`.
pub const DEFAULT_MAX_BUF_SIZE: usize = 8 << 30;

/// `llama_model_quantize_params`, as safe Rust.
#[derive(Clone, Debug, Default)]
pub struct QuantizeParams {
    /// Threads; 0 or less: all cores.
    pub nthread: i32,
    pub ftype: i32,
    pub output_tensor_type: Option<GgmlType>,
    pub token_embedding_type: Option<GgmlType>,
    pub allow_requantize: bool,
    pub quantize_output_tensor: bool,
    pub only_copy: bool,
    pub pure: bool,
    pub keep_split: bool,
    pub dry_run: bool,
    /// Importance matrix entries by tensor name (`ne[0] * ne[2]` values each).
    pub imatrix: Option<HashMap<String, Vec<f32>>>,
    pub kv_overrides: Vec<KvOverride>,
    /// `--tensor-type` overrides: a regex searched in the tensor name, and the type.
    pub tensor_types: Vec<(String, GgmlType)>,
    /// Layers to remove (ascending, as upstream assumes).
    pub prune_layers: Vec<i32>,
    /// Most bytes of rows held at once; 0 = 8 GiB.
    pub max_buf_size: usize,
}

impl QuantizeParams {
    /// `llama_model_quantize_default_params`.
    pub fn upstream_default() -> QuantizeParams {
        QuantizeParams {
            ftype: policy::ftype::Q8_0,
            quantize_output_tensor: true,
            max_buf_size: DEFAULT_MAX_BUF_SIZE,
            ..QuantizeParams::default()
        }
    }
}

/// What a quantization did: sizes and the chosen type of every tensor written.
#[derive(Clone, Debug, Default)]
pub struct QuantizeReport {
    pub size_org: u64,
    pub size_new: u64,
    /// (output name, type) in file order.
    pub tensors: Vec<(String, GgmlType)>,
    pub n_fallback: i32,
    pub outputs: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {message}")]
    Input { path: String, message: String },
    #[error("cannot write {path}: {source}")]
    Output { path: String, source: io::Error },
}

fn invalid(msg: impl Into<String>) -> QuantizeError {
    QuantizeError::Invalid(msg.into())
}

/// The tensor name with the first `blk.N.` renumbered (upstream's `remap_layer`); empty when
/// the layer is pruned.
fn remap_layer(
    name: &str,
    prune: &[i32],
    mapped: &mut BTreeMap<i32, String>,
    next_id: &mut i32,
) -> String {
    if prune.is_empty() {
        return name.to_owned();
    }
    let Some((start, end, blk)) = find_blk(name) else {
        return name.to_owned();
    };
    if !mapped.contains_key(&blk) {
        let value = if prune.contains(&blk) {
            String::new()
        } else if blk < prune[0] {
            *next_id = blk + 1;
            blk.to_string()
        } else {
            let v = next_id.to_string();
            *next_id += 1;
            v
        };
        mapped.insert(blk, value);
    }
    let m = &mapped[&blk];
    if m.is_empty() {
        String::new()
    } else {
        format!("{}{}{}", &name[..start], m, &name[end..])
    }
}

/// The first match of `blk\.(\d+)\.`: the digits' byte range and value.
fn find_blk(name: &str) -> Option<(usize, usize, i32)> {
    let bytes = name.as_bytes();
    let mut from = 0;
    while let Some(i) = name[from..].find("blk.") {
        let start = from + i + 4;
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        if end > start && bytes.get(end) == Some(&b'.') {
            let v = name[start..end]
                .parse::<i64>()
                .unwrap_or(i64::MAX)
                .min(i32::MAX as i64) as i32;
            return Some((start, end, v));
        }
        from += i + 1;
    }
    None
}

/// `remap_imatrix`: the original layer number of a remapped name.
fn remap_imatrix(name: &str, mapped: &BTreeMap<i32, String>) -> Result<String, QuantizeError> {
    if mapped.is_empty() {
        return Ok(name.to_owned());
    }
    let Some((start, end, _)) = find_blk(name) else {
        return Ok(name.to_owned());
    };
    let blk = &name[start..end];
    for (orig, new) in mapped {
        if new == blk {
            return Ok(format!("{}{}{}", &name[..start], orig, &name[end..]));
        }
    }
    Err(invalid(format!("imatrix mapping error for {name}")))
}

/// `ggml_n_dims`: trailing 1s do not count, at least one dimension.
fn n_dims(ne: &[i64; 4]) -> usize {
    (1..4).rev().find(|&i| ne[i] != 1).map_or(1, |i| i + 1)
}

struct Planned {
    /// The input file (split) holding the tensor.
    file: usize,
    /// Index in that file's tensor table.
    input: usize,
    name: String,
    ne: [i64; 4],
    cur: GgmlType,
    target: GgmlType,
    imatrix_name: String,
    requires_imatrix: bool,
}

fn to_meta_value(v: &OverrideValue) -> MetaValue {
    match v {
        OverrideValue::Float(f) => MetaValue::F32(*f as f32),
        OverrideValue::Int(i) => MetaValue::U32(i.unsigned_abs() as u32),
        OverrideValue::Bool(b) => MetaValue::Bool(*b),
        OverrideValue::Str(s) => MetaValue::Str(s.clone().into_bytes()),
    }
}

fn facts_of(meta: &Metadata, arch: &str) -> Result<ModelFacts, String> {
    let hp = HParams::load(meta, arch)?;
    let n_head = hp.n_head0();
    let n_head_kv = hp.n_head_kv0();
    let n_gqa = if n_head_kv == 0 {
        0
    } else {
        n_head / n_head_kv
    };
    let n_layer = hp.n_layer();
    let is_70b = match arch {
        "llama" => n_layer == 80 && n_head != n_head_kv,
        "qwen2" | "deci" | "olmo" => n_layer == 80,
        "jais2" => n_layer == 68,
        _ => false,
    };
    Ok(ModelFacts {
        arch: arch.to_owned(),
        n_expert: hp.n_expert,
        n_gqa,
        n_layer_all: hp.n_layer_all,
        is_70b,
    })
}

fn threads(n: i32) -> usize {
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Converts one slab of rows from the input type to f32 (`llama_tensor_dequantize_impl`).
fn to_f32(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    if ty == GgmlType::F32 {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        }
    } else {
        crate::kernels::cpu::dequantize_row(ty, src, dst);
    }
}

/// Quantizes `nrows` rows (starting at global row `first_row`) on `nthread` threads; each
/// row takes the imatrix slice of its expert.
#[allow(clippy::too_many_arguments)]
fn quantize_slab(
    ty: GgmlType,
    src: &[f32],
    dst: &mut [u8],
    n_per_row: usize,
    first_row: usize,
    rows_per_expert: usize,
    imatrix: Option<&[f32]>,
    nthread: usize,
) -> Result<(), String> {
    let row_bytes = dst.len() / (src.len() / n_per_row);
    let nrows = src.len() / n_per_row;
    let per_thread = nrows.div_ceil(nthread.max(1)).max(1);
    let work = |rows_src: &[f32], rows_dst: &mut [u8], first: usize| -> Result<(), String> {
        for (r, (x, y)) in rows_src
            .chunks_exact(n_per_row)
            .zip(rows_dst.chunks_exact_mut(row_bytes))
            .enumerate()
        {
            let expert = (first + r) / rows_per_expert;
            let w = imatrix.map(|m| &m[expert * n_per_row..(expert + 1) * n_per_row]);
            rowq::quantize_rows(ty, x, y, n_per_row, w).map_err(|e| e.to_string())?;
            if !rowq::validate_row_data(ty, y) {
                return Err("quantized data validation failed".into());
            }
        }
        Ok(())
    };
    if nthread <= 1 || nrows <= 1 {
        return work(src, dst, first_row);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = src
            .chunks(per_thread * n_per_row)
            .zip(dst.chunks_mut(per_thread * row_bytes))
            .enumerate()
            .map(|(i, (x, y))| {
                let work = &work;
                s.spawn(move || work(x, y, first_row + i * per_thread))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("quantization thread panicked".into()))
            })
            .collect::<Result<(), String>>()
    })
}

/// Converts one tensor's bytes (`from`, shape `ne`) to `to` as [`quantize_model`] converts
/// a tensor it writes in that type: a tensor already in `to` is copied as it is; otherwise
/// its rows are dequantized to f32 and quantized row by row (each expert's rows with its
/// slice of `imatrix`, `ne[0] * ne[2]` values), every row validated. The sweep's in-memory
/// candidates and hot-swaps of trainer weights use it; the bytes equal the file's.
pub fn quantize_tensor(
    from: GgmlType,
    bytes: &[u8],
    ne: [i64; 4],
    to: GgmlType,
    imatrix: Option<&[f32]>,
    nthread: i32,
) -> Result<Vec<u8>, QuantizeError> {
    let n_per_row = usize::try_from(ne[0])
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid(format!("invalid shape {ne:?}")))?;
    let nbytes_in = from
        .nbytes(ne)
        .ok_or_else(|| invalid(format!("shape {ne:?} cannot be {}", from.name())))?;
    if nbytes_in != bytes.len() as u64 {
        return Err(invalid(format!(
            "{} bytes given, a {} tensor of shape {ne:?} has {nbytes_in}",
            bytes.len(),
            from.name()
        )));
    }
    let nbytes_out = to.nbytes(ne).ok_or_else(|| {
        invalid(format!(
            "shape {ne:?} cannot be stored as {} (row length not a multiple of {})",
            to.name(),
            to.block_size()
        ))
    })?;
    if from == to {
        return Ok(bytes.to_vec());
    }
    let nrows = ne[1..].iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    });
    let nrows = nrows.ok_or_else(|| invalid(format!("invalid shape {ne:?}")))?;
    let rows_per_expert = (ne[1].max(1)) as usize;
    if let Some(m) = imatrix {
        let n_expert = (ne[2].max(1)) as usize;
        if m.len() != n_per_row * n_expert {
            return Err(invalid(format!(
                "the importance matrix has {} values, the tensor needs {} ({} per row x {n_expert} experts)",
                m.len(),
                n_per_row * n_expert,
                n_per_row
            )));
        }
    }
    let row_in = bytes.len() / nrows.max(1);
    let row_out = (nbytes_out as usize) / nrows.max(1);
    let mut out = vec![0u8; nbytes_out as usize];
    // a slab at a time bounds the f32 copy (a row of experts can be gigabytes as f32)
    let rows_per_slab = ((64usize << 20) / (n_per_row * 4)).max(1);
    let mut f32_rows = Vec::new();
    let mut first = 0;
    while first < nrows {
        let n = rows_per_slab.min(nrows - first);
        f32_rows.resize(n * n_per_row, 0.0);
        for (r, x) in f32_rows.chunks_exact_mut(n_per_row).enumerate() {
            let at = (first + r) * row_in;
            to_f32(from, &bytes[at..at + row_in], x);
        }
        quantize_slab(
            to,
            &f32_rows,
            &mut out[first * row_out..(first + n) * row_out],
            n_per_row,
            first,
            rows_per_expert,
            imatrix,
            threads(nthread),
        )
        .map_err(invalid)?;
        first += n;
    }
    Ok(out)
}

/// Quantizes the model at `input` into `output` (upstream's `llama_model_quantize_impl`).
pub fn quantize_model(
    input: &Path,
    output: &Path,
    params: &QuantizeParams,
) -> Result<QuantizeReport, QuantizeError> {
    let inp = input.display().to_string();
    let input_err = |m: String| QuantizeError::Input {
        path: inp.clone(),
        message: m,
    };
    let mut ftype = params.ftype;
    let nthread = threads(params.nthread);
    let default_type = policy::ftype_default_type(ftype)
        .ok_or_else(|| invalid(format!("invalid output file type {ftype}")))?;

    let (files, headers) = open_splits(input).map_err(input_err)?;
    let ggufs = headers
        .iter()
        .map(|h| h.gguf())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| input_err(e.to_string()))?;
    let gguf = &ggufs[0];
    // Every tensor of the set as (file, index), its name once (upstream's weights_map).
    let mut inputs: Vec<(usize, usize)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (f, g) in ggufs.iter().enumerate() {
        for (i, t) in g.tensors().iter().enumerate() {
            if !seen.insert(t.name) {
                return Err(input_err(format!(
                    "invalid model: tensor '{}' is duplicated",
                    t.name
                )));
            }
            inputs.push((f, i));
        }
    }
    if ggufs.len() > 1 {
        let expected = match gguf.get("split.tensors.count").map(MetaValue::from_value) {
            Some(MetaValue::I32(n)) => i64::from(n),
            Some(MetaValue::U32(n)) => i64::from(n),
            Some(MetaValue::U16(n)) => i64::from(n),
            Some(_) => return Err(input_err("split.tensors.count is not an integer".into())),
            None => {
                return Err(input_err(
                    "key not found in model: split.tensors.count".into(),
                ))
            }
        };
        if expected != inputs.len() as i64 {
            return Err(input_err(format!(
                "corrupted model: {expected} tensors expected but {} found",
                inputs.len()
            )));
        }
    }
    let tensor_of = |f: usize, i: usize| &ggufs[f].tensors()[i];
    let entries = gguf
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key).into_owned(),
                crate::loader::meta_value(&kv.value),
            )
        })
        .collect();
    let meta = Metadata::new(entries, params.kv_overrides.clone());
    let arch = meta.get_str("general.architecture").ok_or_else(|| {
        input_err("unknown model architecture (general.architecture missing)".into())
    })?;
    let facts = facts_of(&meta, &arch).map_err(input_err)?;

    if params.only_copy {
        ftype = meta
            .get_int("general.file_type")
            .map_or(policy::ftype::ALL_F32, |v| v as i32);
    }

    if let Some(im) = &params.imatrix {
        crate::log_info!(
            "llama_model_quantize_impl: have importance matrix data with {} entries",
            im.len()
        );
        for values in im.values() {
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(invalid(format!("imatrix contains non-finite value {bad}")));
            }
        }
    }

    let overrides = params
        .tensor_types
        .iter()
        .map(|(p, t)| {
            regex::Regex::new(p)
                .map(|r| (r, *t))
                .map_err(|e| invalid(format!("invalid tensor type pattern '{p}': {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    // Metadata: the input's pairs, then the version and file type, minus split keys, plus
    // the overrides.
    let mut out_meta = GgufWriter::new();
    for kv in gguf.kvs() {
        out_meta.set(
            &String::from_utf8_lossy(kv.key),
            MetaValue::from_value(&kv.value),
        );
    }
    out_meta.set("general.quantization_version", QNT_VERSION);
    out_meta.set("general.file_type", ftype as u32);
    for key in ["split.no", "split.count", "split.tensors.count"] {
        out_meta.remove(key);
    }
    for o in &params.kv_overrides {
        out_meta.set(&o.key, to_meta_value(&o.value));
    }

    // Tensors in upstream's weights_map order: by leading layer (-1 for none), then name.
    let mut order = inputs;
    let key = |&(f, i): &(usize, usize)| {
        let name = tensor_of(f, i).name;
        (policy::leading_layer(name).unwrap_or(-1), name.as_bytes())
    };
    order.sort_by(|a, b| key(a).cmp(&key(b)));
    if params.keep_split {
        // keep_split sorts by (split, offset): the input's data order.
        order.sort_by_key(|&(f, i)| (f, tensor_of(f, i).offset));
    }

    let mut mapped = BTreeMap::new();
    let mut next_id = 0i32;
    let mut planned = Vec::new();
    for (f, i) in order {
        let t = tensor_of(f, i);
        let name = remap_layer(t.name, &params.prune_layers, &mut mapped, &mut next_id);
        if name.is_empty() {
            crate::log_debug!("llama_model_quantize_impl: pruning tensor {}", t.name);
            continue;
        }
        let mut ne = [1i64; 4];
        ne[..t.shape().len()].copy_from_slice(t.shape());
        planned.push(Planned {
            file: f,
            input: i,
            name,
            ne,
            cur: t.ggml_type,
            target: t.ggml_type,
            imatrix_name: String::new(),
            requires_imatrix: false,
        });
    }
    if !params.prune_layers.is_empty() {
        out_meta.set(&format!("{arch}.block_count"), next_id as u32);
    }

    let choice = Choice {
        ftype,
        output_tensor_type: params.output_tensor_type,
        token_embedding_type: params.token_embedding_type,
        quantize_output_tensor: params.quantize_output_tensor,
        only_copy: params.only_copy,
        pure: params.pure,
        overrides: &overrides,
    };
    let mut qs = State::new(
        planned.iter().map(|p| p.name.as_str()),
        &facts,
        params.imatrix.is_some(),
    );
    let mut will_require_imatrix = false;
    for p in planned.iter_mut() {
        let view = TensorView {
            name: &p.name,
            ty: p.cur,
            ne: p.ne,
            n_dims: n_dims(&p.ne),
        };
        let allows = policy::allows_quantization(&choice, &arch, &p.name, view.n_dims);
        p.target = if allows {
            policy::tensor_type(&mut qs, &facts, &choice, &view, default_type).map_err(invalid)?
        } else {
            p.cur
        };
        p.requires_imatrix = policy::tensor_requires_imatrix(&p.name, p.target, ftype);
        if params.imatrix.is_some() {
            p.imatrix_name = remap_imatrix(&p.name, &mapped)?;
        } else if allows && p.requires_imatrix {
            if params.dry_run {
                will_require_imatrix = true;
            } else {
                crate::log_error!(
                    "ERROR: this quantization requires an importance matrix! offending tensor: {}, target type: {}",
                    p.name,
                    p.target.name()
                );
                return Err(invalid("this quantization requires an imatrix!"));
            }
        }
        if p.target != p.cur && !params.dry_run {
            if !rowq::supports(p.target) {
                return Err(invalid(format!(
                    "quantizing to type {} (tensor {}) is not supported by llama-hotswap yet",
                    p.target.name(),
                    p.name
                )));
            }
            if p.cur != GgmlType::F32 && !crate::kernels::cpu::supports(p.cur) {
                return Err(invalid(format!(
                    "type {} unsupported for integer quantization: no dequantization available",
                    p.cur.name()
                )));
            }
        }
    }

    let mut report = QuantizeReport {
        n_fallback: qs.n_fallback,
        ..QuantizeReport::default()
    };
    let n_elements: u64 = planned
        .iter()
        .map(|p| p.ne.iter().product::<i64>() as u64)
        .sum();

    if params.dry_run {
        for p in &planned {
            let size = tensor_of(p.file, p.input).nbytes;
            let new_size = if p.cur != p.target {
                let rows = (p.ne[1] * p.ne[2] * p.ne[3]) as u64;
                if p.requires_imatrix {
                    will_require_imatrix = true;
                }
                rows * p.target.row_size(p.ne[0]).unwrap_or(0)
            } else {
                size
            };
            report.size_org += size;
            report.size_new += new_size;
            report.tensors.push((p.name.clone(), p.target));
        }
        log_totals(&report, n_elements);
        if params.imatrix.is_none() && will_require_imatrix {
            crate::log_warn!("llama_model_quantize_impl: WARNING: dry run completed successfully, but actually completing this quantization will require an imatrix!");
        }
        return Ok(report);
    }

    // keep_split writes one file per input split (upstream: as many as the highest split
    // index among the kept tensors, plus one); the first holds the metadata.
    let n_out = if params.keep_split {
        planned.iter().map(|p| p.file + 1).max().unwrap_or(1)
    } else {
        1
    };
    let out_of = |p: &Planned| if params.keep_split { p.file } else { 0 };
    let mut writers: Vec<GgufWriter> = (0..n_out).map(|_| GgufWriter::new()).collect();
    writers[0] = out_meta;
    if n_out > 1 {
        for (i, w) in writers.iter_mut().enumerate() {
            w.set("split.no", i as u16);
            w.set("split.count", n_out as u16);
            w.set("split.tensors.count", planned.len() as i32);
        }
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n_out];
    for (k, p) in planned.iter().enumerate() {
        let dims = &p.ne[..n_dims(&p.ne)];
        writers[out_of(p)]
            .add_tensor_deferred(&p.name, dims, p.target)
            .map_err(|e| invalid(e.to_string()))?;
        members[out_of(p)].push(k);
    }
    if let Some(empty) = members.iter().position(|m| m.is_empty()) {
        // upstream would dereference a missing context here
        return Err(invalid(format!(
            "keep_split: input split {empty} keeps no tensor (all pruned); cannot write its file"
        )));
    }

    let out_paths: Vec<PathBuf> = (0..n_out)
        .map(|i| {
            if params.keep_split {
                PathBuf::from(crate::gguf::split_path(
                    &output.to_string_lossy(),
                    i as u32,
                    n_out as u32,
                ))
            } else {
                output.to_path_buf()
            }
        })
        .collect();
    let tmp_paths: Vec<PathBuf> = out_paths
        .iter()
        .map(|p| {
            let mut s = p.clone().into_os_string();
            s.push(".quantize-partial");
            PathBuf::from(s)
        })
        .collect();
    let remove_tmps = || {
        for t in &tmp_paths {
            let _ = std::fs::remove_file(t);
        }
    };

    let max_buf = if params.max_buf_size == 0 {
        DEFAULT_MAX_BUF_SIZE
    } else {
        params.max_buf_size
    };
    let n_tensors = planned.len();
    for (o, writer) in writers.iter().enumerate() {
        let mut failure: Option<QuantizeError> = None;
        let result = writer.write_to_with(&tmp_paths[o], |index, _pending, out| {
            let k = members[o][index];
            let p = &planned[k];
            let t = tensor_of(p.file, p.input);
            let abs = ggufs[p.file].data_offset() + t.offset;
            let mut step = || -> Result<u64, QuantizeError> {
                write_tensor(
                    &files[p.file],
                    abs,
                    t.nbytes,
                    p,
                    params,
                    nthread,
                    max_buf,
                    k,
                    n_tensors,
                    out,
                    &inp,
                )
            };
            match step() {
                Ok(size) => {
                    report.size_org += t.nbytes;
                    report.size_new += size;
                    report.tensors.push((p.name.clone(), p.target));
                    Ok(())
                }
                Err(e) => {
                    let msg = e.to_string();
                    failure = Some(e);
                    Err(io::Error::other(msg))
                }
            }
        });
        if let Err(e) = result {
            remove_tmps();
            return Err(failure.unwrap_or(QuantizeError::Output {
                path: out_paths[o].display().to_string(),
                source: io::Error::other(e.to_string()),
            }));
        }
    }
    for (tmp, out_path) in tmp_paths.iter().zip(&out_paths) {
        std::fs::rename(tmp, out_path).map_err(|source| {
            remove_tmps();
            QuantizeError::Output {
                path: out_path.display().to_string(),
                source,
            }
        })?;
    }
    log_totals(&report, n_elements);
    if qs.n_fallback > 0 {
        crate::log_warn!(
            "llama_model_quantize_impl: WARNING: {} of {} tensor(s) required fallback quantization",
            qs.n_fallback,
            n_tensors
        );
    }
    report.outputs.extend(out_paths);
    Ok(report)
}

/// Opens `input` and, when it is the first file of a split set, every other split (named as
/// upstream's `llama_split_path` names them), as upstream's loader does: the first file must
/// be split 0, each other file must say its own index.
fn open_splits(input: &Path) -> Result<(Vec<File>, Vec<crate::gguf::GgufHeader>), String> {
    let open = |path: &Path| -> Result<(File, crate::gguf::GgufHeader), String> {
        let file =
            File::open(path).map_err(|e| format!("{}: failed to open: {e}", path.display()))?;
        let header =
            crate::gguf::read_header(&file).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((file, header))
    };
    let u16_key = |h: &crate::gguf::GgufHeader, key: &str| -> Result<Option<u16>, String> {
        let g = h.gguf().map_err(|e| e.to_string())?;
        match g.get(key).map(MetaValue::from_value) {
            None => Ok(None),
            Some(MetaValue::U16(n)) => Ok(Some(n)),
            Some(_) => Err(format!("{key} is not a u16")),
        }
    };
    let (first, header) = open(input)?;
    let n_split = u16_key(&header, "split.count")?.unwrap_or(0);
    let mut files = vec![first];
    let mut headers = vec![header];
    if n_split <= 1 {
        return Ok((files, headers));
    }
    let idx = u16_key(&headers[0], "split.no")?
        .ok_or_else(|| "key not found in model: split.no".to_string())?;
    if idx != 0 {
        return Err(format!(
            "illegal split file idx: {idx} (file: {}), model must be loaded with the first split",
            input.display()
        ));
    }
    let text = input.to_string_lossy();
    let prefix = crate::model::split::split_prefix(&text, 0, i32::from(n_split))
        .ok_or_else(|| format!("invalid split file name: {text}"))?;
    for i in 1..n_split {
        let path = PathBuf::from(crate::model::split::split_path(
            prefix,
            i32::from(i),
            i32::from(n_split),
        ));
        let (file, header) = open(&path)?;
        match u16_key(&header, "split.no")? {
            Some(n) if n == i => {}
            Some(n) => {
                return Err(format!(
                    "invalid split file idx: {n} (file: {}), expected {i}",
                    path.display()
                ))
            }
            None => {
                return Err(format!(
                    "missing key split.no in GGUF split {}",
                    path.display()
                ))
            }
        }
        files.push(file);
        headers.push(header);
    }
    crate::log_info!("llama_model_quantize_impl: read a model split in {n_split} files");
    Ok((files, headers))
}

fn log_totals(report: &QuantizeReport, n_elements: u64) {
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    let bpw = |b: u64| b as f64 * 8.0 / n_elements.max(1) as f64;
    crate::log_info!(
        "llama_model_quantize_impl: model size  = {:8.2} MiB ({:.2} BPW)",
        mib(report.size_org),
        bpw(report.size_org)
    );
    crate::log_info!(
        "llama_model_quantize_impl: quant size  = {:8.2} MiB ({:.2} BPW)",
        mib(report.size_new),
        bpw(report.size_new)
    );
}

/// Writes one tensor: copied when its type stays, else converted slab by slab. Returns the
/// bytes written.
#[allow(clippy::too_many_arguments)]
fn write_tensor(
    file: &File,
    abs: u64,
    nbytes: u64,
    p: &Planned,
    params: &QuantizeParams,
    nthread: usize,
    max_buf: usize,
    index: usize,
    n_tensors: usize,
    out: &mut dyn Write,
    inp: &str,
) -> Result<u64, QuantizeError> {
    let read_err = |e: io::Error| QuantizeError::Input {
        path: inp.to_owned(),
        message: format!("reading tensor '{}': {e}", p.name),
    };
    let write_err = |e: io::Error| QuantizeError::Output {
        path: "output".into(),
        source: e,
    };
    let shape = p.ne[..n_dims(&p.ne).max(1)]
        .iter()
        .map(|n| format!("{n:5}"))
        .collect::<Vec<_>>()
        .join(", ");
    let head = format!(
        "[{:4}/{:4}] {:<36} - [{shape}], type = {:>6}, ",
        index + 1,
        n_tensors,
        p.name,
        p.cur.name()
    );
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    if p.cur == p.target {
        crate::log_info!("{head}size = {:8.3} MiB", mib(nbytes));
        let row = p.cur.row_size(p.ne[0]).unwrap_or(nbytes).max(1);
        let slab = row.max((max_buf as u64 / row) * row).min(1 << 30);
        let mut buf = vec![0u8; slab.min(nbytes) as usize];
        let mut offs = 0u64;
        while offs < nbytes {
            let n = slab.min(nbytes - offs) as usize;
            file.read_exact_at(&mut buf[..n], abs + offs)
                .map_err(read_err)?;
            out.write_all(&buf[..n]).map_err(write_err)?;
            offs += n as u64;
        }
        return Ok(nbytes);
    }

    let mut imatrix: Option<&[f32]> = None;
    if let Some(im) = &params.imatrix {
        match im.get(&p.imatrix_name) {
            None => crate::log_info!(
                "====== llama_model_quantize_impl: did not find weights for {}",
                p.name
            ),
            Some(v) if v.len() as i64 == p.ne[0] * p.ne[2] => imatrix = Some(v),
            Some(v) => {
                crate::log_info!(
                    "====== llama_model_quantize_impl: imatrix size {} is different from tensor size {} for {}",
                    v.len(),
                    p.ne[0] * p.ne[2],
                    p.name
                );
                if !(p.name == "token_embd.weight" || p.name == "per_layer_token_embd.weight") {
                    return Err(invalid(format!(
                        "imatrix size {} is different from tensor size {} for {}",
                        v.len(),
                        p.ne[0] * p.ne[2],
                        p.name
                    )));
                }
            }
        }
    }
    if imatrix.is_none() && p.requires_imatrix {
        return Err(invalid(format!(
            "Missing importance matrix for tensor {} in a very low-bit quantization",
            p.name
        )));
    }
    if p.cur.is_quantized() && !params.allow_requantize {
        return Err(invalid(format!(
            "requantizing from type {} is disabled",
            p.cur.name()
        )));
    }

    let n_per_row = p.ne[0] as usize;
    let rows_per_expert = p.ne[1].max(1) as usize;
    let nrows_total = (p.ne[1] * p.ne[2] * p.ne[3]) as usize;
    let row_src = p.cur.row_size(p.ne[0]).unwrap_or(0) as usize;
    let row_dst = p.target.row_size(p.ne[0]).unwrap_or(0) as usize;
    let bytes_per_row = row_src
        + row_dst
        + if p.cur == GgmlType::F32 {
            0
        } else {
            n_per_row * 4
        };
    let nrows_slab = (max_buf / bytes_per_row.max(1)).clamp(1, nrows_total.max(1));
    let mut src = vec![0u8; nrows_slab * row_src];
    let mut f32s = vec![0.0f32; nrows_slab * n_per_row];
    let mut dst = vec![0u8; nrows_slab * row_dst];
    let mut written = 0u64;
    let mut ir = 0usize;
    while ir < nrows_total {
        let n = nrows_slab.min(nrows_total - ir);
        file.read_exact_at(&mut src[..n * row_src], abs + (ir * row_src) as u64)
            .map_err(read_err)?;
        to_f32(p.cur, &src[..n * row_src], &mut f32s[..n * n_per_row]);
        quantize_slab(
            p.target,
            &f32s[..n * n_per_row],
            &mut dst[..n * row_dst],
            n_per_row,
            ir,
            rows_per_expert,
            imatrix,
            nthread,
        )
        .map_err(invalid)?;
        out.write_all(&dst[..n * row_dst]).map_err(write_err)?;
        written += (n * row_dst) as u64;
        ir += n;
    }
    crate::log_info!(
        "{head}converting to {} .. size = {:8.2} MiB -> {:8.2} MiB",
        p.target.name(),
        mib(nbytes),
        mib(written)
    );
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_remaps_layers_like_upstream() {
        let mut mapped = BTreeMap::new();
        let mut next = 0;
        let prune = [1, 2];
        let names = [
            "blk.0.a",
            "blk.1.a",
            "blk.2.a",
            "blk.3.a",
            "blk.4.a",
            "output.weight",
        ];
        let out: Vec<String> = names
            .iter()
            .map(|n| remap_layer(n, &prune, &mut mapped, &mut next))
            .collect();
        assert_eq!(
            out,
            ["blk.0.a", "", "", "blk.1.a", "blk.2.a", "output.weight"]
        );
        assert_eq!(next, 3);
        assert_eq!(remap_imatrix("blk.1.a", &mapped).unwrap(), "blk.3.a");
    }

    #[test]
    fn n_dims_drops_trailing_ones() {
        assert_eq!(n_dims(&[576, 1, 1, 1]), 1);
        assert_eq!(n_dims(&[576, 49152, 1, 1]), 2);
        assert_eq!(n_dims(&[1, 1, 1, 1]), 1);
        assert_eq!(n_dims(&[8, 4, 2, 1]), 3);
    }
}
