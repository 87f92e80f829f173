//! Hot-swap through the core API (the C API is exercised by ffi-tests/ext_hotswap.c): the
//! flow on every placement (CPU mapped/owned, virtual GPUs, ROW split with MoE families),
//! transactional failures, concurrency and bounded memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use llama::device::SplitMode;
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, GgufWriter};
use llama::hotswap::{self, Outcome};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::tensors::TensorData;
use llama::model::{LoadMode, Model};

#[path = "common/hotswap.rs"]
mod hotswap_common;
use hotswap_common::{
    assert_others_match_file, bytes_for, current, file_bytes, outcome, registry, replace, rewrite,
    setup, tempdir, variant, Dir,
};

fn load_model(path: &Path, placement: PlacementParams, mode: LoadMode) -> Model {
    load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: mode,
            placement,
            hotswap: true,
            ..Default::default()
        },
    )
    .unwrap()
}

fn two_gpus() -> PlacementParams {
    PlacementParams {
        registry: registry(&[64 << 20, 64 << 20]),
        ..Default::default()
    }
}

const Q: &str = "blk.1.attn_q.weight";

#[test]
fn a_b_a_on_every_placement_and_mode() {
    let placements: Vec<(&str, PlacementParams)> = vec![
        (
            "cpu",
            PlacementParams {
                registry: registry(&[]),
                ..Default::default()
            },
        ),
        ("layer", two_gpus()),
        (
            "row",
            PlacementParams {
                split_mode: SplitMode::Row,
                ..two_gpus()
            },
        ),
    ];
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    for (label, placement) in placements {
        for mode in [LoadMode::Auto, LoadMode::None] {
            let dir = tempdir(&format!("aba-{label}-{mode:?}"));
            let path = dir.0.join("m.gguf");
            base.write_to(&path).unwrap();
            let model = load_model(&path, placement.clone(), mode);
            let original = current(&model, Q);
            assert_eq!(original, file_bytes(&path, Q), "{label} {mode:?}");

            // A -> B (Q4_0): exactly what a fresh load of B gives.
            let b = variant(
                &base,
                &[(
                    Q,
                    Some((GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 7))),
                )],
            );
            replace(&path, &b);
            let gen0 = model.generation.load(Ordering::Acquire);
            let report = hotswap::reload_changed(&model).unwrap();
            assert_eq!(
                outcome(&report, Q),
                Outcome::Relocated,
                "{label} {mode:?}: {report:?}"
            );
            assert!(report.generation > gen0);
            let fresh = load_model(&path, placement.clone(), mode);
            assert_eq!(current(&model, Q), current(&fresh, Q));
            let (info, fresh_info) = (model.tensor_info(Q).unwrap(), fresh.tensor_info(Q).unwrap());
            assert_eq!(
                (
                    info.ggml_type,
                    info.ne,
                    info.nbytes,
                    info.device,
                    info.rows.clone()
                ),
                (
                    fresh_info.ggml_type,
                    fresh_info.ne,
                    fresh_info.nbytes,
                    fresh_info.device,
                    fresh_info.rows.clone()
                ),
                "{label} {mode:?}"
            );
            // Other tensors untouched.
            assert_others_match_file(&model, &path, Q);

            // B -> A: bit-identical to the original, back on its original storage.
            replace(&path, &base);
            let report = hotswap::reload_changed(&model).unwrap();
            assert_eq!(
                outcome(&report, Q),
                Outcome::ReturnedToOriginal,
                "{label} {mode:?}"
            );
            assert_eq!(current(&model, Q), original);
            assert_eq!(
                model.tensors.get(Q).unwrap().read().swap,
                llama::model::tensors::SwapState::OnOriginal
            );
            // Nothing changed: nothing reported.
            let report = hotswap::reload_changed(&model).unwrap();
            assert!(report.entries.is_empty(), "{report:?}");
        }
    }
}

