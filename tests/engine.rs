//! The inference engine on tiny complete llama models: one batch equals token-by-token
//! decoding, micro-batch splits and sequence mixes do not change results, the memory API
//! behaves as upstream's KV cache, hostile batches get upstream's return codes, the graph is
//! reused until the batch shape or the model's generation changes, and a hot-swapped tensor
//! takes effect at the next decode (bit-identical to a fresh load of the new file).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llama::context::{Context, ContextParams};
use llama::device::{Registry, SplitMode};
use llama::gguf::fixtures::{
    llama_tensor_specs, tensor_values, tiny_llama, tiny_moe, TinyLlamaOpts,
};
use llama::gguf::{GgmlType, GgufWriter};
use llama::loader::place::PlacementParams;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::{LoadMode, Model};

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tempdir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("lhs-engine-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn write(w: &GgufWriter, path: &Path) {
    let tmp = path.with_extension("tmp");
    w.write_to(&tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn load_model(path: &Path, hotswap: bool) -> Arc<Model> {
    load_placed(path, hotswap, PlacementParams::default(), LoadMode::Auto)
}

fn load_placed(
    path: &Path,
    hotswap: bool,
    placement: PlacementParams,
    mode: LoadMode,
) -> Arc<Model> {
    Arc::new(
        load(
            ModelSource::Path(path.to_path_buf()),
            LoadOptions {
                load_mode: mode,
                vocab_only: false,
                no_alloc: false,
                check_tensors: false,
                overrides: Vec::new(),
                progress: Some(&mut |_| true),
                placement,
                hotswap,
            },
        )
        .unwrap(),
    )
}

fn vgpus(split: SplitMode) -> PlacementParams {
    PlacementParams {
        registry: Box::leak(Box::new(Registry::with_virtual_gpus(&[64 << 20, 64 << 20]))),
        split_mode: split,
        ..Default::default()
    }
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 64,
        n_seq_max: 4,
        n_threads: 1,
        n_threads_batch: 1,
        kv_unified: true,
        ..ContextParams::default()
    }
}

/// Decodes tokens (positions and sequence given, all logits unless `last_only`); returns the
/// code and the logits rows.
fn decode(
    ctx: &Context,
    tokens: &[i32],
    pos: &[i32],
    seq: &[i32],
    last_only: bool,
) -> (i32, Vec<f32>) {
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend_from_slice(tokens);
        e.raw.has_pos = true;
        e.raw.pos.extend_from_slice(pos);
        e.raw.has_seq = true;
        e.raw.seq_flat.extend_from_slice(seq);
        e.raw.seq_n.extend(std::iter::repeat(1).take(tokens.len()));
        e.raw.has_output = true;
        e.raw
            .output
            .extend((0..tokens.len()).map(|i| !last_only || i + 1 == tokens.len()));
    }
    let code = ctx.decode();
    let logits = ctx.engine().logits.clone();
    (code, logits)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn model_file(dir: &TempDir, opts: &TinyLlamaOpts) -> PathBuf {
    let path = dir.0.join("m.gguf");
    write(&tiny_llama(opts).unwrap(), &path);
    path
}

const PROMPT: [i32; 8] = [1, 17, 200, 5, 99, 42, 300, 7];

#[test]
fn one_batch_equals_token_by_token_and_any_ubatch_split() {
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::F16] {
        let dir = tempdir(&format!("inc-{ty}"));
        let model = load_model(&model_file(&dir, &TinyLlamaOpts::with_type(ty)), false);
        let n_vocab = model.vocab.tokens.len();
        let pos: Vec<i32> = (0..8).collect();
        let ctx = Context::new(model.clone(), &params()).unwrap();
        let (code, whole) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
        assert_eq!(code, 0);
        assert_eq!(whole.len(), 8 * n_vocab);
        assert!(whole.iter().all(|v| v.is_finite()));
        let ctx1 = Context::new(model.clone(), &params()).unwrap();
        for i in 0..8 {
            let (code, row) = decode(&ctx1, &PROMPT[i..i + 1], &[i as i32], &[0], false);
            assert_eq!(code, 0);
            let d = max_diff(&row, &whole[i * n_vocab..(i + 1) * n_vocab]);
            assert!(d < 1e-4, "{ty}: token {i} alone differs by {d}");
        }
        let mut p = params();
        p.n_ubatch = 3;
        let ctx3 = Context::new(model.clone(), &p).unwrap();
        let (code, split) = decode(&ctx3, &PROMPT, &pos, &[0; 8], false);
        assert_eq!(code, 0);
        assert!(max_diff(&split, &whole) < 1e-5, "{ty}: ubatch 3 differs");
        // the first row does not see the later tokens (causal), so it equals a 1-token decode
        assert_ne!(whole[..n_vocab], whole[n_vocab..2 * n_vocab]);
    }
}

