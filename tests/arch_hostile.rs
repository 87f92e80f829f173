//! Hostile files of the registry's architectures: a tiny gemma2 model (llama's tensors plus
//! the post-attention and post-FFN norms, under gemma2's keys) decodes; the same file with a
//! tensor left out, or with one in another shape, fails context creation with an error that
//! names the tensor (and both shapes), never a crash.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llama::context::{Context, ContextParams};
use llama::gguf::fixtures::{tensor_values, tiny_llama, TinyLlamaOpts};
use llama::gguf::writer::TensorData;
use llama::gguf::{GgmlType, GgufWriter};
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::LoadMode;

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("lhs-arch-hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// A gemma2 model: tiny llama's keys renamed to gemma2's, its tensors (but `skip`; `reshape`
/// written with the given dims instead), and the two post norms of every layer.
fn gemma2(skip: Option<&str>, reshape: Option<(&str, &[i64])>) -> GgufWriter {
    let opts = TinyLlamaOpts {
        tie_embeddings: true,
        ..TinyLlamaOpts::default()
    };
    let src = tiny_llama(&opts).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in src.kvs() {
        let key = match key.strip_prefix("llama.") {
            Some(rest) => format!("gemma2.{rest}"),
            None => key.clone(),
        };
        w.set(&key, value.clone());
    }
    w.set("general.architecture", "gemma2");
    let add = |w: &mut GgufWriter, name: &str, dims: &[i64], ty: GgmlType, values: Vec<f32>| {
        if skip == Some(name) {
            return;
        }
        match reshape {
            Some((n, d)) if n == name => {
                let count: i64 = d.iter().product();
                let v = tensor_values(7, name, count as usize, false);
                w.add_tensor_f32(name, d, GgmlType::F32, &v).unwrap();
            }
            _ => {
                w.add_tensor_f32(name, dims, ty, &values).unwrap();
            }
        }
    };
    for t in src.tensors() {
        let TensorData::Bytes(bytes) = &t.data else {
            panic!("tiny llama's tensors are in memory")
        };
        assert_eq!(t.ggml_type, GgmlType::F32);
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        add(&mut w, &t.name, &t.dims, t.ggml_type, values);
    }
    let n_embd = i64::from(opts.n_embd);
    for il in 0..opts.n_layer {
        for suffix in ["post_attention_norm.weight", "post_ffw_norm.weight"] {
            let name = format!("blk.{il}.{suffix}");
            let v = tensor_values(11, &name, n_embd as usize, true);
            add(&mut w, &name, &[n_embd], GgmlType::F32, v);
        }
    }
    w
}

fn write(w: &GgufWriter, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    w.write_to(&path).unwrap();
    path
}

fn context(path: &Path) -> Result<Context, String> {
    let model = load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: LoadMode::Auto,
            vocab_only: false,
            no_alloc: false,
            check_tensors: false,
            overrides: Vec::new(),
            progress: Some(&mut |_| true),
            placement: Default::default(),
            hotswap: false,
        },
    )
    .map_err(|e| format!("load: {e}"))?;
    let params = ContextParams {
        n_ctx: 64,
        n_batch: 16,
        n_ubatch: 16,
        n_threads: 1,
        n_threads_batch: 1,
        ..ContextParams::default()
    };
    Context::new(Arc::new(model), &params).map_err(|e| format!("context: {e}"))
}

#[test]
fn a_complete_gemma2_file_decodes() {
    let dir = tempdir("ok");
    let ctx = context(&write(&gemma2(None, None), &dir.0, "ok.gguf")).expect("a complete file");
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend_from_slice(&[1, 17, 200, 5]);
    }
    assert_eq!(ctx.decode(), 0);
    let logits = ctx.engine().logits.clone();
    assert!(!logits.is_empty() && logits.iter().all(|v| v.is_finite()));
    // gemma2's final soft-cap (30 unless the file says otherwise) bounds every logit
    assert!(logits.iter().all(|v| v.abs() <= 30.0));
}

#[test]
fn a_missing_tensor_fails_context_creation_naming_it() {
    let dir = tempdir("missing");
    let name = "blk.1.post_ffw_norm.weight";
    let err = match context(&write(&gemma2(Some(name), None), &dir.0, "m.gguf")) {
        Ok(_) => panic!("a gemma2 file without {name} must be refused"),
        Err(e) => e,
    };
    assert!(err.contains(name), "the error names the tensor: {err}");
    assert!(err.contains("missing"), "the error says why: {err}");
}

#[test]
fn a_mis_shaped_tensor_fails_context_creation_naming_it_and_both_shapes() {
    let dir = tempdir("shape");
    let name = "blk.0.post_attention_norm.weight";
    let err = match context(&write(&gemma2(None, Some((name, &[32]))), &dir.0, "s.gguf")) {
        Ok(_) => panic!("a gemma2 file with {name} of 32 values must be refused"),
        Err(e) => e,
    };
    assert!(err.contains(name), "the error names the tensor: {err}");
    assert!(
        err.contains("shape [32, 1, 1, 1]") && err.contains("expected [64]"),
        "both shapes: {err}"
    );
}
