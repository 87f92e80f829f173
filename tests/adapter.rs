//! LoRA adapters and control vectors: the parser's refusals (each with upstream's reason),
//! a replay of its fuzz harness (committed corpus and seeded mutations), and the C entry
//! points on a tiny model (an adapter moves the logits; scale 0, clearing, and a control
//! vector outside its layers give the plain model's logits bit for bit; hostile handles and
//! arguments fail with the failure value). Agreement with upstream's library is
//! `make test-engine`'s (ffi-tests/engine/probe_decode.c with PROBE_LORA / PROBE_CVEC, and
//! probe_lora.c for loading and metadata).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};

use llama::ffi::adapter;
use llama::ffi::backend::{llama_context_default_params, llama_model_default_params};
use llama::ffi::handles::{llama_adapter_lora, llama_context, llama_model};
use llama::ffi::{batch, context, memory, model};
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};
use llama::model::adapter::harness::{check_lora, model_shape, sample, type_ok};
use llama::model::adapter::{parse_lora, AdapterError};

fn parse(bytes: &[u8]) -> Result<llama::model::adapter::LoraAdapter, AdapterError> {
    parse_lora(bytes, "llama", &model_shape, &type_ok)
}

#[test]
fn sample_parses_with_its_metadata() {
    let a = parse(&sample(|_| {})).unwrap();
    assert_eq!(a.alpha, 4.0);
    assert_eq!(a.alora_invocation_tokens, [7, 11, 13]);
    assert_eq!(a.weights.len(), 3);
    let keys: Vec<&str> = a.meta.iter().map(|(k, _)| k.as_str()).collect();
    // arrays are not listed, as upstream
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.type",
            "adapter.type",
            "adapter.lora.alpha"
        ]
    );
    assert_eq!(a.meta[3].1, "4.000000");
    let q = &a.weights["blk.0.attn_q.weight"];
    assert_eq!(q.scale(a.alpha, 0.5), 0.5 * 4.0 / 2.0);
    assert_eq!(q.scale(0.0, 0.5), 0.5, "no alpha: the scale as given");
}

/// Factors for an expert weight carry one matrix per expert (upstream's `build_lora_mm_id`).
#[test]
fn expert_factors_parse_with_one_matrix_per_expert() {
    let a = parse(&sample(|w| {
        w.add_tensor_f32(
            "blk.0.ffn_up_exps.weight.lora_a",
            &[8, 2, 4],
            GgmlType::F32,
            &[0.0; 64],
        )
        .unwrap();
        w.add_tensor_f32(
            "blk.0.ffn_up_exps.weight.lora_b",
            &[2, 12, 4],
            GgmlType::F32,
            &[0.0; 96],
        )
        .unwrap();
    }))
    .unwrap();
    let e = &a.weights["blk.0.ffn_up_exps.weight"];
    assert_eq!((e.a.ne, e.b.ne), ([8, 2, 4, 1], [2, 12, 4, 1]));
}

