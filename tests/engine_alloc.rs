//! Decoding allocates nothing per token once warm: single-token steps after a first step
//! of the same shape make no heap allocation (a counting global allocator checks it).
//! It counts every thread on purpose: the kernel pool's workers run the decode too, and one
//! that takes its first task of a kind late (descheduled under load) must not allocate then.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use llama::context::{Context, ContextParams};
use llama::gguf::fixtures::{tiny_llama, TinyLlamaOpts};
use llama::gguf::GgmlType;
use llama::loader::{load, LoadOptions, ModelSource};
use llama::model::LoadMode;

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test for both cases: the counter is process-wide, so they must not run in parallel.
#[test]
fn single_token_steps_allocate_nothing() {
    for flash_attn_type in [-1, 0] {
        // F32 weights, and Q4_0 ones (repacked on AVX2: the repacked product's buffers too)
        for ty in [GgmlType::F32, GgmlType::Q4_0] {
            steps_allocate_nothing(ty, true, 1, flash_attn_type);
        }
        // with one KV stream per sequence: steps of two sequences in one batch (split per stream)
        steps_allocate_nothing(GgmlType::F32, false, 2, flash_attn_type);
    }
}

fn steps_allocate_nothing(ty: GgmlType, kv_unified: bool, n_seq: usize, flash_attn_type: i32) {
    let dir = std::env::temp_dir().join(format!(
        "lhs-engine-alloc-{}-{ty}-{kv_unified}-{flash_attn_type}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    tiny_llama(&TinyLlamaOpts::with_type(ty))
        .unwrap()
        .write_to(&path)
        .unwrap();
    let model = Arc::new(
        load(
            ModelSource::Path(path.clone()),
            LoadOptions {
                load_mode: LoadMode::Auto,
                vocab_only: false,
                no_alloc: false,
                check_tensors: false,
                overrides: Vec::new(),
                progress: Some(&mut |_| true),
                placement: Default::default(),
                hotswap: false,
            },
        )
        .unwrap(),
    );
    let ctx = Context::new(
        model,
        &ContextParams {
            n_ctx: 256,
            n_batch: 64,
            n_ubatch: 64,
            n_seq_max: n_seq as u32,
            n_threads: 2,
            n_threads_batch: 2,
            kv_unified,
            flash_attn_type,
            ..ContextParams::default()
        },
    )
    .unwrap();
    let step = |tok: i32| {
        {
            let mut e = ctx.engine();
            e.raw.clear();
            // one token per sequence, automatic positions
            e.raw.has_seq = true;
            for s in 0..n_seq {
                e.raw.tokens.push(tok);
                e.raw.seq_n.push(1);
                e.raw.seq_flat.push(s as i32);
            }
        }
        assert_eq!(ctx.decode(), 0);
    };
    // warm up: the first decodes size every buffer
    for t in 0..4 {
        step(t + 1);
    }
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for t in 0..64 {
        step(t % 300 + 1);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.swap(0, Ordering::SeqCst);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        n, 0,
        "{ty}: {n} allocations in 64 decode steps of {n_seq} sequence(s), flash_attn_type {flash_attn_type}"
    );
}
