//! Fuzz harness for decode's batch intake: arbitrary bytes become a batch (token ids,
//! positions, sequence ids, output flags, each field possibly absent) decoded on a tiny
//! model; decode must return one of upstream's codes without panicking, and the memory must
//! stay consistent; with a unified KV cache and with one stream per sequence. Used by
//! `fuzz/fuzz_targets/batch_decode.rs` and replayed by the tests.

use std::sync::{Arc, OnceLock};

use super::{Context, ContextParams};

fn params(kv_unified: bool) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 16,
        n_ubatch: 5,
        n_seq_max: 3,
        n_threads: 1,
        n_threads_batch: 1,
        kv_unified,
        ..ContextParams::default()
    }
}

/// A tiny model loaded once per process.
fn model() -> &'static Arc<crate::model::Model> {
    static MODEL: OnceLock<Arc<crate::model::Model>> = OnceLock::new();
    MODEL.get_or_init(|| {
        let opts = crate::gguf::fixtures::TinyLlamaOpts {
            n_layer: 1,
            n_embd: 32,
            n_head: 2,
            n_head_kv: 1,
            n_ff: 32,
            n_vocab: 64,
            ..Default::default()
        };
        let bytes = crate::gguf::fixtures::tiny_llama(&opts)
            .and_then(|w| w.to_bytes())
            .expect("tiny model");
        let path = std::env::temp_dir().join(format!("lhs-batch-fuzz-{}.gguf", std::process::id()));
        std::fs::write(&path, bytes).expect("write the tiny model");
        let model = crate::loader::load(
            crate::loader::ModelSource::Path(path.clone()),
            crate::loader::LoadOptions {
                load_mode: crate::model::LoadMode::None,
                vocab_only: false,
                no_alloc: false,
                check_tensors: false,
                overrides: Vec::new(),
                progress: Some(&mut |_| true),
                placement: Default::default(),
                hotswap: false,
            },
        )
        .expect("load the tiny model");
        let _ = std::fs::remove_file(&path);
        Arc::new(model)
    })
}

/// Decodes the batch described by `data` (on a fresh context, after an optional prefix
/// decode) and checks the outcome, with each KV cache layout.
pub fn check_batch(data: &[u8]) {
    check_batch_on(data, true);
    check_batch_on(data, false);
}

fn check_batch_on(data: &[u8], kv_unified: bool) {
    let ctx = Context::new(Arc::clone(model()), &params(kv_unified)).expect("context");
    let mut bytes = data.iter().copied();
    let mut next = || bytes.next().unwrap_or(0);
    // a first, valid decode so that the memory has something in it
    let prefix = next() % 4;
    if prefix > 0 {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend((0..prefix as i32).map(|i| i + 1));
        drop(e);
        assert_eq!(ctx.decode(), 0);
    }
    let n = (next() % 20) as usize;
    let flags = next();
    {
        let mut e = ctx.engine();
        e.raw.clear();
        for _ in 0..n {
            let t = next() as i8 as i32; // negative and out-of-range ids too
            e.raw.tokens.push(t);
        }
        e.raw.has_pos = flags & 1 != 0;
        if e.raw.has_pos {
            for i in 0..n {
                let p = (i as i32) + (next() as i8 as i32) / 32;
                e.raw.pos.push(p);
            }
        }
        e.raw.has_seq = flags & 2 != 0;
        if e.raw.has_seq {
            for _ in 0..n {
                let k = (next() % 3) as usize;
                e.raw.seq_n.push(k);
                for _ in 0..k {
                    let s = (next() % 5) as i32 - 1;
                    e.raw.seq_flat.push(s);
                }
            }
        }
        e.raw.has_output = flags & 4 != 0;
        if e.raw.has_output {
            for _ in 0..n {
                let o = next() & 1 != 0;
                e.raw.output.push(o);
            }
        }
        e.raw.has_embd = flags & 8 != 0 && flags & 16 != 0;
    }
    let used_before = ctx.engine().kv.used();
    let code = ctx.decode();
    assert!((-1..=1).contains(&code), "decode returned {code}");
    let e = ctx.engine();
    if code != 0 {
        assert_eq!(
            e.kv.used(),
            used_before,
            "a refused batch changed the memory"
        );
    } else {
        assert!(e.logits.iter().all(|v| v.is_finite()));
        assert_eq!(e.logits.len(), e.n_outputs * 64);
    }
    for s in 0..3 {
        let (lo, hi) = (e.kv.seq_pos_min(s), e.kv.seq_pos_max(s));
        assert!(lo <= hi && (lo >= 0 || hi == -1));
    }
}
