//! State and sessions through the C entry points on a tiny model: whole and sequence states
//! round-trip (buffers and files, flash attention on and off, one KV stream and one per
//! sequence), restores into another sequence, the flags (`PARTIAL_ONLY`, `ON_DEVICE`), the
//! deprecated aliases, and a replay of the state reader's fuzz harness. Byte compatibility
//! with upstream is `make test-differential`'s (ffi-tests/diff_state.c).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;

use llama::ffi::backend::{llama_context_default_params, llama_model_default_params};
use llama::ffi::handles::{llama_context, llama_model};
use llama::ffi::types::LlamaFlashAttnType;
use llama::ffi::{batch, context, memory, model, state};
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("lhs-state-{}-{tag}", std::process::id()));
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

fn new_ctx(m: *mut llama_model, n_seq_max: u32, unified: bool, fa: bool) -> *mut llama_context {
    let mut p = llama_context_default_params();
    p.n_ctx = 256;
    p.n_batch = 32;
    p.n_ubatch = 32;
    p.n_seq_max = n_seq_max;
    p.n_threads = 1;
    p.n_threads_batch = 1;
    p.kv_unified = unified;
    p.flash_attn_type = LlamaFlashAttnType(fa as i32);
    // SAFETY: a live model.
    let c = unsafe { context::llama_init_from_model(m, p) };
    assert!(!c.is_null());
    c
}

/// Decodes `tokens` into sequence `seq` from position `pos0`; returns the last token's logits.
fn decode(c: *mut llama_context, tokens: &[i32], pos0: i32, seq: i32) -> Vec<f32> {
    let n = tokens.len() as i32;
    // SAFETY: a live context; the batch is filled within its sizes and freed.
    unsafe {
        let mut b = batch::llama_batch_init(n, 0, 1);
        b.n_tokens = n;
        for (i, &t) in tokens.iter().enumerate() {
            *b.token.add(i) = t;
            *b.pos.add(i) = pos0 + i as i32;
            *b.n_seq_id.add(i) = 1;
            **b.seq_id.add(i) = seq;
            *b.logits.add(i) = (i + 1 == tokens.len()) as i8;
        }
        assert_eq!(batch::llama_decode(c, b), 0);
        batch::llama_batch_free(b);
        let l = context::llama_get_logits_ith(c, -1);
        std::slice::from_raw_parts(l, 320).to_vec()
    }
}

fn get_state(c: *mut llama_context) -> Vec<u8> {
    // SAFETY: a live context; the buffer has the size asked for.
    unsafe {
        let n = state::llama_state_get_size(c);
        assert!(n > 0);
        let mut v = vec![0u8; n];
        assert_eq!(state::llama_state_get_data(c, v.as_mut_ptr(), n), n);
        v
    }
}

fn get_seq(c: *mut llama_context, seq: i32, flags: u32) -> Vec<u8> {
    // SAFETY: a live context; the buffer has the size asked for.
    unsafe {
        let n = state::llama_state_seq_get_size_ext(c, seq, flags);
        assert!(n > 0);
        let mut v = vec![0u8; n];
        assert_eq!(
            state::llama_state_seq_get_data_ext(c, v.as_mut_ptr(), n, seq, flags),
            n
        );
        v
    }
}

fn positions(c: *mut llama_context, seq: i32) -> (i32, i32) {
    // SAFETY: a live context.
    unsafe {
        let mem = context::llama_get_memory(c);
        (
            memory::llama_memory_seq_pos_min(mem, seq),
            memory::llama_memory_seq_pos_max(mem, seq),
        )
    }
}

const PROMPT: [i32; 7] = [1, 17, 33, 250, 4, 98, 7];