#[test]
fn two_sequences_in_one_batch_equal_each_alone() {
    let dir = tempdir("seqs");
    let model = load_model(&model_file(&dir, &TinyLlamaOpts::default()), false);
    let n_vocab = model.vocab.tokens.len();
    let a = [1, 5, 9, 13];
    let b = [2, 6, 10, 14, 18];
    let ctx = Context::new(model.clone(), &params()).unwrap();
    // interleaved: a0 b0 a1 b1 ...
    let mut toks = Vec::new();
    let mut pos = Vec::new();
    let mut seq = Vec::new();
    for i in 0..5 {
        if i < 4 {
            toks.push(a[i]);
            pos.push(i as i32);
            seq.push(0);
        }
        toks.push(b[i]);
        pos.push(i as i32);
        seq.push(3);
    }
    let (code, mixed) = decode(&ctx, &toks, &pos, &seq, false);
    assert_eq!(code, 0);
    let alone = |t: &[i32]| {
        let c = Context::new(model.clone(), &params()).unwrap();
        let p: Vec<i32> = (0..t.len() as i32).collect();
        decode(&c, t, &p, &vec![0; t.len()], false).1
    };
    let (la, lb) = (alone(&a), alone(&b));
    let (mut ia, mut ib) = (0, 0);
    for (row, &s) in seq.iter().enumerate() {
        let got = &mixed[row * n_vocab..(row + 1) * n_vocab];
        let want = if s == 0 {
            ia += 1;
            &la[(ia - 1) * n_vocab..ia * n_vocab]
        } else {
            ib += 1;
            &lb[(ib - 1) * n_vocab..ib * n_vocab]
        };
        assert!(max_diff(got, want) < 1e-5, "row {row} (seq {s})");
    }
    // one KV stream per sequence (kv_unified = false): sequences 0 and 3 are not consecutive
    // ids, so they go through separate micro-batches into their own streams; the rows come
    // back in the batch's order, equal to the shared cache's bit for bit
    let mut p = params();
    p.kv_unified = false;
    let streams = Context::new(model.clone(), &p).unwrap();
    assert_eq!(streams.engine().kv.n_stream(), 4);
    let (code, per_stream) = decode(&streams, &toks, &pos, &seq, false);
    assert_eq!(code, 0);
    assert!(
        per_stream == mixed,
        "per-stream rows differ from the shared cache's"
    );
    assert_eq!(streams.engine().kv.seq_pos_max(3), 4);
    let e = ctx.engine();
    assert_eq!((e.kv.seq_pos_min(0), e.kv.seq_pos_max(0)), (0, 3));
    assert_eq!(e.kv.seq_pos_max(3), 4);
}

