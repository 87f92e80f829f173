//! The CUDA executor on a real GPU (skips, saying why, without one; scripts/gpu-check.sh runs
//! it on a lent GPU machine): SmolLM2-135M (Q4_1 and the Q8_0 and F16 files made from it),
//! upstream's gemma3 and qwen3moe fixtures (F32, Q8_0, Q4_1) and tiny llama / MoE models, each
//! on the GPU against the CPU engine: logits within KL 1e-3,
//! greedy text identical, run-to-run identical; hybrid placements (half the layers, experts on
//! the CPU); hot-swap on the GPU bit-identical to a fresh load; tg / pp figures.
//!
//! `LLAMA_HOTSWAP_SMOLLM2`: the Q4_1 file (default: the test cache's copy);
//! `LLAMA_HOTSWAP_GPU_FIXTURES`: the folder with `gemma3-dense.gguf` and `qwen3moe-moe.gguf`
//! (default: the test cache's test-llama-archs folder).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use llama::context::{Context, ContextParams};
use llama::device::{cuda, Registry};
use llama::gguf::fixtures::{tiny_llama, tiny_moe, TinyLlamaOpts};
use llama::gguf::{GgmlType, Gguf, GgufWriter};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::Model;

fn gpu_reason() -> Option<String> {
    if let Err(r) = cuda::availability() {
        return Some(r);
    }
    cuda::compute_available().err()
}