#[test]
fn whole_state_round_trips_through_buffers_and_files() {
    let d = dir("whole");
    let path = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&path)
        .unwrap();
    let m = load(&path);
    for fa in [false, true] {
        let a = new_ctx(m, 1, false, fa);
        decode(a, &PROMPT, 0, 0);
        let saved = get_state(a);
        let session = CString::new(d.0.join("s.bin").to_str().unwrap()).unwrap();
        // SAFETY: live handles, valid buffers.
        unsafe {
            assert!(state::llama_state_save_file(
                a,
                session.as_ptr(),
                PROMPT.as_ptr(),
                PROMPT.len()
            ));
            // the deprecated forms agree
            assert_eq!(state::llama_get_state_size(a), saved.len());
            let mut copy = vec![0u8; saved.len()];
            assert_eq!(
                state::llama_copy_state_data(a, copy.as_mut_ptr()),
                saved.len()
            );
            assert_eq!(copy, saved);
        }
        let want = decode(a, &[42], PROMPT.len() as i32, 0);

        // a buffer into a fresh context
        let b = new_ctx(m, 1, false, fa);
        // SAFETY: live handles, valid buffers.
        unsafe {
            assert_eq!(
                state::llama_state_set_data(b, saved.as_ptr(), saved.len()),
                saved.len()
            );
        }
        assert_eq!(positions(b, 0), (0, PROMPT.len() as i32 - 1));
        assert_eq!(get_state(b), saved);
        assert_eq!(decode(b, &[42], PROMPT.len() as i32, 0), want);

        // a session file, through the deprecated alias, into a context that decoded other text
        let c = new_ctx(m, 1, false, fa);
        decode(c, &[5, 6, 7, 8, 9, 10, 11, 12, 13], 0, 0);
        let mut toks = [0i32; 16];
        let mut n = 0usize;
        // SAFETY: live handles; room for 16 tokens.
        unsafe {
            assert!(state::llama_load_session_file(
                c,
                session.as_ptr(),
                toks.as_mut_ptr(),
                16,
                &mut n
            ));
        }
        assert_eq!(&toks[..n], &PROMPT);
        assert_eq!(positions(c, 0), (0, PROMPT.len() as i32 - 1));
        assert_eq!(decode(c, &[42], PROMPT.len() as i32, 0), want);
        // SAFETY: live contexts, freed once.
        unsafe {
            context::llama_free(a);
            context::llama_free(b);
            context::llama_free(c);
        }
    }
    // SAFETY: a live model, freed once.
    unsafe { model::llama_model_free(m) };
}

#[test]
fn sequence_states_move_between_sequences_and_contexts() {
    let d = dir("seq");
    let path = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&path)
        .unwrap();
    let m = load(&path);
    for unified in [true, false] {
        let a = new_ctx(m, 2, unified, false);
        decode(a, &PROMPT, 0, 0);
        decode(a, &[3, 4, 5], 0, 1);
        let s0 = get_seq(a, 0, 0);
        let want = decode(a, &[42], PROMPT.len() as i32, 0);
        // restored into sequence 1 (replacing what it held), the same continuation
        // SAFETY: live handles, valid buffers.
        unsafe {
            assert_eq!(
                state::llama_state_seq_set_data(a, s0.as_ptr(), s0.len(), 1),
                s0.len()
            );
        }
        assert_eq!(positions(a, 1), (0, PROMPT.len() as i32 - 1));
        // other cells than sequence 0's (in a shared stream): attention sums in another
        // order, so equal to rounding
        let got = decode(a, &[42], PROMPT.len() as i32, 1);
        assert!(
            got.iter().zip(&want).all(|(x, y)| (x - y).abs() <= 1e-5),
            "{unified}"
        );

        // a sequence file into another context's sequence 0, tokens counted first
        let file = CString::new(d.0.join("q.bin").to_str().unwrap()).unwrap();
        let b = new_ctx(m, 2, unified, false);
        let mut toks = [0i32; 16];
        let mut n = 0usize;
        let want;
        // SAFETY: live handles, valid buffers.
        unsafe {
            let c2 = new_ctx(m, 2, unified, false);
            decode(c2, &PROMPT, 0, 0);
            let written = state::llama_state_seq_save_file(
                c2,
                file.as_ptr(),
                0,
                PROMPT.as_ptr(),
                PROMPT.len(),
            );
            // the same cells as the restored context will hold: bit for bit
            want = decode(c2, &[42], PROMPT.len() as i32, 0);
            assert_eq!(
                written,
                std::fs::metadata(d.0.join("q.bin")).unwrap().len() as usize
            );
            assert_eq!(
                state::llama_state_seq_load_file(b, file.as_ptr(), 0, null_mut(), 0, &mut n),
                12
            );
            assert_eq!((n, positions(b, 0)), (PROMPT.len(), (-1, -1)));
            let read = state::llama_state_seq_load_file(
                b,
                file.as_ptr(),
                0,
                toks.as_mut_ptr(),
                16,
                &mut n,
            );
            assert_eq!(read, written);
            context::llama_free(c2);
        }
        assert_eq!(&toks[..n], &PROMPT);
        assert_eq!(decode(b, &[42], PROMPT.len() as i32, 0), want);
        // SAFETY: live contexts, freed once.
        unsafe {
            context::llama_free(a);
            context::llama_free(b);
        }
    }
    // SAFETY: a live model, freed once.
    unsafe { model::llama_model_free(m) };
}

