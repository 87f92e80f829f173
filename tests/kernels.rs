//! CPU kernels: the thread pool, dot products (SIMD against the scalar reference), mul_mat
//! against an f64 reference, and (tests/kernels_upstream.rs) bit-exactness with gguf-py and
//! upstream's CPU backend.

use std::sync::atomic::{AtomicUsize, Ordering};

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, Scratch, ThreadPool};

mod common;
use common::{exact_dot, q8_1_sum_slack, random_activations, random_weights, Rng};

// ------------------------------------------------------------------ thread pool

fn check_runs_once(pool: &ThreadPool, n_tasks: usize) {
    let counts: Vec<AtomicUsize> = (0..n_tasks).map(|_| AtomicUsize::new(0)).collect();
    let bad_thread = AtomicUsize::new(0);
    let n_threads = pool.n_threads();
    pool.parallel_for(n_tasks, &|task, thread| {
        counts[task].fetch_add(1, Ordering::Relaxed);
        if thread >= n_threads {
            bad_thread.fetch_add(1, Ordering::Relaxed);
        }
    });
    for (i, c) in counts.iter().enumerate() {
        assert_eq!(
            c.load(Ordering::Relaxed),
            1,
            "task {i} of {n_tasks} on {n_threads} threads"
        );
    }
    assert_eq!(
        bad_thread.load(Ordering::Relaxed),
        0,
        "thread index out of range"
    );
}

#[test]
fn pool_runs_every_task_exactly_once() {
    for n_threads in [1, 2, 3, 5] {
        let pool = ThreadPool::new(n_threads);
        assert_eq!(pool.n_threads(), n_threads);
        for n_tasks in [0, 1, 2, 7, 64, 1000] {
            for _ in 0..20 {
                check_runs_once(&pool, n_tasks);
            }
        }
    }
}

/// `for_row_runs` hands every row to exactly one call, with the index of its first row, in
/// whole rows, whatever the thread count; short or ragged buffers go to one call.
#[test]
fn row_runs_cover_every_row_once() {
    for n_threads in [1, 2, 3, 5] {
        let pool = ThreadPool::new(n_threads);
        for (n_rows, row_len) in [
            (1, 9000),
            (2, 4096),
            (3, 5000),
            (128, 576),
            (513, 64),
            (7, 1),
        ] {
            let mut dst = vec![0f32; n_rows * row_len];
            let calls = AtomicUsize::new(0);
            cpu::for_row_runs(&pool, &mut dst, row_len, &|first, rows, thread| {
                assert!(thread < n_threads, "thread {thread} of {n_threads}");
                assert_eq!(rows.len() % row_len, 0, "a run of whole rows");
                for (i, v) in rows.iter_mut().enumerate() {
                    // each value records its own row, plus one for every visit
                    *v += (first + i / row_len) as f32 + 1.0;
                }
                calls.fetch_add(1, Ordering::Relaxed);
            });
            for (i, &v) in dst.iter().enumerate() {
                assert_eq!(
                    v,
                    (i / row_len) as f32 + 1.0,
                    "{n_rows}x{row_len}, value {i}"
                );
            }
            let big = n_threads > 1 && n_rows > 1 && n_rows * row_len >= 8192;
            assert_eq!(calls.load(Ordering::Relaxed) > 1, big, "{n_rows}x{row_len}");
        }
        // a buffer that is not whole rows is one call over all of it
        let mut ragged = vec![0f32; 9000];
        let calls = AtomicUsize::new(0);
        cpu::for_row_runs(&pool, &mut ragged, 7, &|first, rows, _| {
            assert_eq!((first, rows.len()), (0, 9000));
            calls.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }
}

/// Many small jobs on an oversubscribed pool (8 threads on a 2-core machine): workers are often
/// descheduled mid-protocol, late to a job or early for the next; every task still runs once.
#[test]
fn pool_stress_oversubscribed() {
    let pool = ThreadPool::new(8);
    for round in 0..3000 {
        check_runs_once(&pool, 1 + round % 37);
    }
}

#[test]
fn pool_uses_several_threads() {
    let pool = ThreadPool::new(3);
    let seen: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    // Tasks that wait a little so the caller cannot run them all before the workers wake.
    for _ in 0..50 {
        pool.parallel_for(64, &|_, thread| {
            seen[thread].fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(50));
        });
    }
    for (t, c) in seen.iter().enumerate() {
        assert!(c.load(Ordering::Relaxed) > 0, "thread {t} never ran a task");
    }
}

#[test]
fn pool_resizes() {
    let mut pool = ThreadPool::new(2);
    for n in [4, 1, 3, 3, 2, 6, 1] {
        pool.set_n_threads(n);
        assert_eq!(pool.n_threads(), n);
        for n_tasks in [1, 5, 100] {
            check_runs_once(&pool, n_tasks);
        }
    }
    pool.set_n_threads(0);
    assert_eq!(pool.n_threads(), 1, "0 threads means 1");
}

#[test]
fn pool_survives_a_panicking_task_and_nested_calls() {
    let pool = ThreadPool::new(3);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.parallel_for(100, &|task, _| {
            if task == 57 {
                panic!("task 57 fails on purpose");
            }
        })
    }));
    assert!(result.is_err(), "the panic must reach the caller");
    check_runs_once(&pool, 100);

    // A task that itself calls parallel_for runs the inner tasks on its own thread.
    let inner = AtomicUsize::new(0);
    pool.parallel_for(8, &|_, outer_thread| {
        pool.parallel_for(4, &|_, inner_thread| {
            assert_eq!(inner_thread, outer_thread);
            inner.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(inner.load(Ordering::Relaxed), 32);
}

#[test]
fn pool_is_shared_by_threads_in_turn() {
    let pool = ThreadPool::new(2);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..200 {
                    check_runs_once(&pool, 33);
                }
            });
        }
    });
}