fn load_on(
    path: &Path,
    n_gpu_layers: i32,
    overrides: Vec<(String, usize)>,
    hotswap: bool,
) -> Arc<Model> {
    Arc::new(
        load(
            ModelSource::Path(path.to_path_buf()),
            LoadOptions {
                hotswap,
                placement: PlacementParams {
                    n_gpu_layers,
                    overrides,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap(),
    )
}

fn params(n_ctx: u32, n_batch: u32) -> ContextParams {
    ContextParams {
        n_ctx,
        n_batch,
        n_ubatch: n_batch,
        n_seq_max: 1,
        n_threads: 8,
        n_threads_batch: 8,
        ..ContextParams::default()
    }
}

/// Decodes `tokens` at positions `p0..` of sequence 0; logits of every token (or the last).
fn decode(ctx: &Context, tokens: &[i32], p0: i32, all: bool) -> (i32, Vec<f32>) {
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend_from_slice(tokens);
        e.raw.has_pos = true;
        e.raw.pos.extend((0..tokens.len() as i32).map(|i| p0 + i));
        e.raw.has_seq = true;
        e.raw
            .seq_flat
            .extend(std::iter::repeat(0).take(tokens.len()));
        e.raw.seq_n.extend(std::iter::repeat(1).take(tokens.len()));
        e.raw.has_output = true;
        e.raw
            .output
            .extend((0..tokens.len()).map(|i| all || i + 1 == tokens.len()));
    }
    let code = ctx.decode();
    let logits = ctx.engine().logits.clone();
    (code, logits)
}

/// The largest KL(p || q) over rows of `nv` logits, p from `a`, q from `b`.
fn max_kl(a: &[f32], b: &[f32], nv: usize) -> f64 {
    assert_eq!(a.len(), b.len());
    let logp = |r: &[f32]| {
        let m = r.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let s: f64 = r.iter().map(|&v| (v as f64 - m).exp()).sum();
        r.iter()
            .map(move |&v| v as f64 - m - s.ln())
            .collect::<Vec<f64>>()
    };
    a.chunks(nv)
        .zip(b.chunks(nv))
        .map(|(x, y)| {
            let (lp, lq) = (logp(x), logp(y));
            lp.iter()
                .zip(&lq)
                .map(|(p, q)| p.exp() * (p - q))
                .sum::<f64>()
        })
        .fold(0.0, f64::max)
}

fn argmax(r: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &v) in r.iter().enumerate() {
        if v > r[best] {
            best = i;
        }
    }
    best as i32
}

/// Greedy continuation of `prompt` for `n` tokens; also (seconds per generated token).
fn greedy(ctx: &Context, prompt: &[i32], n: usize) -> (Vec<i32>, f64) {
    let nv = ctx.n_vocab();
    let (code, l) = decode(ctx, prompt, 0, false);
    assert_eq!(code, 0);
    let mut out = vec![argmax(&l[l.len() - nv..])];
    let t = Instant::now();
    for i in 0..n - 1 {
        let (code, l) = decode(ctx, &out[i..i + 1], (prompt.len() + i) as i32, false);
        assert_eq!(code, 0);
        out.push(argmax(&l[..nv]));
    }
    (out, t.elapsed().as_secs_f64() / (n - 1) as f64)
}

/// A copy of `src` with every weight matrix re-encoded as `ty` (vectors such as norms, and
/// rows whose length is not a multiple of `ty`'s block, kept as they are).
fn retyped(src: &Path, dst: &Path, ty: GgmlType) {
    let bytes = std::fs::read(src).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let mut w = GgufWriter::from_gguf(&gguf);
    let mut out = GgufWriter::new();
    for (k, v) in w.kvs() {
        out.set(k, v.clone());
    }
    for t in gguf.tensors() {
        let data = gguf.tensor_data(t).unwrap();
        let shape = t.shape();
        if t.ggml_type == ty || shape.len() < 2 || shape[0] as u64 % ty.block_size() != 0 {
            out.add_tensor(t.name, t.shape(), t.ggml_type, data.to_vec())
                .unwrap();
            continue;
        }
        let mut values = vec![0.0f32; t.n_elements() as usize];
        llama::kernels::cpu::dequantize_row(t.ggml_type, data, &mut values);
        // llama-quantize's row quantizers (every type, not only the writer's F16/Q8_0/Q4_0)
        let n_per_row = shape[0] as usize;
        let rows = values.len() / n_per_row;
        let mut bytes = vec![0u8; rows * llama::kernels::cpu::row_bytes(ty, n_per_row)];
        llama::kernels::quant::quantize_rows(ty, &values, &mut bytes, n_per_row, None).unwrap();
        out.add_tensor(t.name, &shape, ty, bytes).unwrap();
    }
    w = out;
    w.write_to(dst).unwrap();
}

/// The tiny llama with weights of type `ty` in `dir` (`tiny-<ty>.gguf`): as the fixture writer
/// encodes it (F32, F16, Q4_0, Q8_0), else written in F32 and retyped.
fn tiny_llama_file(dir: &Path, ty: GgmlType) -> PathBuf {
    let p = dir.join(format!("tiny-{ty}.gguf"));
    if let Ok(w) = tiny_llama(&TinyLlamaOpts::with_type(ty)) {
        w.write_to(&p).unwrap();
    } else {
        let f32_path = dir.join("tiny-f32-source.gguf");
        tiny_llama(&TinyLlamaOpts::default())
            .unwrap()
            .write_to(&f32_path)
            .unwrap();
        retyped(&f32_path, &p, ty);
    }
    p
}

/// Tokens of a short English text, found word by word in the vocabulary.
fn prompt_tokens(model: &Model) -> Vec<i32> {
    let text = "The capital of France is Paris and the capital of Germany is Berlin . In the morning the children walk to school and";
    let mut out = Vec::new();
    for (i, word) in text.split(' ').enumerate() {
        let want = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        let found = (0..model.vocab.n_tokens() as i32)
            .find(|&id| llama::tokenizer::piece(&model.vocab, id) == Some(want.as_bytes()));
        if let Some(id) = found {
            out.push(id);
        }
    }
    if out.len() < 8 {
        // no piece table: fixed ids spread over the vocabulary
        let n = model.vocab.n_tokens() as i32;
        out = (1..25).map(|i| (i * 997) % n).collect();
    }
    out
}

fn text_of(model: &Model, tokens: &[i32]) -> String {
    tokens
        .iter()
        .map(|&t| {
            String::from_utf8_lossy(llama::tokenizer::piece(&model.vocab, t).unwrap_or(b"?"))
                .into_owned()
        })
        .collect()
}

struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, ok: bool, what: String) {
        eprintln!("{} {what}", if ok { "PASS" } else { "FAIL" });
        if !ok {
            self.0.push(what);
        }
    }
}