#[test]
fn same_type_new_bytes_is_written_in_place_without_a_new_generation() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("inplace", &base);
    let model = load_model(&path, two_gpus(), LoadMode::None);
    let new = bytes_for(&base, Q, GgmlType::Q8_0, 99);
    replace(
        &path,
        &variant(&base, &[(Q, Some((GgmlType::Q8_0, new.clone())))]),
    );
    let gen = model.generation.load(Ordering::Acquire);
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::ReloadedInPlace);
    assert_eq!(
        report.entries.len(),
        1,
        "unchanged tensors are not listed: {report:?}"
    );
    assert_eq!(current(&model, Q), (GgmlType::Q8_0, new));
    assert_eq!(model.generation.load(Ordering::Acquire), gen);
}

#[test]
fn type_chain_and_back() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("chain", &base);
    let model = load_model(&path, two_gpus(), LoadMode::Auto);
    let original = current(&model, Q);
    for (i, ty) in [GgmlType::Q4_0, GgmlType::F16, GgmlType::F32, GgmlType::Q8_0]
        .into_iter()
        .enumerate()
    {
        let w = if ty == GgmlType::Q8_0 {
            base.clone()
        } else {
            variant(&base, &[(Q, Some((ty, bytes_for(&base, Q, ty, i as u64))))])
        };
        replace(&path, &w);
        let report = hotswap::reload_changed(&model).unwrap();
        assert!(outcome(&report, Q).reloaded(), "{report:?}");
        assert_eq!(current(&model, Q), file_bytes(&path, Q));
    }
    assert_eq!(current(&model, Q), original);
}

#[test]
fn refused_and_failed_leave_the_tensor_untouched() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("refuse", &base);
    let model = load_model(&path, two_gpus(), LoadMode::Auto);
    let before = current(&model, Q);

    // Shape change: refused; looked at again when the file changes next.
    let w = rewrite(&base, |(name, dims, ty, bytes)| {
        if name == Q {
            let half = bytes[..bytes.len() / 2].to_vec();
            Some((name, vec![dims[0], dims[1] / 2], ty, half))
        } else {
            Some((name, dims, ty, bytes))
        }
    });
    replace(&path, &w);
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Refused);
    assert!(report.entry(Q).unwrap().reason.contains("shape"));
    assert_eq!(current(&model, Q), before);
    assert!(
        hotswap::reload_changed(&model).unwrap().entries.is_empty(),
        "not re-reported"
    );

    // Tensor removed from the file: refused.
    replace(&path, &variant(&base, &[(Q, None)]));
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Refused);
    assert!(report.entry(Q).unwrap().reason.contains("missing"));
    assert_eq!(current(&model, Q), before);

    // Half-written: the header is complete but the data is cut short. The whole file is
    // refused until it changes again (its writer is not done); nothing is touched.
    let b = variant(
        &base,
        &[(
            Q,
            Some((GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 3))),
        )],
    );
    let full = b.to_bytes().unwrap();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &full[..full.len() - 100]).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Failed, "{report:?}");
    assert!(
        report.entry(Q).unwrap().reason.contains("past the end"),
        "{report:?}"
    );
    assert_eq!(current(&model, Q), before);
    // Finishing the write makes it reload.
    std::fs::write(&tmp, &full).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Relocated, "{report:?}");
    assert_eq!(current(&model, Q).0, GgmlType::Q4_0);
    replace(&path, &base);
    hotswap::reload_changed(&model).unwrap();
    assert_eq!(current(&model, Q), before);

    // Truncated into the header: every tensor of the file fails, none changes.
    let snapshot: Vec<_> = model
        .tensors
        .iter()
        .map(|t| current(&model, &t.name))
        .collect();
    std::fs::write(&tmp, &full[..200]).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(
        report.entries.iter().all(|e| e.outcome == Outcome::Failed),
        "{report:?}"
    );
    let after: Vec<_> = model
        .tensors
        .iter()
        .map(|t| current(&model, &t.name))
        .collect();
    assert_eq!(snapshot, after);

    // File removed: reported, untouched.
    std::fs::remove_file(&path).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(
        !report.entries.is_empty() && report.entries.iter().all(|e| e.outcome == Outcome::Failed)
    );
    let after: Vec<_> = model
        .tensors
        .iter()
        .map(|t| current(&model, &t.name))
        .collect();
    assert_eq!(snapshot, after);

    // A good file again: everything reloads.
    replace(&path, &base);
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(
        report.entries.iter().all(|e| e.outcome.reloaded()),
        "{report:?}"
    );
    assert_eq!(current(&model, Q), before);
}