// ------------------------------------------------------------------ dot products

/// Every type: the dispatched dot (SIMD where available) against the scalar reference on
/// random rows. Tolerance: 1e-4 × Σ|wᵢ·x'ᵢ| (x' = the converted activations), i.e. f32
/// accumulation-order differences only; a wrong lane or block shows as an O(1) relative error.
#[test]
fn simd_dot_matches_scalar_for_every_type() {
    let mut rng = Rng::new(7);
    println!("SIMD level: {}", cpu::simd_level());
    for t in cpu::SUPPORTED {
        for k in [256usize, 512, 4096, 2816] {
            let w = random_weights(&mut rng, t, 1, k);
            let x = random_activations(&mut rng, k);
            let vt = cpu::vec_dot_type(t);
            let mut xq = vec![0u8; cpu::row_bytes(vt, k)];
            cpu::quantize_row(vt, &x, &mut xq);
            let fast = cpu::vec_dot(t, k, &w, &xq);
            let slow = cpu::vec_dot_scalar(t, k, &w, &xq);
            let scale = abs_dot(t, &w, &xq, k);
            assert!(
                (fast - slow).abs() <= 1e-4 * scale + 1e-6,
                "{t} k={k}: simd {fast} scalar {slow} (scale {scale})"
            );
        }
    }
}

/// Σ|wᵢ·x'ᵢ| in f64, x' the dequantized converted activations.
fn abs_dot(t: GgmlType, w: &[u8], xq: &[u8], k: usize) -> f32 {
    let (wf, xf) = dequantized(t, w, xq, k);
    exact_dot(&wf, &xf).1 as f32
}

fn dequantized(t: GgmlType, w: &[u8], xq: &[u8], k: usize) -> (Vec<f32>, Vec<f32>) {
    let mut wf = vec![0f32; k];
    let mut xf = vec![0f32; k];
    cpu::dequantize_row(t, w, &mut wf);
    cpu::dequantize_row(cpu::vec_dot_type(t), xq, &mut xf);
    (wf, xf)
}

// ------------------------------------------------------------------ mul_mat

/// Per element, how far the converted activation x'ᵢ may be from xᵢ: Q8_0/Q8_1 round x·127/amax
/// to an integer (≤ ½) and store d = amax/127 as f16 (≤ 127·d·2⁻¹¹), so 0.57·d; Q8_K keeps d in
/// f32, so 0.51·d; F16 and BF16 round to 11 and 8 significant bits; F32 is exact.
fn conversion_error_bound(vt: GgmlType, x: &[f32]) -> Vec<f64> {
    let block = vt.block_size() as usize;
    let factor = match vt {
        GgmlType::Q8_0 | GgmlType::Q8_1 => 0.57,
        GgmlType::Q8_K => 0.51,
        GgmlType::F16 => {
            return x
                .iter()
                .map(|v| f64::from(v.abs()) * 2f64.powi(-11) + 1e-7)
                .collect()
        }
        GgmlType::BF16 => {
            return x
                .iter()
                .map(|v| f64::from(v.abs()) * 2f64.powi(-8))
                .collect()
        }
        _ => return vec![0.0; x.len()],
    };
    x.chunks(block)
        .flat_map(|b| {
            let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
            std::iter::repeat(factor * f64::from(amax) / 127.0).take(b.len())
        })
        .collect()
}