#[test]
fn memory_operations_then_decode() {
    let dir = tempdir("mem");
    let model = load_model(&model_file(&dir, &TinyLlamaOpts::default()), false);
    let mut p = params();
    p.type_k = 0; // F32 keys: the K-shift re-rotation is then exact up to rounding
    p.type_v = 0;
    let pos: Vec<i32> = (0..8).collect();
    let fresh = || Context::new(model.clone(), &p).unwrap();
    let (_, reference) = decode(&fresh(), &PROMPT, &pos, &[0; 8], true);

    // seq_rm of the tail, then decode it again
    let ctx = fresh();
    decode(&ctx, &PROMPT, &pos, &[0; 8], true);
    assert!(ctx.engine().kv.seq_rm(Some(0), 5, -1));
    assert_eq!(ctx.engine().kv.seq_pos_max(0), 4);
    let (code, again) = decode(&ctx, &PROMPT[5..], &pos[5..], &[0; 3], true);
    assert_eq!(code, 0);
    assert!(max_diff(&again, &reference) < 1e-5);

    // seq_cp then continue on the copy
    let ctx = fresh();
    decode(&ctx, &PROMPT[..7], &pos[..7], &[0; 7], true);
    ctx.engine().kv.seq_cp(0, 2, -1, -1).unwrap();
    let (code, on_copy) = decode(&ctx, &PROMPT[7..], &[7], &[2], true);
    assert_eq!(code, 0);
    assert!(max_diff(&on_copy, &reference) < 1e-5);
    // seq_keep(2) drops sequence 0's own cells but keeps the shared ones
    ctx.engine().kv.seq_keep(2);
    assert_eq!(ctx.engine().kv.seq_pos_max(0), -1);
    assert_eq!(ctx.engine().kv.seq_pos_max(2), 7);

    // seq_add: the prompt decoded at positions 10.., shifted back by 10, then the last token
    let ctx = fresh();
    let shifted: Vec<i32> = (10..17).collect();
    decode(&ctx, &PROMPT[..7], &shifted, &[0; 7], true);
    ctx.engine().kv.seq_add(0, -1, -1, -10);
    assert_eq!(ctx.engine().kv.seq_pos_max(0), 6);
    let (code, after_shift) = decode(&ctx, &PROMPT[7..], &[7], &[0], true);
    assert_eq!(code, 0);
    let d = max_diff(&after_shift, &reference);
    assert!(d < 1e-3, "K-shift result differs by {d}");

    // clear
    ctx.engine().kv.clear(true);
    assert_eq!(ctx.engine().kv.seq_pos_max(0), -1);
    let (code, cleared) = decode(&ctx, &PROMPT, &pos, &[0; 8], true);
    assert_eq!(code, 0);
    assert!(max_diff(&cleared, &reference) < 1e-5);
}

#[test]
fn hostile_batches_get_upstreams_codes_and_leave_memory_intact() {
    let dir = tempdir("hostile");
    let model = load_model(&model_file(&dir, &TinyLlamaOpts::default()), false);
    let n_vocab = model.vocab.tokens.len() as i32;
    let mut p = params();
    p.n_ctx = 256;
    let ctx = Context::new(model.clone(), &p).unwrap();
    assert_eq!(decode(&ctx, &[], &[], &[], false).0, -1, "empty batch");
    let big: Vec<i32> = vec![1; 65];
    let big_pos: Vec<i32> = (0..65).collect();
    assert_eq!(
        decode(&ctx, &big, &big_pos, &[0; 65], false).0,
        -1,
        "n_tokens > n_batch"
    );
    assert_eq!(
        decode(&ctx, &[n_vocab], &[0], &[0], false).0,
        -1,
        "token id = n_vocab"
    );
    assert_eq!(
        decode(&ctx, &[-1], &[0], &[0], false).0,
        -1,
        "negative token id"
    );
    assert_eq!(
        decode(&ctx, &[1], &[0], &[4], false).0,
        -1,
        "seq_id = n_seq_max"
    );
    assert_eq!(
        decode(&ctx, &[1], &[0], &[-1], false).0,
        -1,
        "negative seq_id"
    );
    assert_eq!(
        decode(&ctx, &[1, 2], &[1, 0], &[0, 0], false).0,
        -1,
        "positions backwards"
    );
    assert_eq!(
        decode(&ctx, &[1, 2], &[0, 2], &[0, 0], false).0,
        -1,
        "gap in positions"
    );
    assert_eq!(ctx.engine().kv.used(), 0, "refused batches leave no trace");
    assert_eq!(decode(&ctx, &[1, 2], &[0, 1], &[0, 0], false).0, 0);
    assert_eq!(
        decode(&ctx, &[3], &[5], &[0], false).0,
        -1,
        "does not continue the memory"
    );
    assert_eq!(
        decode(&ctx, &[3], &[1], &[0], false).0,
        -1,
        "overlaps the memory"
    );
    assert_eq!(ctx.engine().kv.seq_pos_max(0), 1);
    // full cache → 1, nothing changed
    let mut small = params();
    small.n_ctx = 256;
    let c = Context::new(model.clone(), &small).unwrap();
    for chunk in 0..4 {
        let toks = vec![1; 64];
        let pos: Vec<i32> = (chunk * 64..chunk * 64 + 64).collect();
        assert_eq!(decode(&c, &toks, &pos, &[0; 64], true).0, 0);
    }
    assert_eq!(decode(&c, &[1], &[256], &[0], true).0, 1, "no free cell");
    assert_eq!(c.engine().kv.seq_pos_max(0), 255);
    // abort → 2, the aborted micro-batch's positions removed
    let c = Context::new(model.clone(), &params()).unwrap();
    assert_eq!(decode(&c, &[1, 2], &[0, 1], &[0, 0], true).0, 0);
    c.engine().abort = Some(Box::new(|| true));
    assert_eq!(decode(&c, &[3, 4], &[2, 3], &[0, 0], true).0, 2);
    assert_eq!(c.engine().kv.seq_pos_max(0), 1);
    c.engine().abort = None;
    assert_eq!(decode(&c, &[3, 4], &[2, 3], &[0, 0], true).0, 0);
}