#[test]
fn same_mtime_replacement_is_detected() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("mtime", &base);
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let model = load_model(&path, two_gpus(), LoadMode::None);
    let new = bytes_for(&base, Q, GgmlType::Q8_0, 5);
    // Same size, same mtime (cp -p style): only ctime/inode tell.
    let tmp = path.with_extension("tmp");
    variant(&base, &[(Q, Some((GgmlType::Q8_0, new.clone())))])
        .write_to(&tmp)
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::ReloadedInPlace);
    assert_eq!(current(&model, Q).1, new);
}

#[test]
fn mapped_tensors_survive_in_place_overwrite_and_truncation() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("mapped", &base);
    let model = load_model(
        &path,
        PlacementParams {
            registry: registry(&[]),
            ..Default::default()
        },
        LoadMode::Auto,
    );
    assert!(matches!(
        model.tensors.get(Q).unwrap().read().data,
        TensorData::Mapped { .. }
    ));
    // Overwrite the same inode with a smaller, valid file (a mapping of the old size would
    // fault beyond the new end).
    let small = variant(
        &base,
        &[(
            Q,
            Some((GgmlType::Q4_0, bytes_for(&base, Q, GgmlType::Q4_0, 11))),
        )],
    );
    std::fs::write(&path, small.to_bytes().unwrap()).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(current(&model, Q), file_bytes(&path, Q), "{report:?}");
    // No tensor reads through the stale mapping any more.
    for t in model.tensors.iter() {
        assert!(
            !matches!(t.read().data, TensorData::Mapped { .. }),
            "{} still mapped",
            t.name
        );
        assert_eq!(current(&model, &t.name), file_bytes(&path, &t.name));
    }
}

/// A MoE model whose expert tensors are row-split across three virtual GPUs, with n_ff a
/// multiple of 256 so that K-quant (256) and Q8_0 (32) partitions differ.
fn moe_rows(dir: &Dir) -> (PathBuf, GgufWriter, PlacementParams) {
    let opts = TinyLlamaOpts {
        n_embd: 256,
        n_ff: 1024,
        n_expert: 2,
        n_expert_used: 1,
        n_layer: 1,
        n_vocab: 64,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    };
    let base = tiny_llama(&opts).unwrap();
    let path = dir.0.join("moe.gguf");
    base.write_to(&path).unwrap();
    let mut split = [0f32; 16];
    split[..3].copy_from_slice(&[0.3, 0.3, 0.4]);
    let placement = PlacementParams {
        registry: registry(&[64 << 20, 64 << 20, 64 << 20]),
        split_mode: SplitMode::Row,
        tensor_split: Some(split),
        ..Default::default()
    };
    (path, base, placement)
}

fn partition(model: &Model, name: &str) -> Vec<(usize, u64, u64)> {
    model.tensor_info(name).unwrap().rows
}

const GATE: &str = "blk.0.ffn_gate_exps.weight";
const UP: &str = "blk.0.ffn_up_exps.weight";
const DOWN: &str = "blk.0.ffn_down_exps.weight";

