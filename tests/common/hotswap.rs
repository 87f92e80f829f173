//! What the hot-swap tests (tests/hotswap.rs, tests/hotswap_direct.rs) share: a model file in
//! a temporary directory, deterministic tensor bytes, rewritten copies of a model put in place
//! as a careful tool does, and the type and bytes of a tensor in a file or in a loaded model.
//! Included with `#[path]` (the kernel tests' `common` module does not need it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use llama::device::Registry;
use llama::gguf::writer::TensorData as WriterData;
use llama::gguf::{GgmlType, Gguf, GgufWriter};
use llama::hotswap::{Outcome, Report};
use llama::model::Model;

/// A temporary directory, removed when dropped.
pub struct Dir(pub PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory for one test (`tag` tells tests of the same process apart).
pub fn tempdir(tag: &str) -> Dir {
    let p = std::env::temp_dir().join(format!("llama-hotswap-rs-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Dir(p)
}

/// A fresh directory with `base` written as `m.gguf`.
pub fn setup(tag: &str, base: &GgufWriter) -> (Dir, PathBuf) {
    let dir = tempdir(tag);
    let path = dir.0.join("m.gguf");
    base.write_to(&path).unwrap();
    (dir, path)
}

/// A device registry with virtual GPUs of these capacities (none: CPU only), for the test's
/// whole run.
pub fn registry(capacities: &[u64]) -> &'static Registry {
    Box::leak(Box::new(Registry::with_virtual_gpus(capacities)))
}

/// Deterministic bytes.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// One tensor of a writer: name, dims, type, bytes.
pub type Spec = (String, Vec<i64>, GgmlType, Vec<u8>);

/// A copy of `base` (same metadata) with each tensor passed through `edit` (None drops it).
pub fn rewrite(base: &GgufWriter, edit: impl Fn(Spec) -> Option<Spec>) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in base.kvs() {
        w.set(k, v.clone());
    }
    for t in base.tensors() {
        let bytes = match &t.data {
            WriterData::Bytes(b) => b.clone(),
            WriterData::Deferred => panic!("deferred"),
        };
        if let Some((name, dims, ty, bytes)) =
            edit((t.name.clone(), t.dims.clone(), t.ggml_type, bytes))
        {
            w.add_tensor(&name, &dims, ty, bytes).unwrap();
        }
    }
    w
}

/// A tensor's new type and bytes in a [`variant`] (None: drop the tensor).
pub type Change<'a> = (&'a str, Option<(GgmlType, Vec<u8>)>);

/// A copy of `base` where the named tensors get new types and bytes (None: drop the tensor).
pub fn variant(base: &GgufWriter, changes: &[Change]) -> GgufWriter {
    rewrite(base, |(name, dims, ty, bytes)| {
        match changes.iter().find(|(n, _)| *n == name) {
            Some((_, None)) => None,
            Some((_, Some((t, b)))) => Some((name, dims, *t, b.clone())),
            None => Some((name, dims, ty, bytes)),
        }
    })
}

/// The shape of tensor `name` of `base`, padded to four dimensions.
pub fn ne_of(base: &GgufWriter, name: &str) -> [i64; 4] {
    let t = base.tensors().iter().find(|t| t.name == name).unwrap();
    let mut ne = [1i64; 4];
    ne[..t.dims.len()].copy_from_slice(&t.dims);
    ne
}

/// Random bytes of the right size for `name` stored as `ty`.
pub fn bytes_for(base: &GgufWriter, name: &str, ty: GgmlType, seed: u64) -> Vec<u8> {
    noise(seed, ty.nbytes(ne_of(base, name)).unwrap() as usize)
}

/// [`bytes_for`] with every F16 (Q4_0/Q8_0 block scale, or F16 value) position made finite,
/// so that check_tensors accepts them.
pub fn finite_bytes_for(base: &GgufWriter, name: &str, ty: GgmlType, seed: u64) -> Vec<u8> {
    let mut b = bytes_for(base, name, ty, seed);
    let (stride, at) = match ty {
        GgmlType::Q4_0 => (18, 0),
        GgmlType::Q8_0 => (34, 0),
        GgmlType::F16 => (2, 0),
        _ => return b,
    };
    for chunk in b.chunks_exact_mut(stride) {
        chunk[at + 1] &= 0x3b; // exponent below all-ones: finite
    }
    b
}

/// Writes `w` next to `path` and renames it into place (what a careful tool does).
pub fn replace(path: &Path, w: &GgufWriter) {
    let tmp = path.with_extension("tmp");
    w.write_to(&tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Type and bytes of tensor `name` in the file at `path`.
pub fn file_bytes(path: &Path, name: &str) -> (GgmlType, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let t = g.tensors().iter().find(|t| t.name == name).unwrap();
    let off = t.abs_offset(&g) as usize;
    (t.ggml_type, bytes[off..off + t.nbytes as usize].to_vec())
}

/// Type and bytes in the model, read under one lock (a consistent view).
pub fn current(model: &Model, name: &str) -> (GgmlType, Vec<u8>) {
    let tensor = model.tensors.get(name).unwrap();
    let state = tensor.read();
    let mut bytes = vec![0u8; state.layout.nbytes as usize];
    state.read_into(&mut bytes).unwrap();
    (state.layout.ggml_type, bytes)
}

/// What a reload did with tensor `name`.
pub fn outcome(report: &Report, name: &str) -> Outcome {
    report
        .entry(name)
        .unwrap_or_else(|| panic!("{name} not in report {report:?}"))
        .outcome
}

/// Every tensor of the model but `except` holds exactly its bytes in the file at `path`.
pub fn assert_others_match_file(model: &Model, path: &Path, except: &str) {
    for t in model.tensors.iter().filter(|t| t.name != except) {
        assert_eq!(
            current(model, &t.name),
            file_bytes(path, &t.name),
            "{}",
            t.name
        );
    }
}