#[test]
fn graph_is_reused_until_the_shape_or_the_generation_changes() {
    let dir = tempdir("reuse");
    let model = load_model(&model_file(&dir, &TinyLlamaOpts::default()), false);
    let ctx = Context::new(model.clone(), &params()).unwrap();
    decode(&ctx, &PROMPT, &(0..8).collect::<Vec<_>>(), &[0; 8], true);
    assert_eq!(ctx.engine().n_graph_builds, 1);
    for i in 8..12 {
        decode(&ctx, &[5], &[i], &[0], true);
    }
    assert_eq!(
        ctx.engine().n_graph_builds,
        2,
        "single-token steps share one graph"
    );
    model
        .generation
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    decode(&ctx, &[5], &[12], &[0], true);
    assert_eq!(ctx.engine().n_graph_builds, 3, "a new generation rebuilds");
    decode(&ctx, &[5], &[13], &[0], true);
    assert_eq!(ctx.engine().n_graph_builds, 3);
}

#[test]
fn hot_swap_takes_effect_at_the_next_decode_and_swaps_back_bit_identical() {
    type Placement = fn() -> PlacementParams;
    let placements: Vec<(&str, Placement)> = vec![
        ("cpu", || PlacementParams {
            registry: Box::leak(Box::new(Registry::with_virtual_gpus(&[]))),
            ..Default::default()
        }),
        ("layer", || vgpus(SplitMode::Layer)),
        ("row", || vgpus(SplitMode::Row)),
    ];
    let opts = TinyLlamaOpts::default();
    let a = tiny_llama(&opts).unwrap();
    // B: the same model with blk.0.attn_q.weight quantized to Q8_0
    let mut b = GgufWriter::new();
    for (k, v) in a.kvs() {
        b.set(k, v.clone());
    }
    for spec in llama_tensor_specs(&opts) {
        let count = spec.dims.iter().product::<i64>() as usize;
        let values = tensor_values(
            opts.seed,
            &spec.name,
            count,
            spec.name.ends_with("_norm.weight"),
        );
        let ty = if spec.name == "blk.0.attn_q.weight" {
            GgmlType::Q8_0
        } else {
            spec.ggml_type
        };
        b.add_tensor_f32(&spec.name, &spec.dims, ty, &values)
            .unwrap();
    }
    let pos: Vec<i32> = (0..8).collect();
    for (label, placement) in placements {
        for mode in [LoadMode::Auto, LoadMode::None] {
            let dir = tempdir(&format!("swap-{label}-{mode:?}"));
            let path = dir.0.join("m.gguf");
            write(&a, &path);
            let b_path = dir.0.join("b.gguf");
            write(&b, &b_path);

            let model = load_placed(&path, true, placement(), mode);
            let ctx = Context::new(model.clone(), &params()).unwrap();
            let (code, first) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
            assert_eq!(code, 0, "{label} {mode:?}");

            write(&b, &path);
            let report = llama::hotswap::reload_changed(&model).unwrap();
            assert!(
                !report.entries.is_empty(),
                "{label} {mode:?}: the retyped tensor reloads"
            );
            ctx.engine().kv.clear(true);
            let (_, swapped) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
            let fresh =
                Context::new(load_placed(&b_path, false, placement(), mode), &params()).unwrap();
            let (_, fresh_b) = decode(&fresh, &PROMPT, &pos, &[0; 8], false);
            assert_ne!(
                swapped, first,
                "{label} {mode:?}: the swap changes the logits"
            );
            assert_eq!(
                swapped, fresh_b,
                "{label} {mode:?}: bit-identical to a fresh load of B"
            );

            write(&a, &path);
            llama::hotswap::reload_changed(&model).unwrap();
            ctx.engine().kv.clear(true);
            let (_, back) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
            assert_eq!(
                back, first,
                "{label} {mode:?}: swapping back is bit-identical"
            );
        }
    }
}

