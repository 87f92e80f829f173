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

/// Fuzz harness for the state reader: `data` is a state (whole or of a sequence), or
/// mutations of a valid one, offered to every restore path of a context that holds two
/// decoded sequences. Byte 0 picks the context (bit 0: unified KV cache, bit 1: flash
/// attention) and the input (bits 2..4: raw bytes; a whole / sequence state with bytes
/// overwritten at positions the rest of the data gives; a truncated one). A restore must
/// either fail leaving the state byte for byte as it was, or succeed into a memory whose
/// state writes and reads back unchanged and that still decodes. Used by
/// `fuzz/fuzz_targets/state_reader.rs` and replayed by `tests/state.rs`.
pub fn check_state(data: &[u8]) {
    use crate::kv_cache::state::{SliceSource, StateOut};
    let mode = data.first().copied().unwrap_or(0);
    let rest = data.get(1..).unwrap_or(&[]);
    let p = ContextParams {
        flash_attn_type: (mode >> 1 & 1) as i32,
        n_seq_max: 2,
        ..params(mode & 1 != 0)
    };
    let ctx = Context::new(Arc::clone(model()), &p).expect("context");
    {
        let mut e = ctx.engine();
        e.raw.clear();
        e.raw.tokens.extend([1, 5, 9, 2, 7, 3]);
        e.raw.has_seq = true;
        for s in [0, 0, 0, 1, 1, 0] {
            e.raw.seq_n.push(1);
            e.raw.seq_flat.push(s);
        }
    }
    assert_eq!(ctx.decode(), 0);
    let whole = |c: &Context| {
        let mut v = Vec::new();
        c.state_write(StateOut::Bytes(&mut v)).expect("a state");
        v
    };
    let before = whole(&ctx);
    let mut seq0 = Vec::new();
    ctx.state_seq_write(Some(&mut seq0), 0, 0)
        .expect("a sequence state");
    let input: Vec<u8> = match (mode >> 2) % 4 {
        0 => rest.to_vec(),
        k => {
            let mut v = if k == 2 { seq0.clone() } else { before.clone() };
            if k == 3 {
                let cut = rest
                    .iter()
                    .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize));
                v.truncate(cut % (v.len() + 1));
            } else {
                for pair in rest.chunks(3) {
                    if pair.len() == 3 && !v.is_empty() {
                        let at = (usize::from(pair[0]) << 8 | usize::from(pair[1])) * 7 % v.len();
                        v[at] = pair[2];
                    }
                }
            }
            v
        }
    };
    for target in [None, Some(0), Some(1)] {
        let mut src = SliceSource::new(&input);
        let outcome = match target {
            None => ctx.state_read(&mut src),
            Some(s) => ctx.state_seq_read(&mut src, s, 0),
        };
        let now = whole(&ctx);
        match outcome {
            Err(_) => assert!(now == before, "a failed restore changed the state"),
            Ok(_) => {
                // what was installed writes and reads back to the same bytes
                let mut src = SliceSource::new(&now);
                ctx.state_read(&mut src).expect("our own state reads back");
                assert_eq!(
                    whole(&ctx),
                    now,
                    "a restored state does not read back unchanged"
                );
                let e = ctx.engine();
                for s in 0..2 {
                    let (lo, hi) = (e.kv.seq_pos_min(s), e.kv.seq_pos_max(s));
                    assert!(lo <= hi && (lo >= 0 || hi == -1));
                }
                drop(e);
                let mut e = ctx.engine();
                e.raw.clear();
                e.raw.tokens.push(4);
                drop(e);
                assert!(
                    (0..=1).contains(&ctx.decode()),
                    "decode after a restore failed"
                );
            }
        }
        // each target starts from the decoded prompt again
        let mut src = SliceSource::new(&before);
        ctx.state_read(&mut src)
            .expect("the saved state reads back");
        assert_eq!(whole(&ctx), before);
    }
}