#[test]
fn row_split_moe_family_resyncs_on_block_size_change() {
    let dir = tempdir("moe");
    let (path, base, placement) = moe_rows(&dir);
    let model = load_model(&path, placement, LoadMode::None);
    let p0 = partition(&model, GATE);
    assert_eq!(p0.len(), 3, "{p0:?}");
    assert!(p0.iter().all(|&(_, first, _)| first % 32 == 0));
    assert_eq!(partition(&model, UP), p0);
    assert_eq!(partition(&model, DOWN), p0);
    let originals: Vec<_> = [GATE, UP, DOWN]
        .iter()
        .map(|n| current(&model, n))
        .collect();

    // gate -> Q4_K (block 256): the whole family moves to a 256-rounded partition.
    let q4k = bytes_for(&base, GATE, GgmlType::Q4_K, 1);
    replace(
        &path,
        &variant(&base, &[(GATE, Some((GgmlType::Q4_K, q4k.clone())))]),
    );
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, GATE), Outcome::Relocated, "{report:?}");
    let p1 = partition(&model, GATE);
    assert!(p1.iter().all(|&(_, first, _)| first % 256 == 0), "{p1:?}");
    assert_ne!(p1, p0);
    assert_eq!(partition(&model, UP), p1, "siblings share the partition");
    assert_eq!(partition(&model, DOWN), p1);
    assert_eq!(current(&model, GATE), (GgmlType::Q4_K, q4k.clone()));
    assert_eq!(current(&model, UP), originals[1], "sibling bytes intact");
    assert_eq!(current(&model, DOWN), originals[2], "sibling bytes intact");

    // up -> Q6_K as well, then gate returns to Q8_0: up's swap must not be undone, and the
    // family keeps one partition valid for Q6_K (256).
    let q6k = bytes_for(&base, UP, GgmlType::Q6_K, 2);
    replace(
        &path,
        &variant(
            &base,
            &[
                (GATE, Some((GgmlType::Q4_K, q4k))),
                (UP, Some((GgmlType::Q6_K, q6k.clone()))),
            ],
        ),
    );
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, UP), Outcome::Relocated, "{report:?}");
    replace(
        &path,
        &variant(&base, &[(UP, Some((GgmlType::Q6_K, q6k.clone())))]),
    );
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(outcome(&report, GATE).reloaded(), "{report:?}");
    assert_eq!(current(&model, GATE), originals[0]);
    assert_eq!(
        current(&model, UP),
        (GgmlType::Q6_K, q6k),
        "sibling's swap kept"
    );
    assert_eq!(partition(&model, GATE), partition(&model, UP));
    assert_eq!(partition(&model, DOWN), partition(&model, UP));
    assert!(partition(&model, UP).iter().all(|&(_, f, _)| f % 256 == 0));

    // Everything back: original partitions, original bytes.
    replace(&path, &base);
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(
        report.entries.iter().all(|e| e.outcome.reloaded()),
        "{report:?}"
    );
    for (n, o) in [GATE, UP, DOWN].iter().zip(&originals) {
        assert_eq!(&current(&model, n), o, "{n}");
        assert_eq!(partition(&model, n), p0, "{n}");
    }
}

#[test]
fn full_virtual_gpu_falls_back_to_cpu_and_returns() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q4_0)).unwrap();
    let (_dir, path) = setup("full", &base);
    let total: u64 = base.tensors().iter().map(|t| t.nbytes).sum();
    // Room for the model plus a little: an F32 copy of one matrix does not fit.
    let placement = PlacementParams {
        registry: registry(&[total + 1024]),
        ..Default::default()
    };
    let model = load_model(&path, placement, LoadMode::None);
    let before = current(&model, Q);
    replace(
        &path,
        &variant(
            &base,
            &[(
                Q,
                Some((GgmlType::F32, bytes_for(&base, Q, GgmlType::F32, 4))),
            )],
        ),
    );
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::CpuFallback, "{report:?}");
    assert_eq!(report.entry(Q).unwrap().device, "CPU");
    assert_eq!(current(&model, Q), file_bytes(&path, Q));
    replace(&path, &base);
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::ReturnedToOriginal);
    assert_eq!(current(&model, Q), before);
    assert_eq!(report.entry(Q).unwrap().device, "VGPU0");
}

#[test]
fn tensor_set_and_reload_from_file() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (dir, path) = setup("set", &base);
    let model = load_model(&path, two_gpus(), LoadMode::None);
    let data = bytes_for(&base, Q, GgmlType::F16, 8);
    let report = hotswap::tensor_set(&model, Q, GgmlType::F16.id() as i32, &data).unwrap();
    assert!(outcome(&report, Q).reloaded());
    assert_eq!(current(&model, Q), (GgmlType::F16, data.clone()));
    let report = hotswap::tensor_set(&model, Q, GgmlType::F16.id() as i32, &data[1..]).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Refused);
    assert!(hotswap::tensor_set(&model, "nope", 0, &data).is_err());

    // Another checkpoint with every tensor as F16.
    let other = dir.0.join("other.gguf");
    tiny_llama(&TinyLlamaOpts::with_type(GgmlType::F16))
        .unwrap()
        .write_to(&other)
        .unwrap();
    let report = hotswap::reload_from_file(&model, &other).unwrap();
    assert_eq!(report.reloaded(), report.entries.len(), "{report:?}");
    for t in model.tensors.iter() {
        assert_eq!(
            current(&model, &t.name),
            file_bytes(&other, &t.name),
            "{}",
            t.name
        );
    }
}