/// Each converted activation lies within [`conversion_error_bound`] of its f32 value.
#[test]
fn activation_conversion_error_is_bounded() {
    let mut rng = Rng::new(13);
    for vt in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        for _ in 0..20 {
            let x = random_activations(&mut rng, 1024);
            let mut xq = vec![0u8; cpu::row_bytes(vt, 1024)];
            cpu::quantize_row(vt, &x, &mut xq);
            let mut back = vec![0f32; 1024];
            cpu::dequantize_row(vt, &xq, &mut back);
            for ((a, b), e) in x.iter().zip(&back).zip(conversion_error_bound(vt, &x)) {
                assert!(
                    f64::from((a - b).abs()) <= e,
                    "{vt}: {a} -> {b} (bound {e})"
                );
            }
        }
    }
}

/// mul_mat against an f64 dot of the dequantized weights with the dequantized converted
/// activations, for every type, several shapes (mat-vec and batched, 1 and 3 threads).
/// Tolerance: 1e-5 × Σ|wᵢ·x'ᵢ| + the Q8_1 sum slack. And against the raw f32 activations:
/// that plus Σ|wᵢ|·eᵢ, eᵢ the bound of [`conversion_error_bound`].
#[test]
fn mul_mat_matches_f64_reference() {
    let mut rng = Rng::new(11);
    for n_threads in [1, 3] {
        let pool = ThreadPool::new(n_threads);
        let mut scratch = Scratch::new();
        for t in cpu::SUPPORTED {
            for (n_rows, k, m) in [(1, 256, 1), (70, 512, 1), (33, 256, 5), (130, 256, 19)] {
                let w = random_weights(&mut rng, t, n_rows, k);
                let x: Vec<f32> = (0..m)
                    .flat_map(|_| random_activations(&mut rng, k))
                    .collect();
                let mut dst = vec![f32::NAN; n_rows * m];
                cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut dst, &pool, &mut scratch);
                let vt = cpu::vec_dot_type(t);
                let wrow = cpu::row_bytes(t, k);
                for j in 0..m {
                    let xr = &x[j * k..(j + 1) * k];
                    let mut xq = vec![0u8; cpu::row_bytes(vt, k)];
                    cpu::quantize_row(vt, xr, &mut xq);
                    for i in 0..n_rows {
                        let wr = &w[i * wrow..(i + 1) * wrow];
                        let (wf, xf) = dequantized(t, wr, &xq, k);
                        let (exact, scale) = exact_dot(&wf, &xf);
                        let got = f64::from(dst[j * n_rows + i]);
                        let tol = 1e-5 * scale + q8_1_sum_slack(t, wr, &xq) + 1e-6;
                        // the fast mode's float panel product multiplies the f32 activations
                        // (checked against them below), not their conversion
                        let panel = cpu::fast_float::takes(t, n_rows, m);
                        assert!(
                            panel || (got - exact).abs() <= tol,
                            "{t} {n_rows}x{k}·{m} th={n_threads} [{i},{j}]: {got} vs {exact} (tol {tol})"
                        );
                        let raw: f64 = wf
                            .iter()
                            .zip(xr)
                            .map(|(a, b)| f64::from(*a) * f64::from(*b))
                            .sum();
                        let conv: f64 = wf
                            .iter()
                            .zip(conversion_error_bound(vt, xr))
                            .map(|(a, e)| f64::from(a.abs()) * e)
                            .sum();
                        // (no conversion error where the panel product took them as they are)
                        let bound = if panel { tol } else { tol + conv };
                        assert!(
                            (got - raw).abs() <= bound,
                            "{t} vs raw activations [{i},{j}]: {got} vs {raw} (bound {bound})"
                        );
                    }
                }
            }
        }
    }
}

/// A weight split in row pieces, each multiplied into a strided destination, gives the same
/// result as the whole weight at once, bit for bit.
#[test]
fn mul_mat_rows_pieces_equal_whole() {
    let mut rng = Rng::new(5);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    for t in [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::F32,
        GgmlType::Q4_K,
    ] {
        let (n_rows, k, m) = (96, 512, 3);
        let w = random_weights(&mut rng, t, n_rows, k);
        let x: Vec<f32> = (0..m)
            .flat_map(|_| random_activations(&mut rng, k))
            .collect();
        let mut whole = vec![0f32; n_rows * m];
        cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut whole, &pool, &mut scratch);
        let mut pieces = vec![f32::NAN; n_rows * m];
        let wrow = cpu::row_bytes(t, k);
        let act = cpu::prepare_activations(t, &x, k, m, &pool, &mut scratch);
        for (start, len) in [(0, 40), (40, 1), (41, 55)] {
            let piece = &w[start * wrow..(start + len) * wrow];
            cpu::mul_mat_prepared(t, piece, len, &act, &mut pieces, n_rows, start, &pool);
        }
        assert_eq!(
            whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            pieces.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{t}"
        );
    }
}