#[test]
fn virtual_gpu_placements_compute_the_cpu_result() {
    let dir = tempdir("vgpu");
    let path = model_file(&dir, &TinyLlamaOpts::with_type(GgmlType::Q8_0));
    let pos: Vec<i32> = (0..8).collect();
    let (_, cpu) = decode(
        &Context::new(load_model(&path, false), &params()).unwrap(),
        &PROMPT,
        &pos,
        &[0; 8],
        false,
    );
    for split in [SplitMode::Layer, SplitMode::Row] {
        let m = load_placed(&path, false, vgpus(split), LoadMode::Auto);
        let (code, got) = decode(
            &Context::new(m, &params()).unwrap(),
            &PROMPT,
            &pos,
            &[0; 8],
            false,
        );
        assert_eq!(code, 0);
        assert_eq!(
            got, cpu,
            "{split:?}: row pieces and virtual GPUs give the CPU's logits"
        );
    }
}

#[test]
fn moe_llama_decodes_consistently() {
    let dir = tempdir("moe");
    let path = dir.0.join("m.gguf");
    write(&tiny_moe(&TinyLlamaOpts::moe()).unwrap(), &path);
    let model = load_model(&path, false);
    let n_vocab = model.vocab.tokens.len();
    let ctx = Context::new(model.clone(), &params()).unwrap();
    let pos: Vec<i32> = (0..8).collect();
    let (code, whole) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
    assert_eq!(code, 0);
    let c1 = Context::new(model.clone(), &params()).unwrap();
    for i in 0..8 {
        let (_, row) = decode(&c1, &PROMPT[i..i + 1], &[i as i32], &[0], false);
        assert!(max_diff(&row, &whole[i * n_vocab..(i + 1) * n_vocab]) < 1e-4);
    }
}

/// The repacked layout of tensor `name` now, checked against a repack of its current bytes
/// (None when it has none).
fn repacked_now(model: &Model, name: &str) -> Option<Vec<u8>> {
    let t = model.tensors.get(name).unwrap();
    let st = t.read();
    let rp = st.derived.get()?.as_ref()?;
    let plain = llama::hotswap::current_bytes(model, name).unwrap();
    let again =
        llama::kernels::cpu::repack::repack(rp.kind, st.layout.ggml_type, &plain, rp.n_rows, rp.k);
    assert!(
        rp.bytes() == again.bytes(),
        "{name}: the repacked layout is of the current bytes"
    );
    Some(rp.bytes().to_vec())
}