/// The folder of upstream's fixtures: `LLAMA_HOTSWAP_GPU_FIXTURES`, else the test cache's.
fn fixtures_dir() -> Option<PathBuf> {
    let p = std::env::var_os("LLAMA_HOTSWAP_GPU_FIXTURES")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".cache/llama-hotswap/fixtures/llama-archs-s1"))
        })?;
    p.is_dir().then_some(p)
}

fn smollm2() -> Option<PathBuf> {
    let p = std::env::var_os("LLAMA_HOTSWAP_SMOLLM2")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(
                PathBuf::from(home)
                    .join(".cache/llama-hotswap/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
            )
        })?;
    p.exists().then_some(p)
}

/// GPU against CPU on one file: KL, greedy text, run-to-run; hybrid (`hybrid`: n_gpu_layers
/// and overrides) against CPU too.
fn compare(
    c: &mut Checks,
    label: &str,
    path: &Path,
    hybrids: &[(&str, i32, Vec<(String, usize)>)],
    n_gen: usize,
) {
    let cpu = load_on(path, 0, Vec::new(), false);
    let gpu = load_on(path, -1, Vec::new(), false);
    let mut prompt = prompt_tokens(&cpu);
    if prompt.len() < 8 {
        prompt = (1..25)
            .map(|i| (i * 37) % cpu.vocab.n_tokens() as i32)
            .collect();
    }
    let nv = cpu.vocab.n_tokens() as usize;
    let cctx = Context::new(cpu.clone(), &params(512, 512)).unwrap();
    let gctx = match Context::new(gpu.clone(), &params(512, 512)) {
        Ok(c) => c,
        Err(e) => {
            c.check(false, format!("{label}: GPU context: {e}"));
            return;
        }
    };
    let (cc, cl) = decode(&cctx, &prompt, 0, true);
    let (gc, gl) = decode(&gctx, &prompt, 0, true);
    c.check(
        cc == 0 && gc == 0,
        format!("{label}: prompt decodes (cpu {cc}, gpu {gc})"),
    );
    if gc != 0 {
        return;
    }
    let kl = max_kl(&cl, &gl, nv);
    c.check(
        kl <= 1e-3,
        format!(
            "{label}: prompt of {} tokens, max KL(cpu||gpu) {kl:.3e} <= 1e-3",
            prompt.len()
        ),
    );
    let gctx2 = Context::new(gpu.clone(), &params(512, 512)).unwrap();
    let (_, gl2) = decode(&gctx2, &prompt, 0, true);
    c.check(
        gl2 == gl,
        format!("{label}: run-to-run identical logits on the GPU"),
    );
    drop(gctx2);
    let (ct, _) = greedy(
        &Context::new(cpu.clone(), &params(512, 512)).unwrap(),
        &prompt,
        n_gen,
    );
    let (gt, _) = greedy(
        &Context::new(gpu.clone(), &params(512, 512)).unwrap(),
        &prompt,
        n_gen,
    );
    c.check(
        ct == gt,
        format!(
            "{label}: greedy {n_gen} tokens identical: cpu {ct:?} / gpu {gt:?} ({:?})",
            text_of(&gpu, &gt)
        ),
    );
    for (name, ngl, ov) in hybrids {
        let hy = load_on(path, *ngl, ov.clone(), false);
        match Context::new(hy, &params(512, 512)) {
            Ok(h) => {
                let (hc, hl) = decode(&h, &prompt, 0, true);
                let kl = if hc == 0 {
                    max_kl(&cl, &hl, nv)
                } else {
                    f64::INFINITY
                };
                c.check(
                    hc == 0 && kl <= 1e-3,
                    format!("{label}: hybrid {name}: code {hc}, max KL {kl:.3e}"),
                );
            }
            Err(e) => c.check(false, format!("{label}: hybrid {name}: {e}")),
        }
    }
}

