//! The engine through the C entry points: context getters, hostile batches (NULL arrays,
//! out-of-range ids, wrong sizes) with upstream's return codes, logits lookups with upstream's
//! index rules, the memory API through `llama_get_memory`, the abort callback, and context
//! creation refusing architectures the engine does not run.

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};

use llama::ffi::backend::{llama_context_default_params, llama_model_default_params};
use llama::ffi::handles::{llama_context, llama_model};
use llama::ffi::types::*;
use llama::ffi::{batch, context, memory, model};
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::GgufWriter;

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("lhs-engine-ffi-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn load(path: &Path) -> *mut llama_model {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut p = llama_model_default_params();
    p.n_gpu_layers = 0;
    // SAFETY: a valid path and default parameters.
    let m = unsafe { model::llama_model_load_from_file(c.as_ptr(), p) };
    assert!(!m.is_null());
    m
}

fn new_ctx(m: *mut llama_model, n_seq_max: u32) -> *mut llama_context {
    let mut p = llama_context_default_params();
    p.n_ctx = 256;
    p.n_batch = 32;
    p.n_ubatch = 32;
    p.n_seq_max = n_seq_max;
    p.n_threads = 1;
    p.n_threads_batch = 2;
    // SAFETY: a live model.
    unsafe { context::llama_init_from_model(m, p) }
}

fn setup(tag: &str) -> (Dir, *mut llama_model, *mut llama_context) {
    let d = dir(tag);
    let path = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&path)
        .unwrap();
    let m = load(&path);
    let c = new_ctx(m, 2);
    assert!(!c.is_null());
    (d, m, c)
}

/// A batch from vectors (kept alive by the caller).
struct Owned {
    tokens: Vec<llama_token>,
    pos: Vec<llama_pos>,
    n_seq: Vec<i32>,
    seq_rows: Vec<Vec<llama_seq_id>>,
    seq_ptrs: Vec<*mut llama_seq_id>,
    logits: Vec<i8>,
}

impl Owned {
    fn new(tokens: &[i32], pos: &[i32], seq: &[i32], logits: &[i8]) -> Owned {
        let mut o = Owned {
            tokens: tokens.to_vec(),
            pos: pos.to_vec(),
            n_seq: vec![1; tokens.len()],
            seq_rows: seq.iter().map(|&s| vec![s]).collect(),
            seq_ptrs: Vec::new(),
            logits: logits.to_vec(),
        };
        o.seq_ptrs = o.seq_rows.iter_mut().map(|r| r.as_mut_ptr()).collect();
        o
    }

    fn batch(&mut self) -> llama_batch {
        llama_batch {
            n_tokens: self.tokens.len() as i32,
            token: self.tokens.as_mut_ptr(),
            embd: null_mut(),
            pos: self.pos.as_mut_ptr(),
            n_seq_id: self.n_seq.as_mut_ptr(),
            seq_id: self.seq_ptrs.as_mut_ptr(),
            logits: self.logits.as_mut_ptr(),
        }
    }
}

#[test]
fn getters_report_upstreams_resolved_values() {
    let (_d, m, c) = setup("getters");
    // SAFETY: live handles from setup.
    unsafe {
        // not kv_unified: n_ctx_seq = pad256(256 / 2) = 256, n_ctx = 2 * 256 (upstream
        // warns "n_ctx is not divisible by n_seq_max - rounding down to 512")
        assert_eq!(context::llama_n_ctx(c), 512);
        assert_eq!(context::llama_n_batch(c), 32);
        assert_eq!(context::llama_n_ubatch(c), 32);
        assert_eq!(context::llama_n_seq_max(c), 2);
        assert_eq!(context::llama_n_ctx_seq(c), 256);
        assert_eq!(context::llama_n_threads(c), 1);
        assert_eq!(context::llama_n_threads_batch(c), 2);
        context::llama_set_n_threads(c, 3, 4);
        assert_eq!(
            (
                context::llama_n_threads(c),
                context::llama_n_threads_batch(c)
            ),
            (3, 4)
        );
        assert!(context::llama_get_causal_attn(c));
        context::llama_set_causal_attn(c, false);
        assert!(!context::llama_get_causal_attn(c));
        context::llama_set_causal_attn(c, true);
        assert_eq!(context::llama_pooling_type(c).0, 0);
        assert!(!context::llama_get_memory(c).is_null());
        assert!(memory::llama_memory_can_shift(context::llama_get_memory(c)));
        assert!(
            context::llama_get_logits(c).is_null(),
            "no logits before a decode"
        );
        // n_ctx 100 pads to 256; n_batch is capped at n_ctx
        let mut p = llama_context_default_params();
        p.n_ctx = 100;
        p.n_batch = 4096;
        p.n_ubatch = 0;
        let c2 = context::llama_init_from_model(m, p);
        assert_eq!(context::llama_n_ctx(c2), 256);
        assert_eq!(context::llama_n_batch(c2), 100);
        assert_eq!(context::llama_n_ubatch(c2), 100);
        context::llama_free(c2);
        context::llama_free(c);
        model::llama_model_free(m);
    }
}

