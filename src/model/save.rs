//! `llama_model_save_to_file`: the model as it is now (hot-swapped tensors included) as one
//! GGUF file. Metadata: the key/value pairs of the model's first file, as read there (types
//! kept; `split.*` dropped: the result is one file), so the result loads into a model with the
//! same hyperparameters, vocabulary and chat templates. Upstream regenerates its pairs from the
//! loaded hyperparameters instead (and drops what it does not model, the chat template among
//! them); tensors are the same either way: every tensor the model holds, with its current type,
//! shape and bytes, once (upstream orders them by its `llama_layer` fields, ours by file).

use std::path::Path;

use crate::gguf::{GgufWriteError, GgufWriter, MetaValue};

use super::Model;

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("the model has no file to take its metadata from")]
    NoFile,
    #[error("reading the metadata of {path}: {reason}")]
    Metadata { path: String, reason: String },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: GgufWriteError,
    },
    #[error("moving {from} to {to}: {source}")]
    Rename {
        from: String,
        to: String,
        source: std::io::Error,
    },
}

/// Writes the model to `path` (through a temporary file beside it, renamed into place, so a
/// model saved over its own file keeps reading the old bytes until it is done). Returns the
/// number of tensors written.
pub fn save_to_file(model: &Model, path: &Path) -> Result<usize, SaveError> {
    let first = model.files.first().ok_or(SaveError::NoFile)?;
    let shown = || {
        first
            .path
            .as_deref()
            .map_or("the model's file".to_string(), |p| p.display().to_string())
    };
    let metadata_error = |reason: String| SaveError::Metadata {
        path: shown(),
        reason,
    };
    let header =
        crate::storage::file::read_header(first).map_err(|e| metadata_error(e.to_string()))?;
    let gguf = header.gguf().map_err(|e| metadata_error(e.to_string()))?;
    let mut w = GgufWriter::new();
    w.set_version(gguf.version());
    for kv in gguf.kvs() {
        let key = String::from_utf8_lossy(kv.key);
        if key.starts_with("split.") {
            continue;
        }
        w.set(&key, MetaValue::from_value(&kv.value));
    }
    let write_error = |source| SaveError::Write {
        path: path.display().to_string(),
        source,
    };
    for t in model.tensors.iter() {
        let state = t.read();
        let ne = state.layout.ne;
        // ggml_n_dims: trailing ones dropped, at least one
        let n_dims = ne.iter().rposition(|&n| n != 1).map_or(1, |i| i + 1);
        w.add_tensor_deferred(&t.name, &ne[..n_dims], state.layout.ggml_type)
            .map_err(write_error)?;
    }
    let file_name = path
        .file_name()
        .map_or("model".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{file_name}.saving-{}", std::process::id()));
    let mut buf = Vec::new();
    let written = w.write_to_with(&tmp, |_, pending, out| {
        let t = model
            .tensors
            .get(&pending.name)
            .ok_or_else(|| std::io::Error::other(format!("tensor '{}' vanished", pending.name)))?;
        let state = t.read();
        buf.resize(state.layout.nbytes as usize, 0);
        // fails for tensors without data (a no_alloc model): nothing is left behind
        state
            .read_into(&mut buf)
            .map_err(|e| std::io::Error::other(format!("tensor '{}': {e}", pending.name)))?;
        out.write_all(&buf)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(write_error(e));
    }
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        SaveError::Rename {
            from: tmp.display().to_string(),
            to: path.display().to_string(),
            source,
        }
    })?;
    Ok(model.tensors.len())
}