/// Hot-swap on the GPU: a model loaded from a copy of `first` (every weight on the GPU), the
/// copy replaced by `second` and reloaded: the next decode equals a fresh load of `second`
/// bit for bit (and differs from the first run); swapped back, it equals the first run.
/// Returns the prompt it used.
fn hot_swap_on_the_gpu(c: &mut Checks, dir: &Path, first: &Path, second: &Path) -> Vec<i32> {
    let swap_path = dir.join("swap.gguf");
    std::fs::copy(first, &swap_path).unwrap();
    let model = load_on(&swap_path, -1, Vec::new(), true);
    let prompt = prompt_tokens(&model);
    let ctx = Context::new(model.clone(), &params(512, 512)).unwrap();
    let (_, first_l) = decode(&ctx, &prompt, 0, true);
    std::fs::copy(second, &swap_path).unwrap();
    let report = llama::hotswap::reload_changed(&model);
    c.check(
        report.is_ok(),
        format!(
            "hot-swap {} -> {} on the GPU: {:?} tensors",
            first.display(),
            second.display(),
            report
                .as_ref()
                .map(|r| r.entries.len())
                .map_err(|e| e.to_string())
        ),
    );
    ctx.engine().kv.clear(true);
    let (_, swapped) = decode(&ctx, &prompt, 0, true);
    let fresh = Context::new(load_on(second, -1, Vec::new(), false), &params(512, 512)).unwrap();
    let (_, fresh_l) = decode(&fresh, &prompt, 0, true);
    c.check(
        swapped != first_l && swapped == fresh_l,
        "hot-swap on the GPU: bit-identical to a fresh load of the new file".into(),
    );
    std::fs::copy(first, &swap_path).unwrap();
    let _ = llama::hotswap::reload_changed(&model);
    ctx.engine().kv.clear(true);
    let (_, back) = decode(&ctx, &prompt, 0, true);
    c.check(
        back == first_l,
        "hot-swap back on the GPU: bit-identical to the first run".into(),
    );
    prompt
}