/// The same product on 1 and 3 threads is bit-identical (each element is one dot product).
#[test]
fn mul_mat_is_independent_of_thread_count() {
    let mut rng = Rng::new(9);
    let mut scratch = Scratch::new();
    for t in [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F16] {
        let (n_rows, k, m) = (200, 256, 7);
        let w = random_weights(&mut rng, t, n_rows, k);
        let x: Vec<f32> = (0..m)
            .flat_map(|_| random_activations(&mut rng, k))
            .collect();
        let mut a = vec![0f32; n_rows * m];
        let mut b = vec![0f32; n_rows * m];
        cpu::mul_mat(
            t,
            &w,
            n_rows,
            k,
            &x,
            m,
            &mut a,
            &ThreadPool::new(1),
            &mut scratch,
        );
        cpu::mul_mat(
            t,
            &w,
            n_rows,
            k,
            &x,
            m,
            &mut b,
            &ThreadPool::new(3),
            &mut scratch,
        );
        assert!(
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{t}"
        );
    }
}

/// Once the scratch has seen the largest shape, later calls do not grow it.
#[test]
fn scratch_stops_growing() {
    let mut rng = Rng::new(3);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    let t = GgmlType::Q4_1;
    let w = random_weights(&mut rng, t, 64, 512);
    let x: Vec<f32> = (0..8)
        .flat_map(|_| random_activations(&mut rng, 512))
        .collect();
    let mut dst = vec![0f32; 64 * 8];
    cpu::mul_mat(t, &w, 64, 512, &x, 8, &mut dst, &pool, &mut scratch);
    let cap = scratch.capacity();
    for m in [1, 8, 3] {
        cpu::mul_mat(t, &w, 64, 512, &x, m, &mut dst, &pool, &mut scratch);
        assert_eq!(scratch.capacity(), cap);
    }
}

/// Attention-shaped batched products: a KV-cache-like F16/F32 tensor [head_dim, n_kv_head,
/// n_kv] read in place with strides, query heads sharing KV heads (GQA broadcast), Q permuted
/// and strided, dst with gaps. Each batch must equal a plain `mul_mat` of copied-out
/// contiguous operands, bit for bit, and the gaps in dst stay untouched.
#[test]
fn mul_mat_batched_matches_per_batch_products() {
    let mut rng = Rng::new(21);
    let pool = ThreadPool::new(3);
    let mut scratch = Scratch::new();
    for t in [GgmlType::F16, GgmlType::F32, GgmlType::Q8_0] {
        let (head_dim, n_kv_head, n_head, n_kv, n_tok) = (64usize, 3usize, 9usize, 37usize, 5usize);
        let elem = cpu::row_bytes(t, head_dim);
        // Cache: position p, kv head h at byte (p * n_kv_head + h) * elem.
        let cache = random_weights(&mut rng, t, n_kv * n_kv_head, head_dim);
        // Q as [head_dim, n_head, n_tok] (token-major), read per head with strides.
        let q: Vec<f32> = (0..n_tok * n_head)
            .flat_map(|_| random_activations(&mut rng, head_dim))
            .collect();
        let layout = cpu::BatchedLayout {
            n_rows: n_kv,
            k: head_dim,
            m: n_tok,
            n_batch: n_head,
            n_w_batch: n_kv_head,
            w_row_stride: n_kv_head * elem,
            w_batch_stride: elem,
            x_row_stride: n_head * head_dim,
            x_batch_stride: head_dim,
            dst_row_stride: n_kv + 3,
            dst_batch_stride: (n_kv + 3) * n_tok + 1,
        };
        let mut dst = vec![f32::NAN; layout.dst_batch_stride * n_head];
        cpu::mul_mat_batched(t, &cache, &q, &layout, &mut dst, &pool, &mut scratch);
        for b in 0..n_head {
            let kvh = b / (n_head / n_kv_head);
            let w: Vec<u8> = (0..n_kv)
                .flat_map(|p| {
                    let at = (p * n_kv_head + kvh) * elem;
                    cache[at..at + elem].to_vec()
                })
                .collect();
            let x: Vec<f32> = (0..n_tok)
                .flat_map(|j| {
                    let at = j * n_head * head_dim + b * head_dim;
                    q[at..at + head_dim].to_vec()
                })
                .collect();
            let mut want = vec![0f32; n_kv * n_tok];
            cpu::mul_mat(
                t,
                &w,
                n_kv,
                head_dim,
                &x,
                n_tok,
                &mut want,
                &pool,
                &mut scratch,
            );
            for j in 0..n_tok {
                for i in 0..n_kv + 3 {
                    let got = dst[b * layout.dst_batch_stride + j * layout.dst_row_stride + i];
                    if i < n_kv {
                        let want = want[j * n_kv + i];
                        assert_eq!(got.to_bits(), want.to_bits(), "{t} head {b} [{i},{j}]");
                    } else {
                        assert!(got.is_nan(), "{t}: gap written at head {b} [{i},{j}]");
                    }
                }
            }
        }
    }
}

