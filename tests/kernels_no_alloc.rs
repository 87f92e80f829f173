//! Once warm, `mul_mat` (mat-vec and batched, every type, 1 and 2 threads) and
//! `mul_mat_batched` allocate nothing: a counting global allocator in its own test binary, so
//! no other test's allocations are counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, BatchedLayout, Scratch, ThreadPool};

mod common;
use common::{random_activations, random_weights, Rng};

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_mul_mat_does_not_allocate() {
    let mut rng = Rng::new(1);
    let (n_rows, k) = (64usize, 512usize);
    let cases: Vec<(GgmlType, Vec<u8>)> = cpu::SUPPORTED
        .iter()
        .map(|&t| (t, random_weights(&mut rng, t, n_rows, k)))
        .collect();
    let x: Vec<f32> = (0..9)
        .flat_map(|_| random_activations(&mut rng, k))
        .collect();
    let mut dst = vec![0f32; n_rows * 9 * 2];
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        let mut scratch = Scratch::new();
        let layout = BatchedLayout {
            n_rows: 32,
            k,
            m: 3,
            n_batch: 3,
            n_w_batch: 1,
            w_row_stride: 0, // set per type below
            w_batch_stride: 0,
            x_row_stride: k,
            x_batch_stride: 3 * k,
            dst_row_stride: 32,
            dst_batch_stride: 96,
        };
        for pass in 0..2 {
            COUNTING.store(pass == 1, Ordering::SeqCst);
            for (t, w) in &cases {
                for m in [1, 9] {
                    cpu::mul_mat(
                        *t,
                        w,
                        n_rows,
                        k,
                        &x[..m * k],
                        m,
                        &mut dst,
                        &pool,
                        &mut scratch,
                    );
                }
                let l = BatchedLayout {
                    w_row_stride: cpu::row_bytes(*t, k),
                    ..layout
                };
                cpu::mul_mat_batched(*t, w, &x, &l, &mut dst, &pool, &mut scratch);
            }
            COUNTING.store(false, Ordering::SeqCst);
        }
        assert_eq!(
            ALLOCATIONS.load(Ordering::SeqCst),
            0,
            "allocations on a warm pass, {threads} threads"
        );
    }
}