#[test]
fn disabled_gate_is_a_no_op() {
    let base = tiny_llama(&TinyLlamaOpts::default()).unwrap();
    let (_dir, path) = setup("gate", &base);
    let model = load(
        ModelSource::Path(path.clone()),
        LoadOptions {
            hotswap: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(model.hotswap.is_none());
    assert!(matches!(
        hotswap::reload_changed(&model),
        Err(hotswap::HotSwapError::Disabled)
    ));
    for v in ["", "0", "false", "OFF", " off "] {
        assert!(!hotswap::is_enabling_value(v), "{v:?}");
    }
    for v in ["1", "yes", "true", "on", "anything"] {
        assert!(hotswap::is_enabling_value(v), "{v:?}");
    }
}

#[test]
fn readers_never_see_a_torn_tensor() {
    let base = tiny_llama(&TinyLlamaOpts {
        n_embd: 256,
        n_ff: 512,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    })
    .unwrap();
    let (_dir, path) = setup("threads", &base);
    let placement = PlacementParams {
        split_mode: SplitMode::Row,
        ..two_gpus()
    };
    let model = Arc::new(load_model(&path, placement, LoadMode::None));
    let a = current(&model, Q);
    let b_bytes = bytes_for(&base, Q, GgmlType::Q4_0, 21);
    let b = variant(&base, &[(Q, Some((GgmlType::Q4_0, b_bytes.clone())))]);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (model, stop, a, b_bytes) = (
                Arc::clone(&model),
                Arc::clone(&stop),
                a.clone(),
                b_bytes.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let got = current(&model, Q);
                    assert!(
                        got == a || got == (GgmlType::Q4_0, b_bytes.clone()),
                        "torn read"
                    );
                    n += 1;
                }
                n
            })
        })
        .collect();
    for i in 0..100 {
        replace(&path, if i % 2 == 0 { &b } else { &base });
        let report = hotswap::reload_changed(&model).unwrap();
        assert!(outcome(&report, Q).reloaded());
    }
    // Two reloads at once serialize (both succeed, no deadlock).
    let m2 = Arc::clone(&model);
    let other = std::thread::spawn(move || hotswap::reload_changed(&m2).unwrap());
    hotswap::reload_changed(&model).unwrap();
    other.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// Tests that measure the process's memory run one at a time.