/// Layouts whose destination elements would overlap are refused (two threads could write one
/// element).
#[test]
#[should_panic(expected = "dst rows overlap")]
fn mul_mat_batched_rejects_overlapping_dst() {
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    let w = vec![0u8; 4 * 32 * 4];
    let x = vec![0f32; 2 * 32];
    let layout = cpu::BatchedLayout {
        n_rows: 4,
        k: 32,
        m: 2,
        n_batch: 1,
        n_w_batch: 1,
        w_row_stride: 128,
        w_batch_stride: 0,
        x_row_stride: 32,
        x_batch_stride: 0,
        dst_row_stride: 2,
        dst_batch_stride: 0,
    };
    let mut dst = vec![0f32; 16];
    cpu::mul_mat_batched(
        GgmlType::F32,
        &w,
        &x,
        &layout,
        &mut dst,
        &pool,
        &mut scratch,
    );
}

/// A batched product (tile kernels where they exist) equals column-by-column mat-vecs bit for
/// bit (the tiles keep the per-column arithmetic of the dot kernels), so results never depend
/// on the batch size. Odd shapes exercise the tile remainders. Every output is compared with
/// `vec_dot` (the batched order): for F16, BF16 and IQ4_NL upstream itself sums a mat-vec
/// (ggml's single-row vec_dot) in another order than a batched product (llamafile's tinyBLAS),
/// and ours follow both.
#[test]
fn batched_product_equals_column_mat_vecs() {
    let mut rng = Rng::new(31);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    for t in cpu::SUPPORTED {
        let (n_rows, k, m) = (37usize, 512usize, 11usize);
        let w = random_weights(&mut rng, t, n_rows, k);
        let x: Vec<f32> = (0..m)
            .flat_map(|_| random_activations(&mut rng, k))
            .collect();
        let mut batched = vec![0f32; n_rows * m];
        cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut batched, &pool, &mut scratch);
        // the batched product's dot (`vec_dot`): a mat-vec's except for F16, BF16 and IQ4_NL,
        // whose mat-vecs follow ggml's single-row order as upstream's do (not for the fast
        // mode's float panel product, which reads the f32 activations: see below)
        if cpu::fast_float::takes(t, n_rows, m) {
            continue;
        }
        assert_outputs_are_vec_dots(t, &w, n_rows, k, &x, m, &batched, "");
        // and, where upstream has one order, each column's mat-vec (the single-row kernels);
        // K-quants with 8 rows or more follow upstream's tiled matmul instead
        if matches!(t, GgmlType::F16 | GgmlType::BF16 | GgmlType::IQ4_NL) || cpu::takes_tiled(t, m)
        {
            continue;
        }
        let mut col = vec![0f32; n_rows];
        for j in 0..m {
            let xj = &x[j * k..(j + 1) * k];
            cpu::mul_mat(t, &w, n_rows, k, xj, 1, &mut col, &pool, &mut scratch);
            for (i, c) in col.iter().enumerate() {
                let a = batched[j * n_rows + i];
                assert_eq!(
                    a.to_bits(),
                    c.to_bits(),
                    "{t} mat-vec [{i},{j}]: {a} vs {c}"
                );
            }
        }
    }
}

