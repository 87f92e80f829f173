//! A model on CUDA devices: load to GPU (LAYER and ROW across the CUDA devices), read back
//! equal to the file, hot-swap a tensor's type and back. Skips (with the reason) where CUDA is
//! not available; scripts/test-cuda-mock.sh runs it against a fake driver, a GPU machine
//! against the real one.

use llama::device::{cuda, Registry, SplitMode};
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, Gguf};
use llama::hotswap;
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::LoadMode;

fn skip() -> bool {
    match cuda::availability() {
        Ok(()) => false,
        Err(reason) => {
            eprintln!("skipping: {reason}");
            true
        }
    }
}

/// `tiny_llama(opts)` written to a file in a fresh temporary directory (removed on drop).
fn model_file(opts: &TinyLlamaOpts) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    tiny_llama(opts).unwrap().write_to(&path).unwrap();
    (dir, path)
}

#[test]
fn model_on_cuda_reads_back_and_swaps() {
    if skip() {
        return;
    }
    let (_dir, path) = model_file(&TinyLlamaOpts {
        n_embd: 256,
        n_ff: 512,
        ..TinyLlamaOpts::with_type(GgmlType::Q8_0)
    });
    let file = std::fs::read(&path).unwrap();
    let gguf = Gguf::parse(&file).unwrap();
    let registry = Registry::global();
    assert!(registry.devices()[0].name().starts_with("CUDA"));
    for (split_mode, mode) in [
        (SplitMode::Layer, LoadMode::Auto),
        (SplitMode::Row, LoadMode::None),
    ] {
        let model = load(
            ModelSource::Path(path.clone()),
            LoadOptions {
                load_mode: mode,
                hotswap: true,
                placement: PlacementParams {
                    split_mode,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
        for t in gguf.tensors() {
            let off = t.abs_offset(&gguf) as usize;
            assert_eq!(
                hotswap::current_bytes(&model, t.name).unwrap(),
                &file[off..off + t.nbytes as usize],
                "{}",
                t.name
            );
        }
        let q = "blk.1.attn_q.weight";
        let info = model.tensor_info(q).unwrap();
        assert!(
            model.device_name(info.device as usize).starts_with("CUDA"),
            "{info:?}"
        );
        let original = hotswap::current_bytes(&model, q).unwrap();
        let f16: Vec<u8> = (0..256 * 256 * 2).map(|i| (i * 7 % 251) as u8).collect();
        let report = hotswap::tensor_set(&model, q, GgmlType::F16.id() as i32, &f16).unwrap();
        assert!(report.entry(q).unwrap().outcome.reloaded(), "{report:?}");
        assert_eq!(hotswap::current_bytes(&model, q).unwrap(), f16);
        let report = hotswap::tensor_set(&model, q, GgmlType::Q8_0.id() as i32, &original).unwrap();
        assert_eq!(
            report.entry(q).unwrap().outcome,
            hotswap::Outcome::ReturnedToOriginal
        );
        assert_eq!(hotswap::current_bytes(&model, q).unwrap(), original);
    }
}

/// The engine computes on the CPU only: a model with tensors on a CUDA device gets no context
/// (one clear error naming the tensor), never a crash or wrong results.
#[test]
fn engine_refuses_a_model_on_cuda() {
    if skip() {
        return;
    }
    let (_dir, path) = model_file(&TinyLlamaOpts::default());
    let model = load(ModelSource::Path(path), LoadOptions::default()).unwrap();
    let err = llama::context::Context::new(
        std::sync::Arc::new(model),
        &llama::context::ContextParams::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("CUDA") && err.contains("tensor '"), "{err}");
}

/// Tensors of several staging chunks (12 MiB F16) are read from the file straight into a CUDA
/// device's staging buffers (mapped, unmapped, with check_tensors, and with CPU tensors
/// between them): every tensor holds the file's bytes on the device it was placed on.
#[test]
fn large_tensors_upload_straight_from_the_file() {
    if skip() {
        return;
    }
    let (_dir, path) = model_file(&TinyLlamaOpts {
        n_layer: 2,
        n_embd: 1024,
        n_ff: 6144,
        ..TinyLlamaOpts::with_type(GgmlType::F16)
    });
    let file = std::fs::read(&path).unwrap();
    let gguf = Gguf::parse(&file).unwrap();
    let largest = gguf.tensors().iter().map(|t| t.nbytes).max().unwrap();
    assert!(
        largest > 2 * llama::device::cuda::STAGING_BYTES as u64,
        "{largest}"
    );
    // With `ffn_up=CPU`, CPU tensors follow device tensors in the file: an arena (NONE)
    // skips the device tensors' bytes and must still read every CPU tensor's.
    for (mode, check_tensors, on_cpu) in [
        (LoadMode::Auto, false, None),
        (LoadMode::Auto, true, None),
        (LoadMode::None, false, None),
        (LoadMode::None, true, None),
        (LoadMode::None, false, Some("ffn_up")),
        (LoadMode::Auto, false, Some("ffn_up")),
    ] {
        load_and_compare(&path, mode, check_tensors, on_cpu);
    }
}

/// Loads `path` with every layer on the GPU except tensors whose name contains `on_cpu`
/// (and the input embedding, as upstream), then checks each tensor's device and that it
/// holds the file's bytes.
fn load_and_compare(
    path: &std::path::Path,
    mode: LoadMode,
    check_tensors: bool,
    on_cpu: Option<&str>,
) {
    let file = std::fs::read(path).unwrap();
    let gguf = Gguf::parse(&file).unwrap();
    let cpu = Registry::global().cpu().index();
    let overrides = on_cpu.map(|p| (p.to_string(), cpu)).into_iter().collect();
    let what = format!("{mode:?} check={check_tensors} on_cpu={on_cpu:?}");
    let model = load(
        ModelSource::Path(path.to_path_buf()),
        LoadOptions {
            load_mode: mode,
            check_tensors,
            placement: PlacementParams {
                overrides,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    for t in gguf.tensors() {
        let off = t.abs_offset(&gguf) as usize;
        let info = model.tensor_info(t.name).unwrap();
        let expect_cpu =
            t.name == "token_embd.weight" || on_cpu.is_some_and(|p| t.name.contains(p));
        assert_eq!(
            model.device_name(info.device as usize).starts_with("CUDA"),
            !expect_cpu,
            "{what}: {} on {info:?}",
            t.name
        );
        assert!(
            hotswap::current_bytes(&model, t.name).unwrap() == file[off..off + t.nbytes as usize],
            "{what}: {} differs from the file",
            t.name
        );
    }
}

/// CUDA compute behind its switch: off, a model on a GPU is refused as before; on, against
/// the mock driver told to refuse launches (`MOCK_CUDA_REFUSE_LAUNCH`), the context is made
/// (kernels compiled by NVRTC, module loaded, every kernel found) and a decode fails with the
/// driver's error and a return code, never a crash. The results: tests/cuda_compute.rs (the
/// mock's emulated kernels, and a real GPU).
#[test]
fn cuda_compute_switch_and_launch_failure() {
    if skip() {
        return;
    }
    if std::env::var_os("MOCK_CUDA_DEVICES").is_none() {
        eprintln!("skipping: a real driver (tests/cuda_compute.rs covers it)");
        return;
    }
    let (_dir, path) = model_file(&TinyLlamaOpts::default());
    let model = std::sync::Arc::new(load(ModelSource::Path(path), LoadOptions::default()).unwrap());
    let params = llama::context::ContextParams::default();
    std::env::remove_var("LLAMA_HOTSWAP_CUDA_COMPUTE");
    let err = llama::context::Context::new(model.clone(), &params)
        .unwrap_err()
        .to_string();
    assert!(err.contains("LLAMA_HOTSWAP_CUDA_COMPUTE=1"), "{err}");
    if cuda::nvrtc_version().is_err() {
        eprintln!("skipping the switched-on half: no NVRTC");
        return;
    }
    std::env::set_var("LLAMA_HOTSWAP_CUDA_COMPUTE", "1");
    let made = llama::context::Context::new(model.clone(), &params);
    std::env::remove_var("LLAMA_HOTSWAP_CUDA_COMPUTE");
    if cuda::probe().len() > 1 {
        // LAYER split over two GPUs: one GPU per context for now, said clearly
        let err = made.unwrap_err().to_string();
        assert!(err.contains("one GPU per context"), "{err}");
        return;
    }
    let ctx = made.unwrap();
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend_from_slice(&[1, 2, 3]);
    }
    std::env::set_var("MOCK_CUDA_REFUSE_LAUNCH", "1");
    let code = ctx.decode();
    std::env::remove_var("MOCK_CUDA_REFUSE_LAUNCH");
    assert_eq!(code, -3, "a refused launch fails the decode");
}