fn memory_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[test]
fn oscillation_keeps_memory_bounded() {
    let _alone = memory_test_lock();
    let dir = tempdir("osc");
    let path = dir.0.join("m.gguf");
    let opts = TinyLlamaOpts {
        n_embd: 512,
        n_ff: 1024,
        n_layer: 1,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    };
    let base = tiny_llama(&opts).unwrap();
    base.write_to(&path).unwrap();
    let name = "blk.0.ffn_up.weight";
    let b = variant(
        &base,
        &[(
            name,
            Some((GgmlType::F32, bytes_for(&base, name, GgmlType::F32, 9))),
        )],
    );
    let (a_file, b_file) = (dir.0.join("a.gguf"), dir.0.join("b.gguf"));
    base.write_to(&a_file).unwrap();
    b.write_to(&b_file).unwrap();
    let placement = PlacementParams {
        split_mode: SplitMode::Row,
        ..two_gpus()
    };
    let model = load_model(&path, placement.clone(), LoadMode::None);
    let gpu_used = |m: &Model| -> u64 {
        let r = m.devices.as_ref().unwrap().registry;
        r.gpus().map(|d| d.used()).sum()
    };
    let mut rss = Vec::new();
    let mut used = Vec::new();
    for cycle in 1..=1000 {
        let src = if cycle % 2 == 1 { &b_file } else { &a_file };
        let tmp = dir.0.join("next.gguf");
        std::fs::copy(src, &tmp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let report = hotswap::reload_changed(&model).unwrap();
        assert!(outcome(&report, name).reloaded(), "{report:?}");
        if [2, 10, 100, 1000].contains(&cycle) {
            rss.push(rss_bytes());
            used.push(gpu_used(&model));
        }
    }
    let f32_bytes = (512 * 1024 * 4) as u64;
    assert!(
        used.windows(2).all(|w| w[0] == w[1]),
        "device memory grows: {used:?}"
    );
    assert!(rss[3] < rss[0] + 4 * f32_bytes, "RSS grows: {rss:?}");
}

/// Runs `f` on a thread and waits at most a minute for it: a call that blocks (a FIFO opened
/// for reading) fails the test instead of hanging it.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} blocked"))
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn fifo_is_never_opened_for_reading() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    for mode in [LoadMode::Auto, LoadMode::None] {
        let (dir, path) = setup(&format!("fifo-{mode:?}"), &base);
        let model = Arc::new(load_model(
            &path,
            PlacementParams {
                registry: registry(&[]),
                ..Default::default()
            },
            mode,
        ));
        let before = current(&model, Q);
        std::fs::remove_file(&path).unwrap();
        mkfifo(&path);
        let m = Arc::clone(&model);
        let report = finishes("reload of a FIFO", move || {
            hotswap::reload_changed(&m).unwrap()
        });
        let entry = report.entry(Q).unwrap();
        assert_eq!(entry.outcome, Outcome::Failed, "{report:?}");
        assert!(entry.reason.contains("not a regular file"), "{report:?}");
        assert_eq!(current(&model, Q), before);
        // Nothing changed since: the FIFO is not looked at again.
        let m = Arc::clone(&model);
        let again = finishes("second reload", move || {
            hotswap::reload_changed(&m).unwrap()
        });
        assert!(again.entries.is_empty(), "{again:?}");
        let (m, fifo) = (Arc::clone(&model), path.clone());
        let err = finishes("reload_from_file of a FIFO", move || {
            hotswap::reload_from_file(&m, &fifo)
                .map(|_| ())
                .unwrap_err()
        });
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let fifo = path.clone();
        let err = finishes("load of a FIFO", move || {
            load(ModelSource::Path(fifo), LoadOptions::default())
                .map(|_| ())
                .unwrap_err()
        });
        assert!(err.to_string().contains("not a regular file"), "{err}");
        // A regular file put back is reloaded.
        std::fs::remove_file(&path).unwrap();
        let b = variant(
            &base,
            &[(
                Q,
                Some((GgmlType::Q8_0, bytes_for(&base, Q, GgmlType::Q8_0, 5))),
            )],
        );
        replace(&path, &b);
        let report = hotswap::reload_changed(&model).unwrap();
        assert!(outcome(&report, Q).reloaded(), "{report:?}");
        assert_eq!(current(&model, Q), file_bytes(&path, Q));
        drop(dir);
    }
}

fn rss_anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

fn mapped_count(model: &Model) -> usize {
    model
        .tensors
        .iter()
        .filter(|t| matches!(t.read().data, TensorData::Mapped { .. }))
        .count()
}