#[test]
fn hot_swap_of_a_repacked_tensor_computes_with_the_new_bytes() {
    if llama::kernels::cpu::simd_level() != "avx2" {
        eprintln!("SKIP: no AVX2, no repacked layouts (as upstream)");
        return;
    }
    let name = "blk.0.attn_q.weight";
    for tie in [false, true] {
        let opts = TinyLlamaOpts {
            tie_embeddings: tie,
            ..TinyLlamaOpts::with_type(GgmlType::Q4_0)
        };
        let a = tiny_llama(&opts).unwrap();
        // B: other Q4_0 bytes for the tensor (same type and size: written in place, no new
        // generation); C: the tensor as Q8_0 (retyped: no repacked layout)
        let variant = |ty: GgmlType, seed: u64| {
            let mut w = GgufWriter::new();
            for (k, v) in a.kvs() {
                w.set(k, v.clone());
            }
            for spec in llama_tensor_specs(&opts) {
                let count = spec.dims.iter().product::<i64>() as usize;
                let is_norm = spec.name.ends_with("_norm.weight");
                let (ty, seed) = if spec.name == name {
                    (ty, seed)
                } else {
                    (spec.ggml_type, opts.seed)
                };
                let values = tensor_values(seed, &spec.name, count, is_norm);
                w.add_tensor_f32(&spec.name, &spec.dims, ty, &values)
                    .unwrap();
            }
            w
        };
        let (b, c) = (variant(GgmlType::Q4_0, 7), variant(GgmlType::Q8_0, 42));
        let pos: Vec<i32> = (0..8).collect();
        for mode in [LoadMode::Auto, LoadMode::None] {
            let label = format!("tie={tie} {mode:?}");
            let dir = tempdir(&format!("repack-swap-{tie}-{mode:?}"));
            let path = dir.0.join("m.gguf");
            let fresh_of = |w: &GgufWriter, tag: &str| {
                let p = dir.0.join(format!("{tag}.gguf"));
                write(w, &p);
                let m = load_placed(&p, false, PlacementParams::default(), mode);
                let (_, l) = decode(
                    &Context::new(m.clone(), &params()).unwrap(),
                    &PROMPT,
                    &pos,
                    &[0; 8],
                    false,
                );
                (l, repacked_now(&m, name))
            };
            write(&a, &path);
            let model = load_placed(&path, true, PlacementParams::default(), mode);
            let ctx = Context::new(model.clone(), &params()).unwrap();
            let run = |what: &str| {
                ctx.engine().kv.clear(true);
                let (code, l) = decode(&ctx, &PROMPT, &pos, &[0; 8], false);
                assert_eq!(code, 0, "{label} {what}");
                l
            };
            let first = run("first");
            let packed_a = repacked_now(&model, name).expect("Q4_0 weights are repacked");
            if tie {
                assert!(
                    repacked_now(&model, "token_embd.weight").is_some(),
                    "{label}: the tied output projection is repacked"
                );
            }
            let gen0 = model.generation.load(std::sync::atomic::Ordering::Acquire);

            for (tag, w, repacked) in [("b", &b, true), ("c", &c, false), ("a", &a, true)] {
                write(w, &path);
                let report = llama::hotswap::reload_changed(&model).unwrap();
                assert!(
                    report.entries.iter().any(|e| e.name == name),
                    "{label} {tag}: {name} reloads"
                );
                let now = repacked_now(&model, name);
                assert_eq!(
                    now.is_some(),
                    repacked,
                    "{label} {tag}: repacked again at reload"
                );
                let released = model.tensors.get(name).unwrap().read().plain_released;
                assert_eq!(
                    released,
                    repacked && mode == LoadMode::None,
                    "{label} {tag}: an owned load drops the plain copy again"
                );
                let swapped = run(tag);
                let (fresh, fresh_packed) = fresh_of(w, tag);
                assert_eq!(
                    swapped, fresh,
                    "{label} {tag}: bit-identical to a fresh load"
                );
                assert_eq!(
                    now, fresh_packed,
                    "{label} {tag}: the fresh load's repacked bytes"
                );
                if tag == "b" {
                    assert_ne!(swapped, first, "{label}: the new bytes change the logits");
                    assert_ne!(now.as_deref(), Some(&packed_a[..]), "{label}: new layout");
                    if mode == LoadMode::None {
                        assert_eq!(
                            model.generation.load(std::sync::atomic::Ordering::Acquire),
                            gen0,
                            "{label}: an in-place write bumps no generation (the layout \
                             is re-derived anyway)"
                        );
                    }
                }
                if tag == "a" {
                    assert_eq!(swapped, first, "{label}: swapping back is bit-identical");
                    assert_eq!(now.as_deref(), Some(&packed_a[..]));
                }
            }
        }
    }
}

