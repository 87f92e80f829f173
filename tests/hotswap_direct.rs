//! Hot-swap's direct path on CPU memory: a relocation reads the new bytes straight into a
//! private buffer (reused from the model's pool when one of that size was freed), a return
//! to the original reads them straight into the original storage. Bytes must be exactly
//! the file's, buffers must really be reused, the pool must stay within its bound, and a
//! refused job on this path must leave the tensor (and its kept original) as it was.

use std::path::{Path, PathBuf};

use llama::device::Registry;
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::writer::TensorData as WriterData;
use llama::gguf::{GgmlType, Gguf, GgufWriter};
use llama::hotswap::{self, Outcome, Report};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::tensors::SwapState;
use llama::model::{LoadMode, Model};
use llama::storage::BufferPool;

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn setup(tag: &str, base: &GgufWriter) -> (Dir, PathBuf) {
    let p = std::env::temp_dir().join(format!("llama-hotswap-direct-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    let path = p.join("m.gguf");
    base.write_to(&path).unwrap();
    (Dir(p), path)
}

fn noise(seed: u64, n: usize) -> Vec<u8> {
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

fn ne_of(base: &GgufWriter, name: &str) -> [i64; 4] {
    let t = base.tensors().iter().find(|t| t.name == name).unwrap();
    let mut ne = [1i64; 4];
    ne[..t.dims.len()].copy_from_slice(&t.dims);
    ne
}

/// Random bytes of the right size for `name` stored as `ty`, with every F16 (Q4_0/Q8_0 block
/// scale, or F16 value) position made finite so that check_tensors accepts them.
fn bytes_for(base: &GgufWriter, name: &str, ty: GgmlType, seed: u64) -> Vec<u8> {
    let mut b = noise(seed, ty.nbytes(ne_of(base, name)).unwrap() as usize);
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

/// A copy of `base` where the named tensors get new types and bytes.
fn variant(base: &GgufWriter, changes: &[(&str, GgmlType, Vec<u8>)]) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in base.kvs() {
        w.set(k, v.clone());
    }
    for t in base.tensors() {
        let WriterData::Bytes(bytes) = &t.data else {
            panic!("deferred")
        };
        match changes.iter().find(|(n, _, _)| *n == t.name) {
            Some((_, ty, b)) => w.add_tensor(&t.name, &t.dims, *ty, b.clone()).unwrap(),
            None => w
                .add_tensor(&t.name, &t.dims, t.ggml_type, bytes.clone())
                .unwrap(),
        };
    }
    w
}

fn replace(path: &Path, w: &GgufWriter) {
    let tmp = path.with_extension("tmp");
    w.write_to(&tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn cpu_only() -> PlacementParams {
    PlacementParams {
        registry: Box::leak(Box::new(Registry::with_virtual_gpus(&[]))),
        ..Default::default()
    }
}

fn load_cpu(path: &Path, mode: LoadMode, check_tensors: bool) -> Model {
    load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: mode,
            placement: cpu_only(),
            hotswap: true,
            check_tensors,
            ..Default::default()
        },
    )
    .unwrap()
}

fn file_bytes(path: &Path, name: &str) -> (GgmlType, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let t = g.tensors().iter().find(|t| t.name == name).unwrap();
    let off = t.abs_offset(&g) as usize;
    (t.ggml_type, bytes[off..off + t.nbytes as usize].to_vec())
}

fn current(model: &Model, name: &str) -> (GgmlType, Vec<u8>) {
    let state = model.tensors.get(name).unwrap().read();
    let mut bytes = vec![0u8; state.layout.nbytes as usize];
    state.read_into(&mut bytes).unwrap();
    (state.layout.ggml_type, bytes)
}

/// Where the tensor's bytes are in memory now.
fn address(model: &Model, name: &str) -> usize {
    let state = model.tensors.get(name).unwrap().read();
    state.host_bytes().expect("host memory").as_ptr() as usize
}

fn swap_state(model: &Model, name: &str) -> SwapState {
    model.tensors.get(name).unwrap().read().swap
}

fn pool(model: &Model) -> std::sync::MutexGuard<'_, BufferPool> {
    model
        .hotswap
        .as_ref()
        .unwrap()
        .buffers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Buffers and bytes the pool holds.
fn held(model: &Model) -> (usize, u64) {
    let p = pool(model);
    (p.len(), p.bytes())
}

fn outcome(report: &Report, name: &str) -> Outcome {
    report
        .entry(name)
        .unwrap_or_else(|| panic!("{name} not in report {report:?}"))
        .outcome
}

fn reload(model: &Model, name: &str, want: Outcome) {
    let report = hotswap::reload_changed(model).unwrap();
    assert_eq!(outcome(&report, name), want, "{report:?}");
}

const Q: &str = "blk.1.attn_q.weight";

#[test]
fn relocations_reuse_freed_buffers_and_returns_read_into_the_original() {
    for mode in [LoadMode::None, LoadMode::Auto] {
        let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
        let (_dir, path) = setup(&format!("reuse-{mode:?}"), &base);
        let model = load_cpu(&path, mode, false);
        let original = current(&model, Q);
        let at_load = address(&model, Q);
        let q4_len = GgmlType::Q4_0.nbytes(ne_of(&base, Q)).unwrap();
        assert!(pool(&model).is_empty());

        // A -> B (Q4_0): a fresh private buffer holding exactly the file's bytes.
        replace(
            &path,
            &variant(
                &base,
                &[(Q, GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 7))],
            ),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(current(&model, Q), file_bytes(&path, Q), "{mode:?}");
        let private = address(&model, Q);
        assert_ne!(private, at_load);

        // B -> A: back on the original storage (owned: the same memory as at load), bit
        // for bit; the private buffer is kept in the pool.
        replace(&path, &base);
        reload(&model, Q, Outcome::ReturnedToOriginal);
        assert_eq!(current(&model, Q), original, "{mode:?}");
        assert_eq!(swap_state(&model, Q), SwapState::OnOriginal);
        if mode == LoadMode::None {
            assert_eq!(address(&model, Q), at_load, "returned into the arena range");
        }
        assert_eq!(held(&model), (1, q4_len));

        // A -> B' (Q4_0, other bytes): the kept buffer is reused, every byte rewritten.
        replace(
            &path,
            &variant(
                &base,
                &[(Q, GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 8))],
            ),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(address(&model, Q), private, "the pooled buffer came back");
        assert!(pool(&model).is_empty());
        assert_eq!(current(&model, Q), file_bytes(&path, Q));

        // B' -> F16 (private to private): the Q4_0 buffer goes to the pool, and comes back
        // for the next Q4_0.
        replace(
            &path,
            &variant(
                &base,
                &[(Q, GgmlType::F16, bytes_for(&base, Q, GgmlType::F16, 9))],
            ),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(current(&model, Q), file_bytes(&path, Q));
        assert_eq!(pool(&model).bytes(), q4_len);
        replace(
            &path,
            &variant(
                &base,
                &[(Q, GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 10))],
            ),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(address(&model, Q), private);
        assert_eq!(current(&model, Q), file_bytes(&path, Q));

        // The same through llama_ext_tensor_set's path (bytes from memory).
        let mem = bytes_for(&base, Q, GgmlType::F16, 11);
        let report = hotswap::tensor_set(&model, Q, GgmlType::F16.id() as i32, &mem).unwrap();
        assert_eq!(outcome(&report, Q), Outcome::Relocated, "{report:?}");
        assert_eq!(current(&model, Q), (GgmlType::F16, mem));

        replace(&path, &base);
        reload(&model, Q, Outcome::ReturnedToOriginal);
        assert_eq!(current(&model, Q), original);
        // Every other tensor untouched.
        for t in model.tensors.iter().filter(|t| t.name != Q) {
            assert_eq!(
                current(&model, &t.name),
                file_bytes(&path, &t.name),
                "{}",
                t.name
            );
        }
    }
}

#[test]
fn the_pool_stays_within_its_bound() {
    let base = tiny_llama(&TinyLlamaOpts {
        n_layer: 3,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    })
    .unwrap();
    let (_dir, path) = setup("bound", &base);
    let model = load_cpu(&path, LoadMode::None, false);
    let largest = model
        .tensors
        .iter()
        .map(|t| t.read().layout.nbytes)
        .max()
        .unwrap();
    assert_eq!(pool(&model).limit_bytes(), largest);
    let names: Vec<String> = model
        .tensors
        .iter()
        .filter(|t| t.read().layout.ggml_type == GgmlType::Q8_0)
        .map(|t| t.name.clone())
        .collect();
    assert!(names.len() > BufferPool::MAX_BUFFERS, "{names:?}");
    let originals: Vec<_> = names.iter().map(|n| current(&model, n)).collect();
    let changes: Vec<(&str, GgmlType, Vec<u8>)> = names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let b = bytes_for(&base, n, GgmlType::Q4_0, 100 + k as u64);
            (n.as_str(), GgmlType::Q4_0, b)
        })
        .collect();
    // Every tensor out and back, three times: the pool never holds more than its bound.
    for _ in 0..3 {
        replace(&path, &variant(&base, &changes));
        let report = hotswap::reload_changed(&model).unwrap();
        for n in &names {
            assert_eq!(outcome(&report, n), Outcome::Relocated);
            assert_eq!(current(&model, n), file_bytes(&path, n), "{n}");
        }
        let h = held(&model);
        assert!(h.0 <= BufferPool::MAX_BUFFERS && h.1 <= largest, "{h:?}");
        replace(&path, &base);
        let report = hotswap::reload_changed(&model).unwrap();
        for (n, o) in names.iter().zip(&originals) {
            assert_eq!(outcome(&report, n), Outcome::ReturnedToOriginal);
            assert_eq!(&current(&model, n), o, "{n}");
        }
        let h = held(&model);
        assert!(h.0 >= 1, "freed buffers are kept");
        assert!(h.0 <= BufferPool::MAX_BUFFERS && h.1 <= largest, "{h:?}");
    }
}

/// F16 bytes for `name` with one NaN.
fn f16_with_nan(base: &GgufWriter, name: &str) -> Vec<u8> {
    let mut b = bytes_for(base, name, GgmlType::F16, 5);
    b[2..4].copy_from_slice(&0x7e00u16.to_le_bytes());
    b
}

#[test]
fn refused_on_the_direct_path_leaves_tensor_and_original_as_they_were() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("refuse", &base);
    let model = load_cpu(&path, LoadMode::None, true);
    let original = current(&model, Q);
    let at_load = address(&model, Q);

    // A relocation with invalid bytes: refused, nothing moves, nothing leaks.
    replace(
        &path,
        &variant(&base, &[(Q, GgmlType::F16, f16_with_nan(&base, Q))]),
    );
    reload(&model, Q, Outcome::Refused);
    assert_eq!(current(&model, Q), original);
    assert_eq!(address(&model, Q), at_load);
    assert_eq!(swap_state(&model, Q), SwapState::OnOriginal);

    // Detach (valid Q4_0), then try to return with a NaN in a block scale: refused; the
    // tensor stays detached with its Q4_0 bytes, and its original is still kept.
    replace(
        &path,
        &variant(
            &base,
            &[(Q, GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 3))],
        ),
    );
    reload(&model, Q, Outcome::Relocated);
    let detached = current(&model, Q);
    let private = address(&model, Q);
    let mut bad = bytes_for(&base, Q, GgmlType::Q8_0, 4);
    bad[0..2].copy_from_slice(&0x7e00u16.to_le_bytes());
    replace(&path, &variant(&base, &[(Q, GgmlType::Q8_0, bad)]));
    reload(&model, Q, Outcome::Refused);
    assert_eq!(current(&model, Q), detached);
    assert_eq!(address(&model, Q), private);
    assert_eq!(swap_state(&model, Q), SwapState::Detached);
    assert!(model.tensors.get(Q).unwrap().read().original.is_some());

    // A valid return afterwards lands in the original storage, bit for bit.
    replace(&path, &base);
    reload(&model, Q, Outcome::ReturnedToOriginal);
    assert_eq!(current(&model, Q), original);
    assert_eq!(address(&model, Q), at_load);
}
