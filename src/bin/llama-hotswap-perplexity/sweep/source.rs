//! `--from FILE`: a higher-precision copy of the base (typically the BF16 or F16 GGUF the
//! base was quantized from) that in-memory candidates are quantized from instead of the
//! loaded base, read tensor by tensor, so a candidate is what `llama-quantize` would make
//! from that file rather than a requantization of the base's already-rounded weights.
//! Only the headers are read up front (every shard of a split set); a round reads its one
//! tensor and first checks that the shard is still the file its header came from.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use llama::gguf::{read_header_from, GgmlType, Value};
use llama::model::split::{split_path, split_prefix};
use llama::storage::file::{open_regular, FileIdentity};

/// A source model's header is refused past this (a whole model's header: names, shapes
/// and the vocabulary; 64 MiB is far past any real one).
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Where one tensor of the source lies.
struct SourceTensor {
    shard: usize,
    ggml_type: GgmlType,
    ne: [i64; 4],
    offset: u64,
    nbytes: u64,
}

/// One file of the source: its path and the identity it had when its header was read.
struct Shard {
    path: PathBuf,
    identity: FileIdentity,
}

/// The `--from` model: its tensors by name.
pub struct Source {
    /// How rows name it: `(quantized in memory from <canonical path>)`.
    pub label: String,
    shards: Vec<Shard>,
    tensors: HashMap<String, SourceTensor>,
}

impl Source {
    /// Reads the headers of `path` and, when it is the first shard of a split set, of every
    /// other shard (named as `llama_split_path` names them).
    pub fn open(path: &Path) -> Result<Source, String> {
        let shown = path.display();
        let first = read_shard(path)?;
        let count = match first.1 .1 {
            SplitCount::None => 1,
            SplitCount::Is(n) => u32::from(n).max(1),
            SplitCount::NotU16 => return Err(format!("--from {shown}: split.count is not a u16")),
        };
        let mut headers = vec![first];
        if count > 1 {
            let text = path.to_string_lossy().into_owned();
            let prefix = split_prefix(&text, 0, count as i32).ok_or_else(|| {
                format!("--from {shown}: split.count is {count} but the name is not the first shard's (PREFIX-00001-of-{count:05}.gguf)")
            })?;
            for i in 1..count as i32 {
                let p = PathBuf::from(split_path(prefix, i, count as i32));
                headers.push(read_shard(&p)?);
            }
        }
        let mut tensors = HashMap::new();
        let mut shards = Vec::new();
        for (i, (shard, header)) in headers.into_iter().enumerate() {
            for t in header.0 {
                if tensors.contains_key(&t.0) {
                    return Err(format!(
                        "--from {shown}: tensor '{}' is in more than one shard",
                        t.0
                    ));
                }
                tensors.insert(t.0, SourceTensor { shard: i, ..t.1 });
            }
            shards.push(shard);
        }
        let label = format!(
            "(quantized in memory from {})",
            std::fs::canonicalize(path)
                .unwrap_or_else(|_| path.to_path_buf())
                .display()
        );
        Ok(Source {
            label,
            shards,
            tensors,
        })
    }

    /// Why tensor `name` of shape `ne` (the base's) cannot be taken from the source, if it
    /// cannot: the source lacks it, or holds another shape.
    pub fn problem(&self, name: &str, ne: [i64; 4]) -> Option<String> {
        match self.tensors.get(name) {
            None => Some(format!("the --from model has no tensor '{name}'")),
            Some(t) if t.ne != ne => Some(format!(
                "'{name}': shape {:?} in the --from model, {ne:?} in the base",
                t.ne
            )),
            Some(_) => None,
        }
    }

    /// Tensor `name`'s type and bytes, read now; an error when its shard is no longer the
    /// file the header came from (replaced, truncated, touched).
    pub fn read(&self, name: &str) -> Result<(GgmlType, Vec<u8>), String> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("the --from model has no tensor '{name}'"))?;
        let shard = &self.shards[t.shard];
        let shown = shard.path.display();
        let changed = || format!("--from {shown}: the file changed while the sweep used it");
        let file = open_regular(&shard.path, 0).map_err(|e| format!("--from {shown}: {e}"))?;
        let identity = |f: &File| f.metadata().ok().map(|m| FileIdentity::of(&m));
        if identity(&file) != Some(shard.identity) {
            return Err(changed());
        }
        let len = usize::try_from(t.nbytes).map_err(|_| format!("'{name}' is too large"))?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(len)
            .map_err(|_| format!("cannot allocate {len} bytes for '{name}'"))?;
        buf.resize(len, 0);
        file.read_exact_at(&mut buf, t.offset)
            .map_err(|e| format!("--from {shown}: reading '{name}': {e}"))?;
        if identity(&file) != Some(shard.identity) {
            return Err(changed());
        }
        Ok((t.ggml_type, buf))
    }
}

/// A shard's `split.count` (upstream's rule: a u16).
#[derive(Clone, Copy)]
enum SplitCount {
    None,
    Is(u16),
    NotU16,
}

type Header = (Vec<(String, SourceTensor)>, SplitCount);

/// One shard's tensors (checked to lie inside the file) and its split keys.
fn read_shard(path: &Path) -> Result<(Shard, Header), String> {
    let shown = path.display();
    let file = open_regular(path, 0).map_err(|e| format!("--from {shown}: cannot open: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("--from {shown}: cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err(format!("--from {shown}: not a regular file"));
    }
    let size = meta.len();
    let header = read_header_from(&file, size, MAX_HEADER_BYTES)
        .map_err(|e| format!("--from {shown}: not a valid GGUF: {e}"))?;
    let gguf = header
        .gguf()
        .map_err(|e| format!("--from {shown}: not a valid GGUF: {e}"))?;
    let mut tensors = Vec::new();
    for info in gguf.tensors() {
        let offset = info.abs_offset(&gguf);
        if offset
            .checked_add(info.nbytes)
            .map_or(true, |end| end > size)
        {
            return Err(format!(
                "--from {shown}: '{}' lies past the end of the file: truncated",
                info.name
            ));
        }
        tensors.push((
            info.name.to_string(),
            SourceTensor {
                shard: 0,
                ggml_type: info.ggml_type,
                ne: info.ne,
                offset,
                nbytes: info.nbytes,
            },
        ));
    }
    let split_count = match gguf.get("split.count") {
        None => SplitCount::None,
        Some(Value::U16(n)) => SplitCount::Is(*n),
        Some(_) => SplitCount::NotU16,
    };
    Ok((
        Shard {
            path: path.to_path_buf(),
            identity: FileIdentity::of(&meta),
        },
        (tensors, split_count),
    ))
}