/// Upstream's tiled K-quant order (Q2_K..Q6_K, IQ4_XS): the AVX2 dot and every 1 × c tile
/// equal the scalar reference (`dot_tiled.rs`) bit for bit, which stays within float
/// rounding of the f64 dot; batched products of 8 rows or more use it (1 to 3 threads, odd
/// shapes) and those of fewer rows do not.
#[test]
fn tiled_k_quant_order_matches_scalar_reference() {
    let mut rng = Rng::new(53);
    let mut scratch = Scratch::new();
    for t in cpu::SUPPORTED {
        let Some(scalar) = cpu::tiled_scalar_dot_fn(t) else {
            assert!(!cpu::takes_tiled(t, 64), "{t}");
            continue;
        };
        assert!(cpu::takes_tiled(t, cpu::TILED_MIN_ROWS) && !cpu::takes_tiled(t, 7));
        let fast = cpu::tiled_dot_fn(t).unwrap();
        for k in [256usize, 512, 2816] {
            let w = random_weights(&mut rng, t, 4, k);
            let w_row = cpu::row_bytes(t, k);
            let x_row = cpu::row_bytes(GgmlType::Q8_K, k);
            let mut xq = vec![0u8; 4 * x_row];
            for c in 0..4 {
                let x = random_activations(&mut rng, k);
                cpu::quantize_row(GgmlType::Q8_K, &x, &mut xq[c * x_row..(c + 1) * x_row]);
            }
            for c in 0..4 {
                let xc = &xq[c * x_row..(c + 1) * x_row];
                for r in 0..4 {
                    let wr = &w[r * w_row..(r + 1) * w_row];
                    let (a, b) = (fast(k, wr, xc), scalar(k, wr, xc));
                    assert_eq!(a.to_bits(), b.to_bits(), "{t} k={k}: {a} vs {b}");
                    let scale = abs_dot(t, wr, xc, k);
                    let plain = cpu::vec_dot_scalar(t, k, wr, xc);
                    assert!(
                        (a - plain).abs() <= 1e-4 * scale + 1e-6,
                        "{t} k={k}: tiled {a} vec_dot {plain} (scale {scale})"
                    );
                }
            }
            for cols in 1..=cpu::TILE_COLS {
                let Some(tile) = cpu::tiled_tile_shape(t, 1, cols) else {
                    assert_ne!(cpu::simd_level(), "avx2", "{t}: no 1x{cols} tiled tile");
                    continue;
                };
                let mut out = [[f32::NAN; cpu::TILE_RUN_ROWS]; cpu::TILE_COLS];
                (tile.f)(k, 4, &w, w_row, &xq, x_row, &mut out);
                for c in 0..cols {
                    for r in 0..4 {
                        let want = scalar(k, &w[r * w_row..(r + 1) * w_row], &xq[c * x_row..]);
                        assert_eq!(
                            out[c][r].to_bits(),
                            want.to_bits(),
                            "{t} 1x{cols} [{r},{c}]"
                        );
                    }
                }
            }
        }
        for (threads, n_rows, m) in [(1usize, 7usize, 8usize), (2, 19, 9), (3, 33, 21), (2, 5, 7)] {
            let pool = ThreadPool::new(threads);
            let k = 512;
            let w = random_weights(&mut rng, t, n_rows, k);
            let x: Vec<f32> = (0..m)
                .flat_map(|_| random_activations(&mut rng, k))
                .collect();
            let mut out = vec![0f32; n_rows * m];
            cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut out, &pool, &mut scratch);
            if cpu::fast_float::takes(t, n_rows, m) {
                // the fast mode's float panel product reads the f32 activations, not
                // vec_dot's converted ones (its own test: fast_float's, bit for bit against
                // its scalar reference; mul_mat_matches_f64_reference's raw bound)
                continue;
            }
            let what = format!("{n_rows}x{m} {threads} threads ");
            assert_outputs_are_vec_dots(t, &w, n_rows, k, &x, m, &out, &what);
        }
    }
}

/// Every output `[i, j]` of a `n_rows` × `m` product (column-major by activation row) equals
/// `vec_dot` of weight row `i` and activation row `j`, bit for bit.
#[allow(clippy::too_many_arguments)]
fn assert_outputs_are_vec_dots(
    t: GgmlType,
    w: &[u8],
    n_rows: usize,
    k: usize,
    x: &[f32],
    m: usize,
    out: &[f32],
    what: &str,
) {
    let (vt, w_row) = (cpu::vec_dot_type(t), cpu::row_bytes(t, k));
    let mut xq = vec![0u8; cpu::row_bytes(vt, k)];
    for j in 0..m {
        cpu::quantize_row(vt, &x[j * k..(j + 1) * k], &mut xq);
        for i in 0..n_rows {
            let a = out[j * n_rows + i];
            let wr = &w[i * w_row..i * w_row + w_row];
            let b = match cpu::tiled_dot_fn(t) {
                // upstream's tiled K-quant order for 8 activation rows or more
                Some(f) if cpu::takes_tiled(t, m) => f(k, wr, &xq),
                _ => cpu::vec_dot(t, k, wr, &xq),
            };
            assert_eq!(a.to_bits(), b.to_bits(), "{t} {what}[{i},{j}]: {a} vs {b}");
        }
    }
}