#[test]
fn cuda_compute_matches_the_cpu_engine() {
    if let Some(r) = gpu_reason() {
        eprintln!("skipping: {r}");
        return;
    }
    if under_the_mock() {
        eprintln!(
            "skipping: the mock driver (emulated_cuda_compute_matches_the_cpu_engine runs there)"
        );
        return;
    }
    std::env::set_var("LLAMA_HOTSWAP_CUDA_COMPUTE", "1");
    let dir = tempfile::tempdir().unwrap();
    let cpu_index = Registry::global().cpu().index();
    let mut c = Checks(Vec::new());

    // tiny fixtures: every weight type of the kernels, and a MoE (MUL_MAT_ID, top-k)
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        let p = tiny_llama_file(dir.path(), ty);
        compare(
            &mut c,
            &format!("tiny llama {ty}"),
            &p,
            &[("1 layer", 1, Vec::new())],
            8,
        );
    }
    let p = dir.path().join("tiny-moe.gguf");
    tiny_moe(&TinyLlamaOpts::with_type(GgmlType::Q8_0))
        .unwrap()
        .write_to(&p)
        .unwrap();
    compare(
        &mut c,
        "tiny moe Q8_0",
        &p,
        &[("experts on CPU", -1, vec![("exps".to_string(), cpu_index)])],
        8,
    );

    // upstream's random-weight fixtures (test-llama-archs): gemma3 (sliding windows, GELU,
    // q/k norms, post-norms) and qwen3moe (MUL_MAT_ID, top-k routing), F32 as written and
    // retyped to Q8_0, Q4_1, the K-quants and IQ4_XS (256-wide rows); hybrids: half the layers,
    // and qwen3moe's experts on the CPU
    match fixtures_dir() {
        Some(fx) => {
            for (name, moe) in [("gemma3-dense", false), ("qwen3moe-moe", true)] {
                let src = fx.join(format!("{name}.gguf"));
                if !src.exists() {
                    c.check(false, format!("fixture {} is missing", src.display()));
                    continue;
                }
                let n_layer = load_on(&src, 0, Vec::new(), false).hparams.n_layer_all as i32;
                for ty in [
                    GgmlType::F32,
                    GgmlType::Q8_0,
                    GgmlType::Q4_1,
                    GgmlType::Q2_K,
                    GgmlType::Q3_K,
                    GgmlType::Q4_K,
                    GgmlType::Q5_K,
                    GgmlType::Q6_K,
                    GgmlType::IQ4_XS,
                ] {
                    let p = if ty == GgmlType::F32 {
                        src.clone()
                    } else {
                        let p = dir.path().join(format!("{name}-{ty}.gguf"));
                        retyped(&src, &p, ty);
                        p
                    };
                    let mut hybrids = vec![("half the layers on the GPU", n_layer / 2, Vec::new())];
                    if moe {
                        hybrids.push((
                            "experts on the CPU (-ot exps=CPU)",
                            -1,
                            vec![("exps".to_string(), cpu_index)],
                        ));
                    }
                    compare(&mut c, &format!("{name} {ty}"), &p, &hybrids, 16);
                }
            }
        }
        None => eprintln!(
            "fixtures not found (LLAMA_HOTSWAP_GPU_FIXTURES, scripts/upstream-arch-fixtures.sh): gemma3/qwen3moe skipped"
        ),
    }

    let Some(q4_1) = smollm2() else {
        eprintln!("SmolLM2 not found (LLAMA_HOTSWAP_SMOLLM2): fixture checks only");
        assert!(c.0.is_empty(), "failed: {:#?}", c.0);
        return;
    };
    let q8_0 = dir.path().join("smollm2-q8_0.gguf");
    let f16 = dir.path().join("smollm2-f16.gguf");
    let q5_0 = dir.path().join("smollm2-q5_0.gguf");
    retyped(&q4_1, &q8_0, GgmlType::Q8_0);
    retyped(&q4_1, &f16, GgmlType::F16);
    retyped(&q4_1, &q5_0, GgmlType::Q5_0);
    let iq4_nl = dir.path().join("smollm2-iq4_nl.gguf");
    retyped(&q4_1, &iq4_nl, GgmlType::IQ4_NL);
    let n_layer = load_on(&q4_1, 0, Vec::new(), false).hparams.n_layer_all as i32;
    eprintln!("SmolLM2 file {} with {n_layer} layers", q4_1.display());
    for (label, path) in [
        ("SmolLM2 Q4_1", &q4_1),
        ("SmolLM2 Q8_0", &q8_0),
        ("SmolLM2 F16", &f16),
        ("SmolLM2 Q5_0", &q5_0),
        ("SmolLM2 IQ4_NL", &iq4_nl),
    ] {
        compare(
            &mut c,
            label,
            path,
            &[("half the layers on the GPU", n_layer / 2, Vec::new())],
            32,
        );
    }

    // hot-swap on the GPU: Q4_1 -> Q8_0 (every weight retyped) equals a fresh load of Q8_0,
    // and back equals the first run
    let prompt = hot_swap_on_the_gpu(&mut c, dir.path(), &q4_1, &q8_0);

    // figures: tg (128 tokens after a 32-token prompt) and pp (512 tokens in one batch)
    for (label, path) in [("Q4_1", &q4_1), ("Q8_0", &q8_0), ("F16", &f16)] {
        let gpu = load_on(path, -1, Vec::new(), false);
        let ctx = Context::new(gpu.clone(), &params(1024, 512)).unwrap();
        let (_, s) = greedy(&ctx, &prompt, 129);
        let toks: Vec<i32> = (0..512).map(|i| prompt[i % prompt.len()]).collect();
        let ctx = Context::new(gpu, &params(1024, 512)).unwrap();
        decode(&ctx, &toks, 0, false);
        ctx.engine().kv.clear(true);
        let t = Instant::now();
        let (code, _) = decode(&ctx, &toks, 0, false);
        let pp = 512.0 / t.elapsed().as_secs_f64();
        eprintln!(
            "FIGURE SmolLM2-135M {label}: tg {:.1} t/s, pp512 {pp:.0} t/s (code {code})",
            1.0 / s
        );
    }
    assert!(c.0.is_empty(), "failed: {:#?}", c.0);
}

/// Whether the driver is the mock (scripts/test-cuda-mock.sh), whose launches run the kernels'
/// host build (ffi-tests/mock_cuda_kernels.cpp) instead of a GPU.
fn under_the_mock() -> bool {
    std::env::var_os("MOCK_CUDA_DEVICES").is_some()
}