#[test]
fn hostile_adapters_are_refused_with_the_reason() {
    type Edit = Box<dyn Fn(&mut GgufWriter)>;
    let cases: Vec<(&str, Edit, fn(&AdapterError) -> bool)> = vec![
        (
            "no general.type",
            Box::new(|w| {
                w.remove("general.type");
            }),
            |e| matches!(e, AdapterError::NotAdapter(s) if s.is_empty()),
        ),
        (
            "another architecture",
            Box::new(|w| {
                w.set("general.architecture", "qwen2");
            }),
            |e| matches!(e, AdapterError::ArchMismatch { .. }),
        ),
        (
            "not lora",
            Box::new(|w| {
                w.set("adapter.type", "ia3");
            }),
            |e| matches!(e, AdapterError::NotLora(_)),
        ),
        (
            "general.type not a string (upstream asserts)",
            Box::new(|w| {
                w.set("general.type", MetaValue::U32(1));
            }),
            |e| matches!(e, AdapterError::KeyType { .. }),
        ),
        (
            "alpha a string (upstream asserts)",
            Box::new(|w| {
                w.set("adapter.lora.alpha", "four");
            }),
            |e| matches!(e, AdapterError::KeyType { .. }),
        ),
        (
            "invocation tokens of i32",
            Box::new(|w| {
                w.set(
                    "adapter.alora.invocation_tokens",
                    MetaValue::Array(MetaArray::I32(vec![1])),
                );
            }),
            |e| matches!(e, AdapterError::KeyType { .. }),
        ),
        (
            "invocation tokens a scalar",
            Box::new(|w| {
                w.set("adapter.alora.invocation_tokens", MetaValue::U32(3));
            }),
            |e| matches!(e, AdapterError::KeyType { .. }),
        ),
        (
            "unexpected suffix",
            Box::new(|w| {
                w.add_tensor_f32("blk.0.attn_q.weight.lora_c", &[2], GgmlType::F32, &[0.0; 2])
                    .unwrap();
            }),
            |e| matches!(e, AdapterError::Suffix(_)),
        ),
        (
            "unpaired",
            Box::new(|w| {
                w.add_tensor_f32(
                    "blk.0.ffn_down.weight.lora_a",
                    &[8, 2],
                    GgmlType::F32,
                    &[0.0; 16],
                )
                .unwrap();
            }),
            |e| matches!(e, AdapterError::Unpaired(_)),
        ),
        (
            "not in the model",
            Box::new(|w| {
                for s in ["a", "b"] {
                    w.add_tensor_f32(
                        &format!("blk.7.attn_q.weight.lora_{s}"),
                        &[8, 2],
                        GgmlType::F32,
                        &[0.0; 16],
                    )
                    .unwrap();
                }
            }),
            |e| matches!(e, AdapterError::NotInModel(_)),
        ),
        (
            "expert factors for 3 of the weight's 4 experts",
            Box::new(|w| {
                w.add_tensor_f32(
                    "blk.0.ffn_up_exps.weight.lora_a",
                    &[8, 2, 3],
                    GgmlType::F32,
                    &[0.0; 48],
                )
                .unwrap();
                w.add_tensor_f32(
                    "blk.0.ffn_up_exps.weight.lora_b",
                    &[2, 12, 3],
                    GgmlType::F32,
                    &[0.0; 72],
                )
                .unwrap();
            }),
            |e| matches!(e, AdapterError::Shape(_)),
        ),
    ];
    for (what, edit, expect) in cases {
        let bytes = sample(|w| edit(w));
        match parse(&bytes) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => assert!(expect(&e), "{what}: refused for another reason: {e}"),
        }
    }
    // a factor one column short, and pairs that do not chain
    let short = sample(|w| {
        let mut fresh = GgufWriter::new();
        for (k, v) in w.kvs() {
            fresh.set(k, v.clone());
        }
        fresh
            .add_tensor_f32(
                "blk.0.attn_q.weight.lora_a",
                &[7, 2],
                GgmlType::F32,
                &[0.0; 14],
            )
            .unwrap();
        fresh
            .add_tensor_f32(
                "blk.0.attn_q.weight.lora_b",
                &[2, 8],
                GgmlType::F32,
                &[0.0; 16],
            )
            .unwrap();
        *w = fresh;
    });
    assert!(matches!(parse(&short), Err(AdapterError::Shape(_))));
    let unchained = sample(|w| {
        let mut fresh = GgufWriter::new();
        for (k, v) in w.kvs() {
            fresh.set(k, v.clone());
        }
        fresh
            .add_tensor_f32(
                "blk.0.attn_q.weight.lora_a",
                &[8, 2],
                GgmlType::F32,
                &[0.0; 16],
            )
            .unwrap();
        fresh
            .add_tensor_f32(
                "blk.0.attn_q.weight.lora_b",
                &[3, 8],
                GgmlType::F32,
                &[0.0; 24],
            )
            .unwrap();
        *w = fresh;
    });
    assert!(matches!(
        parse(&unchained),
        Err(AdapterError::NotTransposed)
    ));
    // Q8_0 factors: the harness's engine computes with F32/F16 only
    let q8 = sample(|w| {
        let mut fresh = GgufWriter::new();
        for (k, v) in w.kvs() {
            fresh.set(k, v.clone());
        }
        for (s, dims) in [("a", [32i64, 2]), ("b", [2, 8])] {
            let n = (dims[0] * dims[1]) as usize;
            let ty = if s == "a" {
                GgmlType::Q8_0
            } else {
                GgmlType::F32
            };
            fresh
                .add_tensor_f32(
                    &format!("blk.0.attn_q.weight.lora_{s}"),
                    &dims,
                    ty,
                    &vec![0.0; n],
                )
                .unwrap();
        }
        *w = fresh;
    });
    // (the model's attn_q is [8, 8]: ask with a [32, 8] one for this case)
    let shape32 = |n: &str| (n == "blk.0.attn_q.weight").then_some([32i64, 8, 1, 1]);
    assert!(matches!(
        parse_lora(&q8, "llama", &shape32, &type_ok),
        Err(AdapterError::Type { .. })
    ));
    // truncated anywhere: refused
    let good = sample(|_| {});
    for cut in (0..good.len()).step_by(7) {
        assert!(
            parse(&good[..cut]).is_err(),
            "accepted {cut} of {} bytes",
            good.len()
        );
    }
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/lora_reader")
}