#[test]
fn flags_partial_only_and_on_device() {
    let d = dir("flags");
    let path = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&path)
        .unwrap();
    let m = load(&path);
    let a = new_ctx(m, 2, true, true);
    decode(a, &PROMPT, 0, 0);
    // without a sliding window, PARTIAL_ONLY is the whole sequence state (upstream's KV cache
    // ignores the flag)
    assert_eq!(get_seq(a, 0, 1), get_seq(a, 0, 0));
    // ON_DEVICE: the buffer holds the metadata only, the context keeps the rows
    let full = get_seq(a, 0, 0);
    let meta = get_seq(a, 0, 2);
    assert!(meta.len() < full.len());
    let want = decode(a, &[42], PROMPT.len() as i32, 0);
    // SAFETY: live handles, valid buffers.
    unsafe {
        assert_eq!(
            state::llama_state_seq_set_data_ext(a, meta.as_ptr(), meta.len(), 1, 2),
            meta.len()
        );
        // without the flag the same buffer is short of its rows
        assert_eq!(
            state::llama_state_seq_set_data_ext(a, meta.as_ptr(), meta.len(), 1, 0),
            0
        );
    }
    assert_eq!(decode(a, &[42], PROMPT.len() as i32, 1), want);
    // a sequence that kept nothing: a failure, not a crash
    let other = get_seq(a, 1, 0);
    let mut patched = other.clone();
    patched[4..8].copy_from_slice(&5i32.to_le_bytes());
    // SAFETY: live handles, valid buffers.
    unsafe {
        assert_eq!(
            state::llama_state_seq_set_data_ext(a, patched.as_ptr(), patched.len(), 1, 2),
            0
        );
        context::llama_free(a);
        model::llama_model_free(m);
    }
}

/// Replays the state reader's fuzz harness over pseudo-random inputs of every mode (the
/// fuzz target runs it on libFuzzer's).
#[test]
fn state_fuzz_harness_replay() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..400usize {
        let mut data: Vec<u8> = (0..(i % 61) + 1)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        data[0] = i as u8;
        llama::context::harness::check_state(&data);
    }
}

/// Positions are the state's to choose (upstream checks none): a cell at the largest
/// position restores, and the next decode (whose position would overflow) fails cleanly.
#[test]
fn extreme_positions_restore_and_decode_fails_cleanly() {
    let d = dir("extreme");
    let path = d.0.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::default())
        .unwrap()
        .write_to(&path)
        .unwrap();
    let m = load(&path);
    let a = new_ctx(m, 1, false, false);
    decode(a, &PROMPT, 0, 0);
    let mut s = get_state(a);
    let arch_len = u32::from_le_bytes(s[0..4].try_into().unwrap()) as usize;
    let cells = 4 + arch_len + 8;
    for (i, p) in [(0usize, 5i32), (6, i32::MAX)] {
        s[cells + 12 * i..cells + 12 * i + 4].copy_from_slice(&p.to_le_bytes());
    }
    // SAFETY: live handles, valid buffers; the batch points at a live local.
    unsafe {
        assert_eq!(state::llama_state_set_data(a, s.as_ptr(), s.len()), s.len());
        assert_eq!(positions(a, 0), (1, i32::MAX));
        let mut t = [42i32];
        let rc = batch::llama_decode(a, batch::llama_batch_get_one(t.as_mut_ptr(), 1));
        assert_ne!(rc, 0, "a position past i32::MAX cannot decode");
        context::llama_free(a);
        model::llama_model_free(m);
    }
}