/// The CUDA executor under the mock driver, whose launches run the same kernel source built
/// for the host with an emulated grid (ffi-tests/cuda_host.h): the executor's numbers without
/// a GPU. Tiny llama models in every weight type the kernels take (64-wide rows: F32, F16,
/// Q4_0, Q4_1, Q8_0; 256-wide rows: Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS), a tiny MoE with
/// its experts on the GPU and on the CPU, each against the CPU engine (max KL <= 1e-3, greedy
/// tokens identical, run-to-run identical), a hybrid with one layer on the GPU, a prompt of 80
/// tokens (the CPU's tiled attention), one without flash attention, hot-swap Q4_1 -> Q8_0 -> Q4_1 bit-identical to fresh
/// loads; upstream's gemma3 and qwen3moe fixtures (F32, Q8_0, Q4_1, the K-quants, IQ4_XS; a
/// layer on the GPU, qwen3moe's experts on the CPU) when the cache has them. What the
/// emulation cannot show (the device's own rounding of transcendentals and FMA contraction,
/// races, speed): docs/cuda.md.
#[test]
fn emulated_cuda_compute_matches_the_cpu_engine() {
    if !under_the_mock() {
        eprintln!(
            "skipping: not the mock driver (cuda_compute_matches_the_cpu_engine runs on a GPU)"
        );
        return;
    }
    if let Some(r) = gpu_reason() {
        eprintln!("skipping: {r}");
        return;
    }
    if let Err(e) = cuda::nvrtc_version() {
        eprintln!("skipping: no NVRTC ({e})");
        return;
    }
    if cuda::probe().len() > 1 {
        eprintln!("skipping: two mock devices (one GPU per context; the one-device run covers it)");
        return;
    }
    std::env::set_var("LLAMA_HOTSWAP_CUDA_COMPUTE", "1");
    let dir = tempfile::tempdir().unwrap();
    let cpu_index = Registry::global().cpu().index();
    let mut c = Checks(Vec::new());
    let one_layer = || vec![("1 layer on the GPU", 1, Vec::new())];

    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        let p = tiny_llama_file(dir.path(), ty);
        compare(&mut c, &format!("tiny llama {ty}"), &p, &one_layer(), 8);
    }

    // rows of 256 for the K-quants and IQ4_XS (super-blocks of 256 values)
    let wide = dir.path().join("wide-F32.gguf");
    tiny_llama(&TinyLlamaOpts {
        n_embd: 256,
        n_ff: 512,
        ..TinyLlamaOpts::default()
    })
    .unwrap()
    .write_to(&wide)
    .unwrap();
    for ty in [
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        let p = dir.path().join(format!("wide-{ty}.gguf"));
        retyped(&wide, &p, ty);
        let label = format!("tiny llama 256-wide {ty}");
        compare(&mut c, &label, &p, &one_layer(), 8);
    }

    let p = dir.path().join("tiny-moe.gguf");
    tiny_moe(&TinyLlamaOpts::with_type(GgmlType::Q8_0))
        .unwrap()
        .write_to(&p)
        .unwrap();
    compare(
        &mut c,
        "tiny moe Q8_0",
        &p,
        &[(
            "experts on the CPU",
            -1,
            vec![("exps".to_string(), cpu_index)],
        )],
        8,
    );

    // 80 tokens in one micro-batch: the CPU engine's tiled flash attention (from 64 query rows;
    // the prompts above take its one-row kernel), which the kernel follows with Q and V's sums
    // in f32
    let q8_0 = tiny_llama_file(dir.path(), GgmlType::Q8_0);
    let (cpu, gpu) = (
        load_on(&q8_0, 0, Vec::new(), false),
        load_on(&q8_0, -1, Vec::new(), false),
    );
    let nv = cpu.vocab.n_tokens();
    let long: Vec<i32> = (1..81).map(|i| (i * 37) % nv as i32).collect();
    let (cc, cl) = decode(
        &Context::new(cpu, &params(512, 512)).unwrap(),
        &long,
        0,
        true,
    );
    let (gc, gl) = decode(
        &Context::new(gpu, &params(512, 512)).unwrap(),
        &long,
        0,
        true,
    );
    let kl = if cc == 0 && gc == 0 {
        max_kl(&cl, &gl, nv as usize)
    } else {
        f64::INFINITY
    };
    c.check(
        kl <= 1e-3,
        format!(
            "tiny llama q8_0, 80 tokens in one batch: codes {cc}/{gc}, max KL {kl:.3e} <= 1e-3"
        ),
    );

    // without flash attention (upstream's KQ and KQV matrix products over F16)
    let no_fa = ContextParams {
        flash_attn_type: 0,
        ..params(512, 512)
    };
    let (cpu, gpu) = (
        load_on(&q8_0, 0, Vec::new(), false),
        load_on(&q8_0, -1, Vec::new(), false),
    );
    let prompt = &long[..24];
    let (cc, cl) = decode(&Context::new(cpu, &no_fa).unwrap(), prompt, 0, true);
    let (gc, gl) = decode(&Context::new(gpu, &no_fa).unwrap(), prompt, 0, true);
    let kl = if cc == 0 && gc == 0 {
        max_kl(&cl, &gl, nv as usize)
    } else {
        f64::INFINITY
    };
    c.check(
        kl <= 1e-3,
        format!(
            "tiny llama q8_0 without flash attention: codes {cc}/{gc}, max KL {kl:.3e} <= 1e-3"
        ),
    );

    let q4_1 = tiny_llama_file(dir.path(), GgmlType::Q4_1);
    hot_swap_on_the_gpu(&mut c, dir.path(), &q4_1, &q8_0);

    match fixtures_dir() {
        Some(fx) => {
            for (name, moe) in [("gemma3-dense", false), ("qwen3moe-moe", true)] {
                let src = fx.join(format!("{name}.gguf"));
                if !src.exists() {
                    c.check(false, format!("fixture {} is missing", src.display()));
                    continue;
                }
                for ty in [
                    GgmlType::F32,
                    GgmlType::Q8_0,
                    GgmlType::Q4_1,
                    GgmlType::Q2_K,
                    GgmlType::Q3_K,
                    GgmlType::Q4_K,
                    GgmlType::Q5_K,
                    GgmlType::Q6_K,
                    GgmlType::IQ4_XS,
                ] {
                    let p = if ty == GgmlType::F32 {
                        src.clone()
                    } else {
                        let p = dir.path().join(format!("{name}-{ty}.gguf"));
                        retyped(&src, &p, ty);
                        p
                    };
                    let mut hybrids = vec![("1 layer on the GPU", 1, Vec::new())];
                    if moe {
                        hybrids.push((
                            "experts on the CPU (-ot exps=CPU)",
                            -1,
                            vec![("exps".to_string(), cpu_index)],
                        ));
                    }
                    compare(&mut c, &format!("{name} {ty}"), &p, &hybrids, 4);
                }
            }
        }
        None => eprintln!(
            "fixtures not found (LLAMA_HOTSWAP_GPU_FIXTURES, scripts/upstream-arch-fixtures.sh): gemma3/qwen3moe skipped"
        ),
    }
    assert!(c.0.is_empty(), "failed: {:#?}", c.0);
}