/// The committed corpus and 3,000 seeded mutations of the sample (byte flips, overwrites,
/// cuts) through the fuzz harness: none may panic.
#[test]
fn lora_fuzz_harness_replay() {
    let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/lora_reader exists")
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(inputs.len() >= 3, "seed corpus looks incomplete");
    let base = sample(|_| {});
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..3000 {
        let mut m = base.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % m.len() as u64) as usize;
            match next() % 3 {
                0 => m[at] ^= 1 << (next() % 8),
                1 => m[at] = next() as u8,
                _ => m.truncate(at.max(1)),
            }
        }
        inputs.push(m);
    }
    for data in &inputs {
        check_lora(data);
    }
}

/// Writes the seed corpus (`cargo test --release --test adapter -- --ignored`).
#[test]
#[ignore]
fn write_seed_corpus() {
    let d = corpus_dir();
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("sample.gguf"), sample(|_| {})).unwrap();
    std::fs::write(
        d.join("alpha-string.gguf"),
        sample(|w| {
            w.set("adapter.lora.alpha", "four");
        }),
    )
    .unwrap();
    let s = sample(|_| {});
    std::fs::write(d.join("truncated.gguf"), &s[..s.len() / 2]).unwrap();
}

// ---- the C entry points on a tiny model ---------------------------------------------------

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("lhs-adapter-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn load(path: &Path) -> *mut llama_model {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let p = llama_model_default_params();
    // SAFETY: a valid path and default parameters.
    let m = unsafe { model::llama_model_load_from_file(c.as_ptr(), p) };
    assert!(!m.is_null());
    m
}

fn new_ctx(m: *mut llama_model) -> *mut llama_context {
    let mut p = llama_context_default_params();
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_ubatch = 16;
    p.n_threads = 1;
    p.n_threads_batch = 1;
    // SAFETY: a live model.
    let c = unsafe { context::llama_init_from_model(m, p) };
    assert!(!c.is_null());
    c
}

const PROMPT: [i32; 6] = [1, 17, 33, 250, 4, 98];

/// Clears the memory, decodes the prompt, returns the last token's logits.
fn logits(c: *mut llama_context) -> Vec<f32> {
    // SAFETY: a live context; the batch is filled within its sizes and freed.
    unsafe {
        memory::llama_memory_clear(context::llama_get_memory(c), true);
        let n = PROMPT.len() as i32;
        let mut b = batch::llama_batch_init(n, 0, 1);
        b.n_tokens = n;
        for (i, &t) in PROMPT.iter().enumerate() {
            *b.token.add(i) = t;
            *b.pos.add(i) = i as i32;
            *b.n_seq_id.add(i) = 1;
            **b.seq_id.add(i) = 0;
            *b.logits.add(i) = (i + 1 == PROMPT.len()) as i8;
        }
        assert_eq!(batch::llama_decode(c, b), 0);
        batch::llama_batch_free(b);
        std::slice::from_raw_parts(context::llama_get_logits_ith(c, -1), 320).to_vec()
    }
}