/// Every tile kernel (the main shape of each type and every smaller edge shape), alone and in
/// the longest run of tiles along the weight rows, computes each of its outputs bit for bit
/// as `vec_dot` (the mat-vec kernel) does, with weight and activation rows at strides wider
/// than a row (as in attention's strided layouts), and leaves the rest of its output buffer
/// alone.
#[test]
fn every_tile_shape_equals_vec_dot() {
    let mut rng = Rng::new(37);
    let mut shapes_checked = 0;
    for t in cpu::SUPPORTED {
        let Some(main) = cpu::tile_fn(t) else {
            continue;
        };
        assert!(
            main.rows <= cpu::TILE_RUN_ROWS && main.cols <= cpu::TILE_COLS,
            "{t}: main tile {}x{} over the output buffer",
            main.rows,
            main.cols
        );
        for k in [256usize, 512 + 256] {
            let vt = cpu::vec_dot_type(t);
            let (w_row, x_row) = (cpu::row_bytes(t, k), cpu::row_bytes(vt, k));
            // strides one row plus some bytes: rows do not start where the previous ends
            let (ws, xs) = (w_row + 5, x_row + 3);
            let n_rows = cpu::TILE_RUN_ROWS;
            let wdense = random_weights(&mut rng, t, n_rows, k);
            let mut w = vec![0u8; ws * n_rows];
            for r in 0..n_rows {
                w[r * ws..r * ws + w_row].copy_from_slice(&wdense[r * w_row..(r + 1) * w_row]);
            }
            let mut x = vec![0u8; xs * main.cols];
            for c in 0..main.cols {
                let xf = random_activations(&mut rng, k);
                cpu::quantize_row(vt, &xf, &mut x[c * xs..c * xs + x_row]);
            }
            for rows in 1..=main.rows {
                for cols in 1..=main.cols {
                    let Some(tile) = cpu::tile_shape(t, rows, cols) else {
                        assert!(
                            rows == 1 && cols == 1 || main.rows == 1 && rows > 1,
                            "{t}: no {rows}x{cols} tile"
                        );
                        continue;
                    };
                    assert_eq!((tile.rows, tile.cols), (rows, cols), "{t}");
                    for tiles in [1, cpu::TILE_RUN_ROWS / rows] {
                        let mut out = [[f32::NAN; cpu::TILE_RUN_ROWS]; cpu::TILE_COLS];
                        (tile.f)(k, tiles, &w, ws, &x, xs, &mut out);
                        for (c, col) in out.iter().enumerate() {
                            for (r, &got) in col.iter().enumerate() {
                                if c >= cols || r >= rows * tiles {
                                    assert!(
                                        got.is_nan(),
                                        "{t} {tiles} tiles {rows}x{cols} wrote [{r},{c}]"
                                    );
                                    continue;
                                }
                                let want = cpu::vec_dot(t, k, &w[r * ws..], &x[c * xs..]);
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{t} k={k} {tiles} tiles {rows}x{cols} [{r},{c}]: {got} vs {want}"
                                );
                            }
                        }
                    }
                    shapes_checked += 1;
                }
            }
        }
    }
    if cpu::simd_level() == "avx2" {
        assert!(
            shapes_checked > 100,
            "only {shapes_checked} tile shapes ran"
        );
    }
}

/// Batched products whose edges cut the tiles every way (rows and columns not multiples of
/// any tile shape, 1 to 3 threads) and a batched layout whose batches split the tiles' column
/// groups (GQA broadcast, strided activations) equal `vec_dot` output by output, bit for bit.
#[test]
fn tiled_products_at_odd_shapes_and_batches_equal_mat_vecs() {
    let mut rng = Rng::new(43);
    let mut scratch = Scratch::new();
    for t in [
        GgmlType::Q8_0,
        GgmlType::F16,
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::F32,
        GgmlType::Q5_1,
    ] {
        for (threads, n_rows, m) in [(1usize, 7usize, 5usize), (2, 13, 7), (3, 18, 3), (1, 33, 2)] {
            let pool = ThreadPool::new(threads);
            let k = 256;
            let w = random_weights(&mut rng, t, n_rows, k);
            let x: Vec<f32> = (0..m)
                .flat_map(|_| random_activations(&mut rng, k))
                .collect();
            let mut batched = vec![0f32; n_rows * m];
            cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut batched, &pool, &mut scratch);
            let what = format!("{n_rows}x{m} {threads} threads ");
            assert_outputs_are_vec_dots(t, &w, n_rows, k, &x, m, &batched, &what);
        }
        // 6 batches of 3 activation rows over 2 weight matrices of 9 rows (GQA broadcast):
        // tile column groups meet batch edges
        let (n_rows, k, m, n_batch, n_w_batch) = (9usize, 256usize, 3usize, 6usize, 2usize);
        let w_row = cpu::row_bytes(t, k);
        let w = random_weights(&mut rng, t, n_rows * n_w_batch, k);
        let x_row_stride = k + 32;
        let x: Vec<f32> = (0..n_batch * m)
            .flat_map(|_| {
                let mut v = random_activations(&mut rng, k);
                v.resize(x_row_stride, 0.0);
                v
            })
            .collect();
        let layout = cpu::BatchedLayout {
            n_rows,
            k,
            m,
            n_batch,
            n_w_batch,
            w_row_stride: w_row,
            w_batch_stride: n_rows * w_row,
            x_row_stride,
            x_batch_stride: m * x_row_stride,
            dst_row_stride: n_rows,
            dst_batch_stride: m * n_rows,
        };
        let pool = ThreadPool::new(2);
        let mut dst = vec![0f32; n_batch * m * n_rows];
        cpu::mul_mat_batched(t, &w, &x, &layout, &mut dst, &pool, &mut scratch);
        let vt = cpu::vec_dot_type(t);
        let mut xq = vec![0u8; cpu::row_bytes(vt, k)];
        for b in 0..n_batch {
            let wb = &w[(b / (n_batch / n_w_batch)) * n_rows * w_row..];
            for j in 0..m {
                let at = b * m * x_row_stride + j * x_row_stride;
                cpu::quantize_row(vt, &x[at..at + k], &mut xq);
                for i in 0..n_rows {
                    let want = cpu::vec_dot(t, k, &wb[i * w_row..], &xq);
                    let got = dst[b * m * n_rows + j * n_rows + i];
                    assert_eq!(got.to_bits(), want.to_bits(), "{t} batch {b} [{i},{j}]");
                }
            }
        }
    }
}

