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
    assert_others_match_file, current, file_bytes, finite_bytes_for, ne_of, outcome, registry,
    replace, setup, variant, Change,
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
        assert_others_match_file(&model, &path, Q);
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

/// A model whose `blk.0.ffn_up.weight` is F16 [512, 2048] (2 MiB: its whole pages move).
fn big_ffn_model() -> GgufWriter {
    tiny_llama(&TinyLlamaOpts {
        n_layer: 1,
        n_embd: 512,
        n_head: 8,
        n_head_kv: 8,
        n_ff: 2048,
        weight_type: GgmlType::F16,
        ..Default::default()
    })
    .unwrap()
}

const UP: &str = "blk.0.ffn_up.weight";

#[test]
fn in_place_reloads_move_pages_and_readers_see_whole_versions() {
    let base = big_ffn_model();
    let (_dir, path) = setup("move-pages", &base);
    let model = std::sync::Arc::new(load_cpu(&path, LoadMode::None, true));
    let at_load = address(&model, UP);
    let page = llama::device::page_size();
    let versions: Vec<Vec<u8>> = (0..6)
        .map(|s| finite_bytes_for(&base, UP, GgmlType::F16, 40 + s))
        .collect();
    let mut known = versions.clone();
    known.push(current(&model, UP).1);

    // A reader that must only ever see one whole version.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (model, stop, known) = (model.clone(), stop.clone(), known.clone());
        std::thread::spawn(move || {
            let mut reads = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (_, bytes) = current(&model, UP);
                assert!(known.contains(&bytes), "a torn or unknown version");
                reads += 1;
            }
            reads
        })
    };

    // From the file: every tensor of a changed file is a job (the unchanged ones are
    // compared and left), and ffn_gate and ffn_down have ffn_up's geometry, so which job made
    // the stage and what it holds now depends on the file's order; the bytes must be right.
    for (round, v) in versions.iter().enumerate() {
        put_q_named(&path, &base, UP, GgmlType::F16, v.clone());
        reload(&model, UP, Outcome::ReloadedInPlace);
        assert_eq!(
            current(&model, UP),
            (GgmlType::F16, v.clone()),
            "round {round}"
        );
        assert_eq!(address(&model, UP), at_load, "written in the arena range");
        let slot = model.hotswap.as_ref().unwrap().page_stage.lock().unwrap();
        assert!(
            round == 0 || slot.stage.is_some(),
            "round {round}: no stage"
        );
    }
    let mut previous = versions[versions.len() - 1].clone();

    // From memory (llama_ext_tensor_set's path: one job): the stage then holds the tensor's
    // previous whole pages, so they were moved, not copied.
    for (round, v) in versions.iter().enumerate() {
        let report = hotswap::tensor_set(&model, UP, GgmlType::F16.id() as i32, v).unwrap();
        assert_eq!(outcome(&report, UP), Outcome::ReloadedInPlace, "{report:?}");
        assert_eq!(current(&model, UP).1, *v, "round {round}");
        assert_eq!(address(&model, UP), at_load);
        let slot = model.hotswap.as_ref().unwrap().page_stage.lock().unwrap();
        if slot.off {
            // This kernel refused to move pages (older than 5.7): in-place reloads copy,
            // and the bytes above are all there is to check.
            eprintln!("moving pages was refused here; in-place reloads copy");
            continue;
        }
        let stage = slot.stage.as_ref().expect("a stage");
        let head = at_load % page;
        assert_eq!(stage.geometry(), (head, v.len()));
        let lead = (page - head) % page;
        let end = (head + v.len()) / page * page - head;
        assert!(
            stage.bytes()[lead..end] == previous[lead..end],
            "round {round}: the old pages were not moved into the stage"
        );
        drop(slot);
        previous = v.clone();
    }

    // Invalid bytes (check_tensors): refused, the tensor keeps its bytes.
    let mut bad = versions[0].clone();
    bad[2..4].copy_from_slice(&0x7e00u16.to_le_bytes());
    put_q_named(&path, &base, UP, GgmlType::F16, bad);
    reload(&model, UP, Outcome::Refused);
    assert_eq!(current(&model, UP).1, previous);

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    // Every other tensor is as in the file.
    assert_others_match_file(&model, &path, UP);
}

/// Puts a copy of `base` in place where `name` has type `ty` and these bytes.
fn put_q_named(path: &Path, base: &GgufWriter, name: &str, ty: GgmlType, bytes: Vec<u8>) {
    replace(path, &variant(base, &[(name, Some((ty, bytes)))]));
}