/// An adapter for `TinyLlamaOpts::default()` (n_embd 64, n_ff 128, n_vocab 320, untied):
/// attn_q and ffn_down of both layers, the token table and the output; F16 and F32 factors.
fn tiny_adapter(path: &Path) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("general.type", "adapter");
    w.set("adapter.type", "lora");
    w.set("adapter.lora.alpha", MetaValue::F32(8.0));
    let r = 4i64;
    let mut pairs: Vec<(String, [i64; 2], [i64; 2])> = Vec::new();
    for il in 0..2 {
        pairs.push((format!("blk.{il}.attn_q.weight"), [64, r], [r, 64]));
        pairs.push((format!("blk.{il}.ffn_down.weight"), [128, r], [r, 64]));
    }
    pairs.push(("token_embd.weight".into(), [r, 320], [r, 64]));
    pairs.push(("output.weight".into(), [64, r], [r, 320]));
    for (i, (name, a, b)) in pairs.iter().enumerate() {
        let ty = if i % 2 == 0 {
            GgmlType::F16
        } else {
            GgmlType::F32
        };
        let v = |n: i64, k: f32| -> Vec<f32> {
            (0..n)
                .map(|j| ((j * 37 + 11) % 101) as f32 / 101.0 * k - k / 2.0)
                .collect()
        };
        w.add_tensor_f32(&format!("{name}.lora_a"), a, ty, &v(a[0] * a[1], 0.5))
            .unwrap();
        w.add_tensor_f32(&format!("{name}.lora_b"), b, ty, &v(b[0] * b[1], 0.2))
            .unwrap();
    }
    w.write_to(path).unwrap();
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn set(c: *mut llama_context, a: &mut [*mut llama_adapter_lora], scales: &mut [f32]) -> i32 {
    // SAFETY: arrays of `a.len()` entries; the handles are checked by the callee.
    unsafe { adapter::llama_set_adapters_lora(c, a.as_mut_ptr(), a.len(), scales.as_mut_ptr()) }
}

