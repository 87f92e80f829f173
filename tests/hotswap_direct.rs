//! Hot-swap's direct path on CPU memory: a relocation reads the new bytes straight into a
//! private buffer (reused from the model's pool when one of that size was freed), a return
//! to the original reads them straight into the original storage. Bytes must be exactly
//! the file's, buffers must really be reused, the pool must stay within its bound, and a
//! refused job on this path must leave the tensor (and its kept original) as it was.

use std::path::Path;

use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, GgufWriter};
use llama::hotswap::{self, Outcome};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::tensors::SwapState;
use llama::model::{LoadMode, Model};
use llama::storage::BufferPool;

#[path = "common/hotswap.rs"]
mod hotswap_common;
use hotswap_common::{
    current, file_bytes, finite_bytes_for, ne_of, outcome, registry, replace, setup, variant,
    Change,
};

fn cpu_only() -> PlacementParams {
    PlacementParams {
        registry: registry(&[]),
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

fn reload(model: &Model, name: &str, want: Outcome) {
    let report = hotswap::reload_changed(model).unwrap();
    assert_eq!(outcome(&report, name), want, "{report:?}");
}

const Q: &str = "blk.1.attn_q.weight";

/// Puts a copy of `base` in place where `Q` has type `ty` and these bytes.
fn put_q(path: &Path, base: &GgufWriter, ty: GgmlType, bytes: Vec<u8>) {
    replace(path, &variant(base, &[(Q, Some((ty, bytes)))]));
}

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
        put_q(
            &path,
            &base,
            GgmlType::Q4_0,
            finite_bytes_for(&base, Q, GgmlType::Q4_0, 7),
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
        put_q(
            &path,
            &base,
            GgmlType::Q4_0,
            finite_bytes_for(&base, Q, GgmlType::Q4_0, 8),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(address(&model, Q), private, "the pooled buffer came back");
        assert!(pool(&model).is_empty());
        assert_eq!(current(&model, Q), file_bytes(&path, Q));

        // B' -> F16 (private to private): the Q4_0 buffer goes to the pool, and comes back
        // for the next Q4_0.
        put_q(
            &path,
            &base,
            GgmlType::F16,
            finite_bytes_for(&base, Q, GgmlType::F16, 9),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(current(&model, Q), file_bytes(&path, Q));
        assert_eq!(pool(&model).bytes(), q4_len);
        put_q(
            &path,
            &base,
            GgmlType::Q4_0,
            finite_bytes_for(&base, Q, GgmlType::Q4_0, 10),
        );
        reload(&model, Q, Outcome::Relocated);
        assert_eq!(address(&model, Q), private);
        assert_eq!(current(&model, Q), file_bytes(&path, Q));

        // The same through llama_ext_tensor_set's path (bytes from memory).
        let mem = finite_bytes_for(&base, Q, GgmlType::F16, 11);
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
    let changes: Vec<Change> = names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let b = finite_bytes_for(&base, n, GgmlType::Q4_0, 100 + k as u64);
            (n.as_str(), Some((GgmlType::Q4_0, b)))
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
    let mut b = finite_bytes_for(base, name, GgmlType::F16, 5);
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
    put_q(&path, &base, GgmlType::F16, f16_with_nan(&base, Q));
    reload(&model, Q, Outcome::Refused);
    assert_eq!(current(&model, Q), original);
    assert_eq!(address(&model, Q), at_load);
    assert_eq!(swap_state(&model, Q), SwapState::OnOriginal);

    // Detach (valid Q4_0), then try to return with a NaN in a block scale: refused; the
    // tensor stays detached with its Q4_0 bytes, and its original is still kept.
    put_q(
        &path,
        &base,
        GgmlType::Q4_0,
        finite_bytes_for(&base, Q, GgmlType::Q4_0, 3),
    );
    reload(&model, Q, Outcome::Relocated);
    let detached = current(&model, Q);
    let private = address(&model, Q);
    let mut bad = finite_bytes_for(&base, Q, GgmlType::Q8_0, 4);
    bad[0..2].copy_from_slice(&0x7e00u16.to_le_bytes());
    put_q(&path, &base, GgmlType::Q8_0, bad);
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