/// Not a check: writes `LLAMA_HOTSWAP_TRUNCATE_OUT`, the SmolLM2 file with its first
/// `LLAMA_HOTSWAP_TRUNCATE_LAYERS` layers only (a real model's weights small enough to travel
/// to a GPU machine that cannot download; the GPU checks then say which file they ran on).
#[test]
#[ignore]
fn write_truncated_smollm2() {
    let (Some(src), Some(out), Some(n)) = (
        smollm2(),
        std::env::var_os("LLAMA_HOTSWAP_TRUNCATE_OUT"),
        std::env::var("LLAMA_HOTSWAP_TRUNCATE_LAYERS")
            .ok()
            .and_then(|v| v.parse::<u32>().ok()),
    ) else {
        panic!("needs the model, LLAMA_HOTSWAP_TRUNCATE_OUT and LLAMA_HOTSWAP_TRUNCATE_LAYERS");
    };
    let bytes = std::fs::read(src).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let all = GgufWriter::from_gguf(&gguf);
    let mut w = GgufWriter::new();
    for (k, v) in all.kvs() {
        w.set(k, v.clone());
    }
    w.set("llama.block_count", n);
    for t in gguf.tensors() {
        let layer = t
            .name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|l| l.parse::<u32>().ok());
        if layer.is_some_and(|l| l >= n) {
            continue;
        }
        w.add_tensor(
            t.name,
            t.shape(),
            t.ggml_type,
            gguf.tensor_data(t).unwrap().to_vec(),
        )
        .unwrap();
    }
    w.write_to(out).unwrap();
}

