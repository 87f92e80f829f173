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
        let (simd, scalar) = simd_and_scalar(&rp, kind, &x, m, (stride, off), &pool, &mut scratch);
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

fn scale_min_k4(j: usize, q: &[u8]) -> (i32, i32) {
    let (a, b) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (i32::from(a), i32::from(b))
}

/// Upstream's repacked Q4_K float order from the plain row and a Q8_K row: its gemm
/// (`per_sb`: two FMAs per pair of sub-blocks) or its gemv (two per super-block).
fn reference_q4_k(k: usize, w: &[u8], xq: &[u8], per_sb: bool) -> f32 {
    let (mut acc, mut accm) = (0f32, 0f32);
    for b in 0..k / 256 {
        let wb = &w[b * 144..(b + 1) * 144];
        let xb = &xq[b * 292..(b + 1) * 292];
        let dx = f32::from_le_bytes(xb[0..4].try_into().unwrap());
        let q = |e: usize| i32::from(xb[4 + e] as i8);
        let (dw, dm) = (f16(wb, 0), f16(wb, 2));
        let (mut isum_b, mut imin_b) = (0i32, 0i32);
        for sb in 0..4 {
            let (mut isum, mut imin) = (0i32, 0i32);
            for hi in 0..2 {
                let sub = 2 * sb + hi;
                let (sc, mn) = scale_min_k4(sub, &wb[4..16]);
                let mut dot = 0;
                let mut bsum = 0;
                for l in 0..32 {
                    let byte = wb[16 + 32 * sb + l];
                    let nib = if hi == 0 { byte & 0xF } else { byte >> 4 };
                    dot += i32::from(nib) * q(64 * sb + 32 * hi + l);
                    bsum += q(64 * sb + 32 * hi + l);
                }
                isum += sc * dot;
                imin += mn * bsum;
            }
            if per_sb {
                acc = (isum as f32).mul_add(dw * dx, acc);
                accm = (imin as f32).mul_add(dm * dx, accm);
            } else {
                isum_b += isum;
                imin_b += imin;
            }
        }
        if !per_sb {
            acc = (isum_b as f32).mul_add(dw * dx, acc);
            accm = (imin_b as f32).mul_add(dm * dx, accm);
        }
    }
    acc - accm
}

#[test]
fn repacked_q4_k_is_upstreams_gemm_and_gemv_order() {
    if cpu::simd_level() != "avx2" {
        eprintln!("SKIP: no AVX2 here (upstream does not repack either)");
        return;
    }
    let t = GgmlType::Q4_K;
    let mut rng = Rng::new(99);
    let mut scratch = Scratch::new();
    for (n_rows, k, m, threads) in [(8, 256, 1, 1), (24, 512, 7, 2), (16, 1024, 9, 3)] {
        let kind = cpu::repack_kind(t, [k as i64, n_rows as i64, 1, 1]).expect("repackable");
        let w = random_weights(&mut rng, t, n_rows, k);
        let rp = repack::repack(kind, t, &w, n_rows, k);
        let mut x: Vec<f32> = (0..m)
            .flat_map(|_| random_activations(&mut rng, k))
            .collect();
        // a super-block whose largest magnitude occurs with both signs, the negative first
        // (upstream's 4-row quantizer and its row quantizer part there)
        x[10] = -9.0;
        x[200] = 9.0;
        let pool = ThreadPool::new(threads);
        let (stride, off) = (n_rows + 2, 1);
        let (simd, scalar) = simd_and_scalar(&rp, kind, &x, m, (stride, off), &pool, &mut scratch);
        let wrow = cpu::row_bytes(t, k);
        let mut xq = vec![0u8; cpu::row_bytes(GgmlType::Q8_K, k)];
        for j in 0..m {
            let gemm = j < m - m % 4;
            cpu::quantize_row(GgmlType::Q8_K, &x[j * k..(j + 1) * k], &mut xq);
            if gemm {
                repack::q8_k_mat_fixup(&x[j * k..(j + 1) * k], &mut xq);
            }
            for i in 0..n_rows {
                let wr = &w[i * wrow..(i + 1) * wrow];
                let want = reference_q4_k(k, wr, &xq, gemm);
                let (a, b) = (simd[j * stride + off + i], scalar[j * stride + off + i]);
                assert_eq!(
                    a.to_bits(),
                    want.to_bits(),
                    "simd [{n_rows}x{k}] row {i} col {j}: {a} vs {want}"
                );
                assert_eq!(
                    b.to_bits(),
                    want.to_bits(),
                    "scalar [{n_rows}x{k}] row {i} col {j}: {b} vs {want}"
                );
                let plain = cpu::vec_dot(t, k, wr, &xq);
                assert!(
                    (plain - want).abs() <= 1e-3 * (1.0 + want.abs()),
                    "{plain} vs {want}"
                );
            }
        }
    }
}

#[test]
fn q8_k_four_row_quantizer_prefers_the_positive_maximum() {
    let mut x = vec![0.5f32; 256];
    x[3] = -2.0;
    x[100] = 2.0;
    let mut row = vec![0u8; 292];
    cpu::quantize_row(GgmlType::Q8_K, &x, &mut row);
    assert_eq!(
        row[4 + 3] as i8,
        -127,
        "the row quantizer keeps the first maximum's sign"
    );
    repack::q8_k_mat_fixup(&x, &mut row);
    assert_eq!(
        row[4 + 100] as i8,
        -127,
        "the 4-row quantizer maps +max to -127"
    );
    assert_eq!(row[4 + 3] as i8, 127);
    let d = f32::from_le_bytes(row[0..4].try_into().unwrap());
    assert_eq!(d, 1.0 / (-127.0 / 2.0));
}

/// The product of `m` activation rows with the repacked `rp` through the dispatched (SIMD)
/// kernels and through the scalar reference, into outputs of row stride `stride` starting at
/// column `off` (NaN elsewhere).
fn simd_and_scalar(
    rp: &repack::Repacked,
    kind: repack::RepackKind,
    x: &[f32],
    m: usize,
    (stride, off): (usize, usize),
    pool: &ThreadPool,
    scratch: &mut Scratch,
) -> (Vec<f32>, Vec<f32>) {
    let mut simd = vec![f32::NAN; m * stride];
    let mut scalar = vec![f32::NAN; m * stride];
    repack::mul_mat_repacked(rp, x, m, &mut simd, stride, off, pool, scratch);
    repack::mul_mat_repacked_using(
        repack::scalar_kernels(kind),
        rp,
        x,
        m,
        &mut scalar,
        stride,
        off,
        pool,
        scratch,
    );
    (simd, scalar)
}