#[test]
fn hostile_batches_through_the_c_api() {
    let (_d, m, c) = setup("hostile");
    // SAFETY: live handles; every batch's arrays live in `Owned` values during the call.
    unsafe {
        let mut ok = Owned::new(&[1, 2, 3], &[0, 1, 2], &[0, 0, 0], &[0, 0, 1]);
        // NULL token and embd
        let mut b = ok.batch();
        b.token = null_mut();
        assert_eq!(batch::llama_decode(c, b), -1);
        // empty, negative n_tokens
        let mut b = ok.batch();
        b.n_tokens = 0;
        assert_eq!(batch::llama_decode(c, b), -1);
        b.n_tokens = -5;
        assert_eq!(batch::llama_decode(c, b), -1);
        // a NULL row in seq_id
        let mut bad = Owned::new(&[1, 2], &[0, 1], &[0, 0], &[1, 1]);
        bad.seq_ptrs[1] = null_mut();
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        // n_seq_id out of range
        let mut bad = Owned::new(&[1], &[0], &[0], &[1]);
        bad.n_seq[0] = -1;
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        bad.n_seq[0] = 1000;
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        // seq_id == n_seq_max
        let mut bad = Owned::new(&[1], &[0], &[2], &[1]);
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        // token id out of range
        let mut bad = Owned::new(&[320], &[0], &[0], &[1]);
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        // more tokens than n_batch
        let n = 33;
        let mut bad = Owned::new(
            &vec![1; n],
            &(0..n as i32).collect::<Vec<_>>(),
            &vec![0; n],
            &vec![0; n],
        );
        assert_eq!(batch::llama_decode(c, bad.batch()), -1);
        // input embeddings (token NULL): decoded into the memory, with logits; an
        // embeddings batch is not checked against the vocabulary
        let n_embd = model::llama_model_n_embd(m) as usize;
        let mut e: Vec<f32> = (0..3 * n_embd)
            .map(|i| (i as f32 * 0.37).sin() * 0.1)
            .collect();
        let mut b = ok.batch();
        b.token = null_mut();
        b.embd = e.as_mut_ptr();
        assert_eq!(batch::llama_decode(c, b), 0);
        assert!(!context::llama_get_logits_ith(c, 2).is_null());
        let mem = context::llama_get_memory(c);
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 0), 2);
        memory::llama_memory_clear(mem, true);
        assert_eq!(
            memory::llama_memory_seq_pos_max(mem, 0),
            -1,
            "nothing was stored"
        );

        // a good batch, then logits lookups
        assert_eq!(batch::llama_decode(c, ok.batch()), 0);
        assert!(!context::llama_get_logits(c).is_null());
        let last = context::llama_get_logits_ith(c, 2);
        assert!(!last.is_null());
        assert_eq!(context::llama_get_logits_ith(c, -1), last);
        assert!(
            context::llama_get_logits_ith(c, 0).is_null(),
            "token 0 had no output"
        );
        assert!(context::llama_get_logits_ith(c, 3).is_null());
        assert!(context::llama_get_logits_ith(c, -2).is_null());
        // positions going backwards / not continuing the memory
        let mut back = Owned::new(&[4], &[1], &[0], &[1]);
        assert_eq!(batch::llama_decode(c, back.batch()), -1);
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 0), 2);
        // llama_batch_get_one continues the positions
        let mut tok = [5];
        assert_eq!(
            batch::llama_decode(c, batch::llama_batch_get_one(tok.as_mut_ptr(), 1)),
            0
        );
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 0), 3);
        // memory API through the handle
        memory::llama_memory_seq_cp(mem, 0, 1, -1, -1);
        assert_eq!(memory::llama_memory_seq_pos_min(mem, 1), 0);
        assert!(memory::llama_memory_seq_rm(mem, 1, 2, -1));
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 1), 1);
        assert!(
            !memory::llama_memory_seq_rm(mem, 7, -1, -1),
            "seq id >= n_seq_max"
        );
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 7), -1);
        // one KV stream per sequence (kv_unified = false, the default): seq_keep acts on the
        // stream of sequence 1 only and sequence 0 keeps its own, as upstream's
        memory::llama_memory_seq_keep(mem, 1);
        assert_eq!(
            memory::llama_memory_seq_pos_max(mem, 0),
            3,
            "sequence 0 keeps its stream"
        );
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 1), 1);
        memory::llama_memory_clear(mem, true);
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 1), -1);

        context::llama_free(c);
        model::llama_model_free(m);
    }
}

