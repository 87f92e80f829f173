//! Repacked weights (upstream's `q4_0_8x8_q8_0`, `kernels::cpu::repack`): the SIMD group
//! kernels and the scalar reference give the same bits, and both equal upstream's float order
//! computed here from the plain layout: per output, `acc = fma(isum_b, d_w · d_x, acc)` over
//! the blocks in order (`isum_b` the exact integer dot product of block b). Shapes cover the
//! 4-row (gemm) and single-row (gemv) paths, several thread counts, and a destination stride
//! with an offset (a row piece of a larger output).

use llama::gguf::GgmlType;
use llama::kernels::cpu::{self, repack, Scratch, ThreadPool};

mod common;
use common::{random_activations, random_weights, Rng};

fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// IQ4_NL's value table (ggml's `kvalues_iq4nl`).
const KVALUES_IQ4NL: [i32; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Upstream's float order from the plain Q4_0 / IQ4_NL row and the Q8_0 activation row.
fn reference(t: GgmlType, k: usize, w: &[u8], xq: &[u8]) -> f32 {
    let v = |n: u8| match t {
        GgmlType::Q4_0 => i32::from(n) - 8,
        _ => KVALUES_IQ4NL[usize::from(n)],
    };
    let mut acc = 0f32;
    for b in 0..k / 32 {
        let wb = &w[b * 18..(b + 1) * 18];
        let xb = &xq[b * 34..(b + 1) * 34];
        let mut isum = 0i32;
        for j in 0..16 {
            let (lo, hi) = (v(wb[2 + j] & 0xF), v(wb[2 + j] >> 4));
            isum += lo * i32::from(xb[2 + j] as i8) + hi * i32::from(xb[2 + j + 16] as i8);
        }
        acc = (isum as f32).mul_add(f16(wb, 0) * f16(xb, 0), acc);
    }
    acc
}

#[test]
fn repacked_q4_0_and_iq4_nl_are_upstreams_float_order_on_both_paths() {
    if cpu::simd_level() != "avx2" {
        eprintln!("SKIP: no AVX2 here (upstream does not repack either)");
        return;
    }
    let mut rng = Rng::new(1234);
    let mut scratch = Scratch::new();
    let shapes = [
        (8, 32, 1, 1),
        (24, 256, 7, 2),
        (64, 576, 13, 3),
        (16, 1536, 4, 2),
    ];
    for (t, (n_rows, k, m, threads)) in [GgmlType::Q4_0, GgmlType::IQ4_NL]
        .into_iter()
        .flat_map(|t| shapes.map(|s| (t, s)))
    {
        let kind = cpu::repack_kind(t, [k as i64, n_rows as i64, 1, 1]).expect("repackable");
        let w = random_weights(&mut rng, t, n_rows, k);
        let rp = repack::repack(kind, t, &w, n_rows, k);
        assert_eq!(
            rp.nbytes(),
            w.len(),
            "the repacked layout has the same size"
        );
        let x: Vec<f32> = (0..m)
            .flat_map(|_| random_activations(&mut rng, k))
            .collect();
        let pool = ThreadPool::new(threads);
        // a piece of a wider output: stride n_rows + 5, offset 3
        let (stride, off) = (n_rows + 5, 3);
        let mut simd = vec![f32::NAN; m * stride];
        let mut scalar = vec![f32::NAN; m * stride];
        repack::mul_mat_repacked(&rp, &x, m, &mut simd, stride, off, &pool, &mut scratch);
        repack::mul_mat_repacked_using(
            repack::scalar_kernels(kind),
            &rp,
            &x,
            m,
            &mut scalar,
            stride,
            off,
            &pool,
            &mut scratch,
        );
        let wrow = cpu::row_bytes(t, k);
        let xrow = cpu::row_bytes(GgmlType::Q8_0, k);
        let mut xq = vec![0u8; xrow];
        for j in 0..m {
            cpu::quantize_row(GgmlType::Q8_0, &x[j * k..(j + 1) * k], &mut xq);
            for i in 0..n_rows {
                let want = reference(t, k, &w[i * wrow..(i + 1) * wrow], &xq);
                let (a, b) = (simd[j * stride + off + i], scalar[j * stride + off + i]);
                assert_eq!(
                    a.to_bits(),
                    want.to_bits(),
                    "{t} simd [{n_rows}x{k}] row {i} col {j}: {a} vs {want}"
                );
                assert_eq!(
                    b.to_bits(),
                    want.to_bits(),
                    "{t} scalar [{n_rows}x{k}] row {i} col {j}: {b} vs {want}"
                );
                // and the plain dot product agrees to float precision
                let plain = cpu::vec_dot(t, k, &w[i * wrow..(i + 1) * wrow], &xq);
                assert!(
                    (plain - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{plain} vs {want}"
                );
            }
            // outside the piece: untouched
            assert!(simd[j * stride..j * stride + off]
                .iter()
                .all(|v| v.is_nan()));
        }
    }
}

#[test]
fn repack_needs_a_multiple_of_8_rows_and_a_2d_weight() {
    if cpu::simd_level() != "avx2" {
        return;
    }
    assert!(cpu::repack_kind(GgmlType::Q4_0, [64, 12, 1, 1]).is_none());
    assert!(cpu::repack_kind(GgmlType::Q4_0, [64, 16, 2, 1]).is_none());
    assert!(cpu::repack_kind(GgmlType::Q4_1, [64, 16, 1, 1]).is_none());
    assert!(cpu::repack_kind(GgmlType::Q4_0, [64, 16, 1, 1]).is_some());
    assert!(cpu::repack_kind(GgmlType::IQ4_NL, [64, 16, 1, 1]).is_some());
    assert!(cpu::repack_kind(GgmlType::IQ4_NL, [64, 20, 1, 1]).is_none());
}