/// Float rows of any length (not a multiple of the 8-lane vectors: the tiles' scalar tails),
/// batched and mat-vec, against the f64 dot of the converted operands (1e-5 × Σ|wᵢ·x'ᵢ|).
#[test]
fn float_rows_of_any_length() {
    let mut rng = Rng::new(41);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    for t in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        for k in [1usize, 7, 37, 64, 71] {
            let (n_rows, m) = (7usize, 6usize);
            let w = random_weights(&mut rng, t, n_rows, k);
            let x: Vec<f32> = (0..m)
                .flat_map(|_| random_activations(&mut rng, k))
                .collect();
            let mut dst = vec![f32::NAN; n_rows * m];
            cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut dst, &pool, &mut scratch);
            let vt = cpu::vec_dot_type(t);
            let wrow = cpu::row_bytes(t, k);
            for j in 0..m {
                let mut xq = vec![0u8; cpu::row_bytes(vt, k)];
                cpu::quantize_row(vt, &x[j * k..(j + 1) * k], &mut xq);
                for i in 0..n_rows {
                    let (wf, xf) = dequantized(t, &w[i * wrow..(i + 1) * wrow], &xq, k);
                    let (exact, scale) = exact_dot(&wf, &xf);
                    let got = f64::from(dst[j * n_rows + i]);
                    assert!(
                        (got - exact).abs() <= 1e-5 * scale + 1e-6,
                        "{t} k={k} [{i},{j}]: {got} vs {exact}"
                    );
                }
            }
        }
    }
}

/// The dispatched activation quantizers (AVX2 for Q8_0/Q8_1) equal the scalar reference bit
/// for bit, on random rows with outliers, all-zero blocks and exact ties (x·127/amax = n + ½).
#[test]
fn simd_quantizers_match_scalar() {
    let mut rng = Rng::new(51);
    for vt in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        for case in 0..40 {
            let k = 256 * (1 + case % 3);
            let mut x = random_activations(&mut rng, k);
            if case % 4 == 1 {
                x[..32].fill(0.0);
            }
            if case % 4 == 2 {
                // amax 127 makes the multiplier 1: halves are exact ties.
                for (i, v) in x.iter_mut().enumerate() {
                    *v = if i % 32 == 0 {
                        127.0
                    } else {
                        (i % 50) as f32 - 24.5
                    };
                }
            }
            let n = cpu::row_bytes(vt, k);
            let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
            cpu::quantize_row(vt, &x, &mut a);
            cpu::quantize_row_scalar(vt, &x, &mut b);
            assert!(
                a == b,
                "{vt} case {case}: SIMD and scalar quantizers differ"
            );
        }
    }
}

/// F16 conversion (F16C, 8 at a time, scalar tail) equals `half` for odd lengths and for
/// values that round to subnormals, overflow to infinity or sit on ties.
#[test]
fn f16_conversion_matches_half() {
    let specials = [
        0.0f32,
        -0.0,
        1e-7,
        -3e-6,
        65504.0,
        65520.0,
        1e6,
        -1e6,
        1.0 + 1.0 / 2048.0,
        2049.0,
    ];
    for k in [1usize, 7, 8, 9, 37] {
        let x: Vec<f32> = (0..k)
            .map(|i| specials[i % specials.len()] * if i % 3 == 0 { 1.0 } else { 0.37 })
            .collect();
        let (mut a, mut b) = (vec![0u8; 2 * k], vec![0u8; 2 * k]);
        cpu::quantize_row(GgmlType::F16, &x, &mut a);
        cpu::quantize_row_scalar(GgmlType::F16, &x, &mut b);
        assert_eq!(a, b, "k={k}");
    }
}