unsafe extern "C" fn abort_after(data: *mut c_void) -> bool {
    // SAFETY: the test passes a live counter.
    let n = unsafe { &mut *(data as *mut i32) };
    *n -= 1;
    *n < 0
}

#[test]
fn abort_callback_stops_decode_with_2_and_rolls_back() {
    let (_d, m, c) = setup("abort");
    let mut budget = 0i32;
    // SAFETY: live handles; `budget` outlives the decode calls.
    unsafe {
        context::llama_set_abort_callback(c, Some(abort_after), (&mut budget as *mut i32).cast());
        let mut b = Owned::new(&[1, 2, 3], &[0, 1, 2], &[0, 0, 0], &[1, 1, 1]);
        assert_eq!(batch::llama_decode(c, b.batch()), 2);
        let mem = context::llama_get_memory(c);
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 0), -1);
        context::llama_set_abort_callback(c, None, null_mut());
        assert_eq!(batch::llama_decode(c, b.batch()), 0);
        assert_eq!(memory::llama_memory_seq_pos_max(mem, 0), 2);
        context::llama_free(c);
        model::llama_model_free(m);
    }
}

#[test]
fn unsupported_architecture_fails_context_creation() {
    let d = dir("arch");
    let path = d.0.join("m.gguf");
    let base = tiny_llama(&TinyLlamaOpts::default()).unwrap();
    // the same tensors under another architecture name
    let mut w = GgufWriter::new();
    for (k, v) in base.kvs() {
        let key = k.replacen("llama.", "starcoder2.", 1);
        w.set(&key, v.clone());
    }
    w.set("general.architecture", "starcoder2");
    for t in base.tensors() {
        if let llama::gguf::writer::TensorData::Bytes(b) = &t.data {
            w.add_tensor(&t.name, &t.dims, t.ggml_type, b.clone())
                .unwrap();
        }
    }
    w.write_to(&path).unwrap();
    let m = load(&path);
    let c = new_ctx(m, 1);
    assert!(c.is_null(), "starcoder2 is not run by the engine");
    // SAFETY: a live model.
    unsafe { model::llama_model_free(m) };
    let _ = null::<u8>();
}

/// Replays the batch fuzz harness over pseudo-random inputs (the fuzz target runs it on
/// libFuzzer's inputs).
#[test]
fn batch_fuzz_harness_replay() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..600usize {
        let data: Vec<u8> = (0..len % 97)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        llama::context::harness::check_batch(&data);
    }
}