/// Not a check: one prompt of a tiny model (`LLAMA_HOTSWAP_TRACE_TYPE`, default Q8_0; a type
/// the fixture writer does not encode: 256-wide rows retyped; MoE when
/// `LLAMA_HOTSWAP_TRACE_MOE=1`) on the CPU, then on the GPU, for
/// `LLAMA_HOTSWAP_EXEC_TRACE=1` to print both executors' node sums (scripts/gpu-check.sh
/// diffs them to name the first node where the GPU parts from the CPU).
#[test]
#[ignore]
fn trace_tiny_model() {
    if let Some(r) = gpu_reason() {
        eprintln!("skipping: {r}");
        return;
    }
    std::env::set_var("LLAMA_HOTSWAP_CUDA_COMPUTE", "1");
    let name = std::env::var("LLAMA_HOTSWAP_TRACE_TYPE").unwrap_or_else(|_| "Q8_0".into());
    let ty = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ]
    .into_iter()
    .find(|t| t.to_string().eq_ignore_ascii_case(&name))
    .unwrap_or(GgmlType::Q8_0);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.gguf");
    let moe = std::env::var("LLAMA_HOTSWAP_TRACE_MOE").is_ok_and(|v| v == "1");
    let write = |opts: &TinyLlamaOpts, path: &Path| {
        if moe {
            tiny_moe(opts)
        } else {
            tiny_llama(opts)
        }
        .map(|w| w.write_to(path).unwrap())
    };
    if write(&TinyLlamaOpts::with_type(ty), &p).is_err() {
        // a type the fixture writer does not encode: rows of 256 in F32, retyped
        let src = dir.path().join("f32.gguf");
        let wide = TinyLlamaOpts {
            n_embd: 256,
            n_ff: 512,
            ..TinyLlamaOpts::default()
        };
        write(&wide, &src).unwrap();
        retyped(&src, &p, ty);
    }
    let prompt: Vec<i32> = (1..9).map(|i| i * 13).collect();
    for ngl in [0, -1] {
        eprintln!("=== n_gpu_layers {ngl}");
        let ctx = Context::new(load_on(&p, ngl, Vec::new(), false), &params(64, 64)).unwrap();
        let (code, _) = decode(&ctx, &prompt, 0, true);
        eprintln!("=== code {code}");
    }
}

/// Runs without a GPU: the files the GPU check makes from upstream's fixtures (retyped to Q8_0,
/// Q4_1, the K-quants and IQ4_XS) load and decode on the CPU engine with finite logits that differ from the F32
/// file's, so a lent GPU's minutes are not spent on a broken preparation.
#[test]
fn retyped_fixtures_decode_on_the_cpu() {
    let Some(fx) = fixtures_dir() else {
        eprintln!("skipping: fixtures not found (scripts/upstream-arch-fixtures.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in ["gemma3-dense", "qwen3moe-moe"] {
        let src = fx.join(format!("{name}.gguf"));
        let base = Context::new(load_on(&src, 0, Vec::new(), false), &params(64, 64)).unwrap();
        let prompt: Vec<i32> = (1..9).map(|i| i * 13).collect();
        let (code, want) = decode(&base, &prompt, 0, false);
        assert_eq!(code, 0, "{name} F32");
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            let p = dir.path().join(format!("{name}-{ty}.gguf"));
            retyped(&src, &p, ty);
            let model = load_on(&p, 0, Vec::new(), false);
            let n_ty = model
                .tensors
                .iter()
                .filter(|t| t.read().layout.ggml_type == ty)
                .count();
            assert!(n_ty > 0, "{name}: no tensor retyped to {ty}");
            let ctx = Context::new(model, &params(64, 64)).unwrap();
            let (code, got) = decode(&ctx, &prompt, 0, false);
            assert_eq!(code, 0, "{name} {ty}");
            assert!(got.iter().all(|v| v.is_finite()), "{name} {ty}: logits");
            assert!(got != want, "{name} {ty}: same logits as F32");
        }
    }
}