#[test]
fn metadata_only_change_keeps_mappings_and_memory() {
    let _alone = memory_test_lock();
    let opts = TinyLlamaOpts {
        n_embd: 512,
        n_ff: 4096,
        n_layer: 2,
        ..TinyLlamaOpts::with_type(GgmlType::F32)
    };
    let base = tiny_llama(&opts).unwrap();
    let (_dir, path) = setup("metadata-only", &base);
    let model = load_model(
        &path,
        PlacementParams {
            registry: registry(&[]),
            ..Default::default()
        },
        LoadMode::Auto,
    );
    let n = model.tensors.len();
    assert_eq!(mapped_count(&model), n);
    let model_bytes = std::fs::metadata(&path).unwrap().len();
    let rss0 = rss_anon_bytes();
    // chmod to the same mode: only the ctime moves.
    let perms = std::fs::metadata(&path).unwrap().permissions();
    std::fs::set_permissions(&path, perms).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(report.entries.is_empty(), "{report:?}");
    assert_eq!(mapped_count(&model), n, "chmod moved mapped tensors");
    // touch: the mtime moves too.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
    drop(f);
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(report.entries.is_empty(), "{report:?}");
    assert_eq!(mapped_count(&model), n, "touch moved mapped tensors");
    let grown = rss_anon_bytes().saturating_sub(rss0);
    assert!(
        grown < model_bytes / 2,
        "anonymous memory grew by {grown} bytes for a {model_bytes}-byte model"
    );
    for t in model.tensors.iter() {
        assert_eq!(current(&model, &t.name), file_bytes(&path, &t.name));
    }

    // Renamed into place with one tensor changed: the old inode stays intact under the
    // mapping, so the unchanged tensors keep reading through it.
    let b = variant(
        &base,
        &[(
            Q,
            Some((GgmlType::F32, bytes_for(&base, Q, GgmlType::F32, 3))),
        )],
    );
    replace(&path, &b);
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(report.entries.len(), 1, "{report:?}");
    assert!(outcome(&report, Q).reloaded());
    assert_eq!(mapped_count(&model), n - 1);
    for t in model.tensors.iter() {
        assert_eq!(current(&model, &t.name), file_bytes(&path, &t.name));
    }

    // The new inode rewritten in place: the mapped tensors read the old inode, which nothing
    // wrote, so they stay (an in-place rewrite of the loaded inode moves them: see
    // mapped_tensors_survive_in_place_overwrite_and_truncation and ext_hotswap.c).
    let c = variant(
        &b,
        &[(
            Q,
            Some((GgmlType::F32, bytes_for(&base, Q, GgmlType::F32, 4))),
        )],
    );
    let fresh = base_path_sibling(&path);
    replace(&fresh, &c);
    std::fs::write(&path, std::fs::read(&fresh).unwrap()).unwrap();
    let report = hotswap::reload_changed(&model).unwrap();
    assert!(outcome(&report, Q).reloaded(), "{report:?}");
    assert_eq!(mapped_count(&model), n - 1);
    for t in model.tensors.iter() {
        assert_eq!(current(&model, &t.name), file_bytes(&path, &t.name));
    }
}

fn base_path_sibling(path: &Path) -> PathBuf {
    path.with_extension("other")
}

/// Q8_0 bytes for `name` whose first block scale is a NaN.
fn q8_0_with_nan(base: &GgufWriter, name: &str) -> Vec<u8> {
    let mut b = bytes_for(base, name, GgmlType::Q8_0, 21);
    for block in b.chunks_exact_mut(34) {
        block[0..2].copy_from_slice(&0x3c00u16.to_le_bytes()); // 1.0
    }
    b[0..2].copy_from_slice(&0x7e00u16.to_le_bytes()); // NaN
    b
}

#[test]
fn check_tensors_validates_swapped_bytes() {
    let base = tiny_llama(&TinyLlamaOpts::with_type(GgmlType::Q8_0)).unwrap();
    let (_dir, path) = setup("check-tensors", &base);
    let bad = q8_0_with_nan(&base, Q);
    let load_checked = |check_tensors| {
        load(
            ModelSource::Path(path.clone()),
            LoadOptions {
                load_mode: LoadMode::None,
                placement: PlacementParams {
                    registry: registry(&[]),
                    ..Default::default()
                },
                hotswap: true,
                check_tensors,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let model = load_checked(true);
    let before = current(&model, Q);
    let report = hotswap::tensor_set(&model, Q, GgmlType::Q8_0.id() as i32, &bad).unwrap();
    let entry = report.entry(Q).unwrap();
    assert_eq!(entry.outcome, Outcome::Refused, "{report:?}");
    assert!(entry.reason.contains("non-finite"), "{report:?}");
    assert_eq!(current(&model, Q), before);
    replace(
        &path,
        &variant(&base, &[(Q, Some((GgmlType::Q8_0, bad.clone())))]),
    );
    let report = hotswap::reload_changed(&model).unwrap();
    assert_eq!(outcome(&report, Q), Outcome::Refused, "{report:?}");
    assert_eq!(current(&model, Q), before);
    // A fresh load with check_tensors refuses the same file...
    assert!(load(
        ModelSource::Path(path.clone()),
        LoadOptions {
            check_tensors: true,
            ..Default::default()
        }
    )
    .is_err());
    // ...and without check_tensors the bytes are taken as they are.
    replace(&path, &base);
    let unchecked = load_checked(false);
    let report = hotswap::tensor_set(&unchecked, Q, GgmlType::Q8_0.id() as i32, &bad).unwrap();
    assert!(outcome(&report, Q).reloaded(), "{report:?}");
    assert_eq!(current(&unchecked, Q).1, bad);
}