#[test]
fn no_repacked_layouts_without_extra_buffer_types() {
    let dir = tempdir("no-extra-bufts");
    let path = model_file(&dir, &TinyLlamaOpts::with_type(GgmlType::Q4_0));
    let mut model = load(
        ModelSource::Path(path.clone()),
        LoadOptions {
            progress: Some(&mut |_| true),
            hotswap: false,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    model.use_extra_bufts = false; // upstream's use_extra_bufts = false
    let model = Arc::new(model);
    let pos: Vec<i32> = (0..8).collect();
    let ctx = Context::new(model.clone(), &params()).unwrap();
    assert_eq!(decode(&ctx, &PROMPT, &pos, &[0; 8], false).0, 0);
    let st = model.tensors.get("blk.0.attn_q.weight").unwrap().read();
    assert!(st.derived.get().is_none(), "no repacked layout was made");
}

/// An owned load (no mmap) keeps a repacked weight once, as upstream's `CPU_REPACK` buffer:
/// the plain bytes' pages are given back to the OS (`mincore` sees them gone), the bytes still
/// read back identical to the file's (un-repacked), decode is unchanged, and a mapped load
/// keeps its mapping. The tied token embeddings keep their plain bytes for GET_ROWS (upstream
/// loads them twice too).
#[test]
fn an_owned_load_holds_a_repacked_weight_once_and_reads_back_the_file_bytes() {
    if llama::kernels::cpu::simd_level() != "avx2" {
        eprintln!("SKIP: no AVX2, no repacked layouts (as upstream)");
        return;
    }
    let page = 4096;
    for tie in [false, true] {
        let opts = TinyLlamaOpts {
            tie_embeddings: tie,
            n_embd: 256,
            n_ff: 512,
            n_head: 4,
            n_head_kv: 4,
            ..TinyLlamaOpts::with_type(GgmlType::Q4_0)
        };
        let dir = tempdir(&format!("repack-once-{tie}"));
        let path = model_file(&dir, &opts);
        let mapped = load_placed(&path, false, PlacementParams::default(), LoadMode::Auto);
        let owned = load_placed(&path, false, PlacementParams::default(), LoadMode::None);
        llama::model::derived::derive_all(&mapped);
        llama::model::derived::derive_all(&owned);
        let mut released = 0;
        for spec in llama_tensor_specs(&opts) {
            let name = &spec.name;
            let file = llama::hotswap::current_bytes(&mapped, name).unwrap();
            let back = llama::hotswap::current_bytes(&owned, name).unwrap();
            assert!(file == back, "tie={tie} {name}: the file's bytes read back");
            let st = owned.tensors.get(name).unwrap().read();
            let repacked = st.derived.get().is_some_and(|d| d.is_some());
            let resident = st.resident_plain_bytes().expect("an arena range");
            let embd = name.starts_with("token_embd.");
            assert_eq!(
                st.plain_released,
                repacked && !embd,
                "tie={tie} {name}: released exactly when repacked (not the embeddings)"
            );
            if st.plain_released {
                released += 1;
                // at most the two end pages, shared with the neighbouring tensors
                assert!(
                    resident <= 2 * page && file.len() >= 4 * page,
                    "tie={tie} {name}: {resident} of {} plain bytes still resident",
                    file.len()
                );
            } else if embd {
                assert!(
                    resident >= file.len() / page * page,
                    "tie={tie} {name}: kept"
                );
            }
            let m = mapped.tensors.get(name).unwrap().read();
            assert!(!m.plain_released, "tie={tie} {name}: a mapping stays");
        }
        assert!(
            released >= 4 * opts.n_layer as usize,
            "tie={tie}: {released}"
        );
        let pos: Vec<i32> = (0..8).collect();
        let run = |m: &Arc<Model>| {
            let ctx = Context::new(m.clone(), &params()).unwrap();
            decode(&ctx, &PROMPT, &pos, &[0; 8], false)
        };
        let (a, b) = (run(&mapped), run(&owned));
        assert_eq!(a.0, 0);
        assert_eq!(a, b, "tie={tie}: the same logits from one copy");
    }
}

/// Issue 35, finding 8: a context the host cannot hold, or one asking for more threads than
/// a context runs, is a failure value (checked before anything is allocated), never an abort
/// or the OOM killer; a context then still works, and `llama_set_n_threads`-style counts
/// past the limit are clamped at decode.
#[test]
fn contexts_too_large_for_the_host_fail_cleanly() {
    let dir = tempdir("huge-ctx");
    let model = load_model(&model_file(&dir, &TinyLlamaOpts::default()), false);
    // (the tiny model takes ~256 bytes a cell: 2^31 cells are far past any host)
    for n_ctx in [2_147_483_647u32, u32::MAX - 255] {
        for n_seq_max in [1, 4] {
            let p = ContextParams {
                n_ctx,
                n_seq_max,
                ..params()
            };
            let e = Context::new(model.clone(), &p).err().unwrap().to_string();
            assert!(
                e.contains("failed to allocate buffer for kv cache"),
                "{n_ctx}: {e}"
            );
        }
    }
    for (t, tb) in [(99_999, 1), (1, 99_999), (513, 513)] {
        let p = ContextParams {
            n_threads: t,
            n_threads_batch: tb,
            ..params()
        };
        let e = Context::new(model.clone(), &p).err().unwrap().to_string();
        assert!(e.contains("exceeds the most threads"), "{t} {tb}: {e}");
    }
    let ctx = Context::new(model.clone(), &params()).unwrap();
    {
        let mut e = ctx.engine();
        e.cparams.n_threads = 99_999;
        e.cparams.n_threads_batch = 99_999;
    }
    let pos: Vec<i32> = (0..8).collect();
    let (code, logits) = decode(&ctx, &PROMPT, &pos, &[0; 8], true);
    assert_eq!(code, 0);
    assert!(logits.iter().all(|x| x.is_finite()));
}
