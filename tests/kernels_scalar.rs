//! The scalar path end to end, as on a CPU without AVX2: `LLAMA_HOTSWAP_KERNELS=scalar` is set
//! before the first kernel call (the choice is made once per process, hence its own test
//! binary), then `mul_mat` (mat-vec and batched) for every type must match an f64 dot of the
//! dequantized operands within 1e-5 × Σ|wᵢ·x'ᵢ| (plus the Q8_1 sum rounding, see kernels.rs).

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, Scratch, ThreadPool};

mod common;
use common::{exact_dot, q8_1_sum_slack, random_activations, random_weights, Rng};

#[test]
fn scalar_path_matches_f64_reference() {
    std::env::set_var("LLAMA_HOTSWAP_KERNELS", "scalar");
    assert_eq!(cpu::simd_level(), "scalar");
    assert!(
        cpu::tile_fn(GgmlType::F16).is_none(),
        "no SIMD tiles on the scalar path"
    );
    assert!(
        cpu::repack_kind(GgmlType::Q4_0, [64, 16, 1, 1]).is_none(),
        "no repacked layouts on the scalar path (upstream's generic build has none)"
    );
    let mut rng = Rng::new(77);
    let pool = ThreadPool::new(2);
    let mut scratch = Scratch::new();
    // 6 activation rows: the vec_dot order; 9: upstream's tiled K-quant order
    for (t, m) in cpu::SUPPORTED
        .into_iter()
        .flat_map(|t| [(t, 6usize), (t, 9)])
    {
        let (n_rows, k) = (19usize, 512usize);
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
            let mut xf = vec![0f32; k];
            cpu::dequantize_row(vt, &xq, &mut xf);
            for i in 0..n_rows {
                let wr = &w[i * wrow..(i + 1) * wrow];
                let mut wf = vec![0f32; k];
                cpu::dequantize_row(t, wr, &mut wf);
                let (exact, scale) = exact_dot(&wf, &xf);
                let slack = q8_1_sum_slack(t, wr, &xq);
                let got = f64::from(dst[j * n_rows + i]);
                assert!(
                    (got - exact).abs() <= 1e-5 * scale + slack + 1e-6,
                    "{t} [{i},{j}]: {got} vs {exact}"
                );
            }
        }
    }
}