#[test]
fn extended_batches_decode_like_llama_batch() {
    let (_d, m, c) = setup("ext");
    // SAFETY: live handles; the ext batch is freed before the context.
    unsafe {
        let mut plain = Owned::new(&[1, 7, 9], &[0, 1, 2], &[0, 0, 0], &[0, 1, 1]);
        assert_eq!(batch::llama_decode(c, plain.batch()), 0);
        let n_vocab = 320;
        let want: Vec<f32> =
            std::slice::from_raw_parts(context::llama_get_logits(c), 2 * n_vocab).to_vec();
        memory::llama_memory_clear(context::llama_get_memory(c), true);

        let b = batch::llama_batch_ext_init(c);
        assert!(!b.is_null());
        for (i, t) in [1, 7, 9].into_iter().enumerate() {
            let idx = batch::llama_batch_ext_add_token(b, 0, t);
            assert_eq!(idx, i as i32);
            let p = i as i32;
            assert!(batch::llama_batch_ext_set_pos(b, idx, &p));
            assert!(batch::llama_batch_ext_set_output_logits(b, idx, i > 0));
        }
        assert_eq!(
            batch::llama_batch_ext_add_token(b, 2, 1),
            -3,
            "seq id >= n_seq_max"
        );
        assert_eq!(
            batch::llama_batch_ext_add_token(b, 0, 999),
            -2,
            "token id >= n_vocab"
        );
        assert!(!batch::llama_batch_ext_set_pos(b, 99, &0));
        // drop the entry left without a token by the -2 above: rebuild
        batch::llama_batch_ext_clear(b);
        for (i, t) in [1, 7, 9].into_iter().enumerate() {
            let idx = batch::llama_batch_ext_add_token(b, 0, t);
            let p = i as i32;
            batch::llama_batch_ext_set_pos(b, idx, &p);
            batch::llama_batch_ext_set_output_logits(b, idx, i > 0);
        }
        assert_eq!(batch::llama_process(c, LlamaProcessType(1), b), 0);
        let got = std::slice::from_raw_parts(context::llama_get_logits(c), 2 * n_vocab);
        assert_eq!(got, &want[..]);
        assert_eq!(
            batch::llama_process(c, LlamaProcessType(0), b),
            -1,
            "encode"
        );
        // an entry without a token id
        batch::llama_batch_ext_clear(b);
        assert_eq!(batch::llama_batch_ext_add(b, 0), 0);
        assert_eq!(batch::llama_process(c, LlamaProcessType(1), b), -1);
        // full at n_batch
        batch::llama_batch_ext_clear(b);
        for _ in 0..32 {
            assert!(batch::llama_batch_ext_add_token(b, 0, 1) >= 0);
        }
        assert_eq!(batch::llama_batch_ext_add_token(b, 0, 1), -1);
        batch::llama_batch_ext_free(b);
        context::llama_free(c);
        model::llama_model_free(m);
    }
}

/// Through `llama_ext_tensor_read`, an owned load (use_mmap = false) whose Q4_0 weights are
/// held only in their repacked layout hands back every tensor byte-identical to a mapped
/// load of the same file (the file's bytes).
#[test]
fn an_owned_repacked_load_reads_back_the_file_bytes_through_the_extension_api() {
    let d = dir("owned-repacked-read");
    let path = d.0.join("m.gguf");
    let opts = TinyLlamaOpts {
        n_embd: 256,
        n_ff: 512,
        ..TinyLlamaOpts::with_type(llama::gguf::GgmlType::Q4_0)
    };
    tiny_llama(&opts).unwrap().write_to(&path).unwrap();
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let open = |mmap: bool| {
        let mut p = llama_model_default_params();
        p.n_gpu_layers = 0;
        p.load_mode = LlamaLoadMode(if mmap { 1 } else { 0 });
        // SAFETY: a valid path and parameters.
        let m = unsafe { model::llama_model_load_from_file(c.as_ptr(), p) };
        assert!(!m.is_null());
        m
    };
    let (mapped, owned) = (open(true), open(false));
    let read = |m: *mut llama_model, name: &CString| {
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: a live model, a C string, and a buffer of the size given.
        let n = unsafe {
            llama::ffi::ext::llama_ext_tensor_read(
                m,
                name.as_ptr(),
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
            )
        };
        assert!(n > 0, "{name:?}: {n}");
        buf.truncate(n as usize);
        buf
    };
    for spec in llama::gguf::fixtures::llama_tensor_specs(&opts) {
        let name = CString::new(spec.name.clone()).unwrap();
        assert!(
            read(mapped, &name) == read(owned, &name),
            "{}: the owned load reads back the file's bytes",
            spec.name
        );
    }
    // SAFETY: live models, freed once.
    unsafe {
        model::llama_model_free(mapped);
        model::llama_model_free(owned);
    }
}
