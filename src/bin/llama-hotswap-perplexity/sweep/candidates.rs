//! Finding candidate tensors: every `*.gguf` under the candidate directories (the
//! GGUF-Tool-Suite layout: one directory per quantization type, one tensor per file, but any
//! file with one or more tensors works), checked against the loaded model. A file or tensor
//! that cannot be used becomes a failed candidate with its reason; the sweep goes on.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use llama::gguf::{read_header_from, GgmlType};
use llama::model::Model;
use llama::storage::file::{open_regular, FileIdentity};

use super::source::Source;

/// Headers larger than this are refused (a candidate file holds a few tensors).
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// One tensor of a candidate: where its bytes are and what they are.
#[derive(Clone, Debug)]
pub struct CandidateTensor {
    pub name: String,
    pub ggml_type: GgmlType,
    pub offset: u64,
    pub nbytes: u64,
}

/// What one sweep round swaps in: one tensor, or every tensor of a file (`--per-file`).
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The file, as shown in rows: its canonical path (see [`find_files`]).
    pub label: String,
    pub path: PathBuf,
    pub tensors: Vec<CandidateTensor>,
    /// Why this candidate cannot be swept (the row is written as failed).
    pub problem: Option<String>,
    /// Shown in the row when the tensor list is unknown (unreadable header).
    pub fallback_name: Option<String>,
    /// The file as it was when the tensor list was read (None: unknown, so a round reads the
    /// header again).
    pub identity: Option<FileIdentity>,
    /// An in-memory candidate (`--quantize`): no file; the round quantizes the base tensor
    /// to `tensors[0].ggml_type` (see [`in_memory`]).
    pub in_memory: bool,
}

impl Candidate {
    /// The row's tensor column: the tensor's name, or the names joined by `+`.
    pub fn tensor_label(&self) -> String {
        if self.tensors.is_empty() {
            return self.fallback_name.clone().unwrap_or_default();
        }
        self.tensors
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join("+")
    }

    /// The row's type column: the type name, or the distinct type names joined by `+`.
    pub fn type_label(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for t in &self.tensors {
            let n = t.ggml_type.name();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names.join("+")
    }

    /// Bytes of the candidate's tensors (the row's bytes column).
    pub fn nbytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.nbytes).sum()
    }

    /// Whether the file is no longer the one the tensor list was read from (replaced,
    /// rewritten, touched, removed), or that is unknown.
    pub fn changed(&self) -> bool {
        !self.in_memory && (self.identity.is_none() || identity_of(&self.path) != self.identity)
    }

    /// The candidate as its file holds it now: the header read again, the candidate with the
    /// same tensor(s) taken from it (its type, offsets and problems are the file's now).
    pub fn refresh(&self, model: &Model, per_file: bool) -> Result<Candidate, String> {
        let want = self.tensor_label();
        from_file(model, &self.path, &self.label, per_file)
            .into_iter()
            .find(|c| per_file || c.tensor_label() == want)
            .ok_or_else(|| format!("it no longer holds '{want}'"))
    }

    /// Reads the candidate's bytes, one buffer per tensor, from the file its tensor list
    /// came from: a file found changed before or after the read is an error (the bytes
    /// would not be the ones the list describes).
    pub fn read_bytes(&self) -> Result<Vec<Vec<u8>>, String> {
        if self.in_memory {
            return Err("an in-memory candidate has no file to read".into());
        }
        let changed = || {
            format!(
                "{}: the file changed while the sweep used it (size, times or inode differ \
                 from when its header was read)",
                self.path.display()
            )
        };
        let file = open_regular(&self.path, 0)
            .map_err(|e| format!("{}: cannot open: {e}", self.path.display()))?;
        let identity = |f: &File| f.metadata().ok().map(|m| FileIdentity::of(&m));
        if self.identity.is_none() || identity(&file) != self.identity {
            return Err(changed());
        }
        self.tensors
            .iter()
            .map(|t| {
                let len = usize::try_from(t.nbytes).map_err(|_| "tensor too large".to_string())?;
                let mut buf = Vec::new();
                buf.try_reserve_exact(len)
                    .map_err(|_| format!("cannot allocate {len} bytes for '{}'", t.name))?;
                buf.resize(len, 0);
                file.read_exact_at(&mut buf, t.offset).map_err(|e| {
                    format!(
                        "{}: reading '{}' ({len} bytes at offset {}): {e}",
                        self.path.display(),
                        t.name,
                        t.offset
                    )
                })?;
                Ok(buf)
            })
            .collect::<Result<Vec<_>, String>>()
            .and_then(|bytes| {
                if identity(&file) == self.identity {
                    Ok(bytes)
                } else {
                    Err(changed())
                }
            })
    }
}