#[test]
fn lora_through_the_c_api() {
    let d = dir("lora");
    let mpath = d.0.join("m.gguf");
    let apath = d.0.join("a.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&mpath)
        .unwrap();
    tiny_adapter(&apath);
    let m = load(&mpath);
    let c = new_ctx(m);
    let cpath = CString::new(apath.to_str().unwrap()).unwrap();
    // SAFETY: live handles, valid paths and buffers throughout.
    unsafe {
        let a = adapter::llama_adapter_lora_init(m, cpath.as_ptr());
        assert!(!a.is_null());
        assert_eq!(adapter::llama_adapter_meta_count(a), 4);
        assert_eq!(adapter::llama_adapter_get_alora_n_invocation_tokens(a), 0);
        let plain = logits(c);
        assert_eq!(set(c, &mut [a], &mut [1.0]), 0);
        let one = logits(c);
        assert!(
            max_diff(&plain, &one) > 1e-2,
            "the adapter moves the logits"
        );
        assert_eq!(set(c, &mut [a], &mut [0.5]), 0);
        let half = logits(c);
        assert!(max_diff(&one, &half) > 1e-3 && max_diff(&plain, &half) > 1e-3);
        assert_eq!(set(c, &mut [a], &mut [0.0]), 0);
        assert_eq!(logits(c), plain, "scale 0: the adapter is left out");
        assert_eq!(set(c, &mut [a], &mut [1.0]), 0);
        assert_eq!(logits(c), one, "the same scale: the same logits");
        assert_eq!(
            adapter::llama_set_adapters_lora(c, null_mut(), 0, null_mut()),
            0
        );
        assert_eq!(logits(c), plain, "cleared");

        // hostile: NULL arrays with a count, a dead handle, another model's adapter
        assert_eq!(
            adapter::llama_set_adapters_lora(c, null_mut(), 1, null_mut()),
            -1
        );
        let mut wild = [0x1234usize as *mut llama_adapter_lora];
        assert_eq!(set(c, &mut wild, &mut [1.0]), -1);
        let m2 = load(&mpath);
        let a2 = adapter::llama_adapter_lora_init(m2, cpath.as_ptr());
        assert!(!a2.is_null());
        assert_eq!(set(c, &mut [a2], &mut [1.0]), -1);
        assert_eq!(logits(c), plain, "refused calls change nothing");
        // the model frees its adapters: the handle is dead afterwards
        model::llama_model_free(m2);
        assert_eq!(adapter::llama_adapter_meta_count(a2), -1);
        adapter::llama_adapter_lora_free(a2); // refused with a log line, no double free

        // an adapter freed while set: the context keeps computing with it
        assert_eq!(set(c, &mut [a], &mut [1.0]), 0);
        adapter::llama_adapter_lora_free(a);
        assert_eq!(adapter::llama_adapter_meta_count(a), -1);
        assert_eq!(logits(c), one);

        // wrong model for the file: refused at load
        let other = d.0.join("o.gguf");
        let opts = TinyLlamaOpts {
            n_embd: 32,
            ..TinyLlamaOpts::default()
        };
        tiny_llama(&opts).unwrap().write_to(&other).unwrap();
        let mo = load(&other);
        assert!(adapter::llama_adapter_lora_init(mo, cpath.as_ptr()).is_null());
        assert!(adapter::llama_adapter_lora_init(mo, null()).is_null());
        assert!(adapter::llama_adapter_lora_init(null_mut(), cpath.as_ptr()).is_null());
        model::llama_model_free(mo);

        context::llama_free(c);
        model::llama_model_free(m);
    }
}

#[test]
fn control_vectors_through_the_c_api() {
    let d = dir("cvec");
    let mpath = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&mpath)
        .unwrap();
    let m = load(&mpath);
    let c = new_ctx(m);
    // one direction for layer 1 (the tiny model has layers 0 and 1)
    let dir1: Vec<f32> = (0..64).map(|i| ((i * 13) % 7) as f32 * 0.1 - 0.3).collect();
    // SAFETY: live handles; `dir1` holds 64 floats.
    unsafe {
        let plain = logits(c);
        assert_eq!(
            adapter::llama_set_adapter_cvec(c, dir1.as_ptr(), 64, 32, 1, 1),
            -1,
            "n_embd must be the model's"
        );
        assert_eq!(logits(c), plain);
        assert_eq!(
            adapter::llama_set_adapter_cvec(c, dir1.as_ptr(), 64, 64, 1, 1),
            0
        );
        let steered = logits(c);
        assert!(
            max_diff(&plain, &steered) > 1e-3,
            "the direction moves the logits"
        );
        assert_eq!(adapter::llama_set_adapter_cvec(c, null(), 0, 0, 0, 0), 0);
        assert_eq!(logits(c), plain, "turned off");
        // layers outside the range get nothing; a short buffer keeps the kept directions
        assert_eq!(
            adapter::llama_set_adapter_cvec(c, dir1.as_ptr(), 64, 64, 2, 9),
            0
        );
        assert_eq!(logits(c), plain);
        assert_eq!(
            adapter::llama_set_adapter_cvec(c, dir1.as_ptr(), 0, 64, 0, 1),
            0
        );
        assert_eq!(logits(c), steered, "len 0: layer 1 keeps its direction");
        assert_eq!(
            adapter::llama_set_adapter_cvec(null_mut(), null(), 0, 0, 0, 0),
            -1
        );
        context::llama_free(c);
        model::llama_model_free(m);
    }
}
