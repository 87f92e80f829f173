//! Micro-benchmark of the CPU kernels: mat-vec (and a small batch) of a 14336 x 4096 weight
//! (llama-3-8B's FFN shape) per type, on 1 and 2 threads; median of several runs.
//!
//! cargo run --release --example bench_kernels [-- TYPE...]   (types by ggml name: q4_0 f16 ...)

use std::time::Instant;

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, Scratch, ThreadPool};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).collect();
    let (n_rows, k) = (14336usize, 4096usize);
    println!("SIMD: {}; weight {n_rows} x {k}", cpu::simd_level());
    println!(
        "{:<8} {:>10} {:>10} {:>12} {:>12}",
        "type", "mv 1th ms", "mv 2th ms", "GB/s (2th)", "b8 2th ms"
    );
    let mut seed = 0x1234_5678u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for t in cpu::SUPPORTED {
        if !filter.is_empty() && !filter.iter().any(|f| f.eq_ignore_ascii_case(t.name())) {
            continue;
        }
        let row = cpu::row_bytes(t, k);
        let mut w: Vec<u8> = (0..n_rows * row).map(|_| next() as u8).collect();
        // Sane scales: rewrite each block through a real quantization of random values where
        // the type has one; otherwise small f16 scales are good enough for timing.
        if t == GgmlType::F32 {
            for c in w.chunks_exact_mut(4) {
                c.copy_from_slice(&((next() % 1000) as f32 / 1000.0 - 0.5).to_le_bytes());
            }
        } else if t == GgmlType::F16 || t == GgmlType::BF16 {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&0x3800u16.to_le_bytes());
            }
        }
        let x: Vec<f32> = (0..8 * k)
            .map(|_| (next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let mut dst = vec![0f32; n_rows * 8];
        let mut scratch = Scratch::new();
        let mut results = Vec::new();
        for (threads, m) in [(1, 1), (2, 1), (2, 8)] {
            let pool = ThreadPool::new(threads);
            let mut times = Vec::new();
            for _ in 0..9 {
                let start = Instant::now();
                cpu::mul_mat(t, &w, n_rows, k, &x, m, &mut dst, &pool, &mut scratch);
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            results.push(median(times));
        }
        let gbs = (n_rows * row) as f64 / (results[1] * 1e-3) / 1e9;
        println!(
            "{:<8} {:>10.2} {:>10.2} {:>12.1} {:>12.2}",
            t.name(),
            results[0],
            results[1],
            gbs,
            results[2]
        );
    }
}