/// Every `*.gguf` file under `dirs` (recursively; a path that is a file is taken as it is),
/// sorted by path within each directory, paired with its label: its canonical path (the
/// candidate's identity in rows, so two directories holding files of the same names give
/// two rows, and a resumed sweep skips only what it measured). A file reached twice (the
/// same directory given twice, a link) is listed once.
pub fn find_files(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut push = |path: PathBuf, out: &mut Vec<(PathBuf, String)>| {
        let label = identity_label(&path);
        if seen.insert(label.clone()) {
            out.push((path, label));
        }
    };
    for dir in dirs {
        if dir.is_file() {
            push(dir.clone(), &mut out);
            continue;
        }
        let mut stack = vec![dir.clone()];
        let mut found = Vec::new();
        while let Some(d) = stack.pop() {
            let entries =
                std::fs::read_dir(&d).map_err(|e| format!("{}: cannot list: {e}", d.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| format!("{}: cannot list: {e}", d.display()))?;
                let path = entry.path();
                let kind = entry
                    .file_type()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                if kind.is_dir() {
                    stack.push(path);
                } else if path
                    .extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                {
                    found.push(path);
                }
            }
        }
        found.sort();
        for path in found {
            push(path, &mut out);
        }
    }
    Ok(out)
}

/// The path a row names a candidate file by: canonical (absolute, links resolved), else
/// absolute.
fn identity_label(path: &Path) -> String {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The identity of the file at `path` now (None when it cannot be opened as a regular file).
fn identity_of(path: &Path) -> Option<FileIdentity> {
    let file = open_regular(path, 0).ok()?;
    file.metadata().ok().map(|m| FileIdentity::of(&m))
}

/// The candidates in `path`: one per tensor, or one for the whole file when `per_file`.
/// Each remembers the file's identity (device, inode, size, times) so that its round can
/// tell whether the file is still the one its tensor list came from.
pub fn from_file(model: &Model, path: &Path, label: &str, per_file: bool) -> Vec<Candidate> {
    let before = identity_of(path);
    let mut found = read_candidates(model, path, label, per_file);
    // changed while the header was read: unknown, so the round reads it again
    let identity = before.filter(|&b| identity_of(path) == Some(b));
    for c in &mut found {
        c.identity = identity;
    }
    found
}

fn read_candidates(model: &Model, path: &Path, label: &str, per_file: bool) -> Vec<Candidate> {
    let failed = |reason: String| Candidate {
        label: label.to_string(),
        path: path.to_path_buf(),
        tensors: Vec::new(),
        problem: Some(reason),
        fallback_name: Some(String::new()),
        identity: None,
        in_memory: false,
    };
    // Only regular files (through symlinks): a FIFO named *.gguf must not block the sweep.
    let file = match open_regular(path, 0) {
        Ok(f) => f,
        Err(e) => return vec![failed(format!("cannot open: {e}"))],
    };
    let size = match file.metadata() {
        Ok(m) if m.is_file() => m.len(),
        Ok(_) => return vec![failed("not a regular file".into())],
        Err(e) => return vec![failed(format!("cannot stat: {e}"))],
    };
    let header = match read_header_from(&file, size, MAX_HEADER_BYTES) {
        Ok(h) => h,
        Err(e) => {
            let reason = format!("not a valid GGUF (truncated or corrupt?): {e}");
            // A file cut short in its data still has a whole header: name its tensors in
            // the failed rows (one row per tensor, as a sound file would have had).
            return match names_despite_truncation(&file, size) {
                Some(tensors) if !tensors.is_empty() => {
                    let one = |tensors: Vec<CandidateTensor>| Candidate {
                        label: label.to_string(),
                        path: path.to_path_buf(),
                        tensors,
                        problem: Some(reason.clone()),
                        fallback_name: None,
                        identity: None,
                        in_memory: false,
                    };
                    if per_file {
                        vec![one(tensors)]
                    } else {
                        tensors.into_iter().map(|t| one(vec![t])).collect()
                    }
                }
                _ => vec![failed(reason)],
            };
        }
    };
    let gguf = match header.gguf() {
        Ok(g) => g,
        Err(e) => return vec![failed(format!("not a valid GGUF: {e}"))],
    };
    if gguf.tensors().is_empty() {
        return vec![failed("holds no tensors".into())];
    }
    let mut out: Vec<Candidate> = Vec::new();
    for info in gguf.tensors() {
        let tensor = CandidateTensor {
            name: info.name.to_string(),
            ggml_type: info.ggml_type,
            offset: info.abs_offset(&gguf),
            nbytes: info.nbytes,
        };
        let problem = check(model, &tensor, info.ne, size);
        if per_file {
            if out.is_empty() {
                out.push(Candidate {
                    label: label.to_string(),
                    path: path.to_path_buf(),
                    tensors: Vec::new(),
                    problem: None,
                    fallback_name: None,
                    identity: None,
                    in_memory: false,
                });
            }
            let c = &mut out[0];
            if c.problem.is_none() {
                c.problem = problem;
            }
            c.tensors.push(tensor);
        } else {
            out.push(Candidate {
                label: label.to_string(),
                path: path.to_path_buf(),
                tensors: vec![tensor],
                problem,
                fallback_name: None,
                identity: None,
                in_memory: false,
            });
        }
    }
    out
}

/// The tensors a header names when the header is whole but the file ends before their data.
fn names_despite_truncation(file: &File, size: u64) -> Option<Vec<CandidateTensor>> {
    let len = usize::try_from(size.min(MAX_HEADER_BYTES)).ok()?;
    let mut prefix = vec![0u8; len];
    file.read_exact_at(&mut prefix, 0).ok()?;
    // As if the file were as long as its header says: only the names and types are used.
    let gguf = llama::gguf::Gguf::parse_header(&prefix, u64::MAX / 4).ok()?;
    Some(
        gguf.tensors()
            .iter()
            .map(|info| CandidateTensor {
                name: info.name.to_string(),
                ggml_type: info.ggml_type,
                offset: info.abs_offset(&gguf),
                nbytes: info.nbytes,
            })
            .collect(),
    )
}

/// Why a candidate tensor cannot replace the model's, if it cannot.
fn check(model: &Model, t: &CandidateTensor, ne: [i64; 4], file_size: u64) -> Option<String> {
    let Some(live) = model.tensors.get(&t.name) else {
        return Some(format!("the model has no tensor named '{}'", t.name));
    };
    let live_ne = live.read().layout.ne;
    if ne != live_ne {
        return Some(format!(
            "'{}': shape {:?} in the candidate, {:?} in the model",
            t.name, ne, live_ne
        ));
    }
    if t.ggml_type.type_size() == 0 {
        return Some(format!(
            "'{}': type {} has no data layout",
            t.name,
            t.ggml_type.name()
        ));
    }
    if t.offset
        .checked_add(t.nbytes)
        .map_or(true, |end| end > file_size)
    {
        return Some(format!(
            "'{}': data {}..{} past the end of the file ({file_size} bytes): truncated",
            t.name,
            t.offset,
            t.offset.saturating_add(t.nbytes)
        ));
    }
    None
}

/// The row's file column for in-memory candidates.
pub const IN_MEMORY_LABEL: &str = "(quantized in memory)";

/// In-memory candidates (`--quantize TYPES`): every tensor of the base that upstream's
/// `llama-quantize` would quantize (its `tensor_allows_quantization`), once per type. A type
/// the tensor's row length cannot take is a failed candidate (upstream would silently write
/// another type; a row must measure the type it names).
pub fn in_memory(model: &Model, types: &[GgmlType], source: Option<&Source>) -> Vec<Candidate> {
    use llama::quantize::policy::{allows_quantization, Choice};
    let choice = Choice {
        ftype: 0,
        output_tensor_type: None,
        token_embedding_type: None,
        quantize_output_tensor: true,
        only_copy: false,
        pure: true,
        overrides: &[],
    };
    let mut out = Vec::new();
    for i in 0..model.tensors.len() {
        let t = model.tensors.at(i);
        let ne = t.read().layout.ne;
        let n_dims = ne.iter().rposition(|&n| n > 1).map_or(1, |d| d + 1);
        if !allows_quantization(&choice, &model.arch, &t.name, n_dims) {
            continue;
        }
        for &ty in types {
            let nbytes = ty.nbytes(ne);
            out.push(Candidate {
                label: source
                    .map_or(IN_MEMORY_LABEL, |s| s.label.as_str())
                    .to_string(),
                path: PathBuf::new(),
                tensors: vec![CandidateTensor {
                    name: t.name.clone(),
                    ggml_type: ty,
                    offset: 0,
                    nbytes: nbytes.unwrap_or(0),
                }],
                problem: source.and_then(|s| s.problem(&t.name, ne)).or_else(|| {
                    nbytes.is_none().then(|| {
                        format!(
                            "shape {ne:?} cannot be stored as {} (row length not a multiple of {})",
                            ty.name(),
                            ty.block_size()
                        )
                    })
                }),
                fallback_name: None,
                identity: None,
                in_memory: true,
            });
        }
    }
    out
}
